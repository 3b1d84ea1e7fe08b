"""Op packages, one per op or op family, each with the same files: ``native.py`` (the spec),
``checks.py`` (the argument checks, the registry's ``check=``), the ``@triton.jit`` kernels in files named for
what they compute (``act_and_mul/gated_kernel.py``, ``conv/prefill.py``, ``w4a16/gemv.py``),
``launch.py`` (the launchers, the provider functions and what the kernels take), ``heuristics.py`` (the
launch rule), ``warmup.py`` (the warmup hooks, from ``launch.py``'s launchers) and ``__init__.py`` (the
declaration, which passes each op its warmup hook). Helpers several packages share live here (``math.py``,
``fastmath.py``, ``arrival.py``). ``exactfuse/__init__.py`` imports each package once, which declares its ops. An
op's inputs, benchmark grids and cost live in the test kit (``exactfuse.testing.cases.<family>``) and its benchmark
peers in the bench (``exactfuse.bench.peers.<family>``); they register themselves through the op, and the registry
imports them on first use. Nothing here imports either.
"""
