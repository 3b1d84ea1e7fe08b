"""Op packages, one per op or op family, each with the same files: ``native.py`` (the spec),
``triton.py`` (kernels and launchers), ``heuristics.py`` (the launch rule), ``warmup.py`` (the warmup
hooks), ``inputs.py`` (inputs, benchmark grids, cost), ``peers.py`` (benchmark peers, where there are any)
and ``__init__.py`` (the declaration). ``exactfuse/__init__.py`` imports each package once, which declares
its ops; ``inputs.py`` and ``peers.py`` load on first use (``Op.declared_in``).
"""
