"""Op packages, one per op or op family, each with the same files: ``native.py`` (the spec),
``triton.py`` (kernels and launchers), ``heuristics.py`` (the launch rule), ``inputs.py`` (inputs,
warmup, benchmark grids, cost), ``peers.py`` (benchmark peers, where there are any) and ``__init__.py``
(the declaration). ``exactfuse/__init__.py`` imports each package once, which declares its ops.
"""
