"""Op packages, one per op or op family, each with the same files: ``native.py`` (the spec),
``checks.py`` (the argument checks, the registry's ``check=``), ``triton.py`` (the Triton provider: kernels,
launchers, the provider functions and ``triton_supports``, what the kernels take), ``heuristics.py`` (the
launch rule), ``warmup.py`` (the warmup hooks) and ``__init__.py`` (the declaration). Kernels that outgrow
``triton.py`` live in modules named for what they hold (``conv/kernels.py``, ``w4a16/gemv.py``); helpers
several packages share live here (``math.py``, ``fastmath.py``, ``arrival.py``). ``exactfuse/__init__.py``
imports each package once, which declares its ops. An op's inputs, benchmark grids and cost live in the
test kit (``exactfuse.testing.cases.<family>``) and its benchmark peers in the bench
(``exactfuse.bench.peers.<family>``); they register themselves through the op, and the registry imports them
on first use. Nothing here imports either.
"""
