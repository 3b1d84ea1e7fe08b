"""Op packages, one per op or op family, each with the same files: ``native.py`` (the spec),
``checks.py`` (the argument checks, the registry's ``check=``), the ``@triton.jit`` kernels in files named for
what they compute (``act_and_mul/gated_kernel.py``, ``sparse_paged_attention/partial_kernel.py``),
``launch.py`` (the launchers, the provider functions and ``triton_supports``, what the kernels take),
``heuristics.py`` (the launch rule), ``warmup.py`` (the warmup hooks, from ``launch.py``'s launchers) and
``__init__.py`` (the declaration, which passes each op its warmup hook). ``conv/`` and ``w4a16/`` keep their
launchers in ``triton.py`` and kernels in modules named for what they hold (``conv/kernels.py``,
``w4a16/gemv.py``), and register their warmup hooks with ``@op.warmup``. Helpers several packages share live
here (``math.py``, ``fastmath.py``, ``arrival.py``). ``exactfuse/__init__.py``
imports each package once, which declares its ops. An op's inputs, benchmark grids and cost live in the
test kit (``exactfuse.testing.cases.<family>``) and its benchmark peers in the bench
(``exactfuse.bench.peers.<family>``); they register themselves through the op, and the registry imports them
on first use. Nothing here imports either.
"""
