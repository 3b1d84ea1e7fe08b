"""Warmup of gelu_and_mul_sparse: the launches ``exactfuse.warmup`` makes so that no kernel compiles inside
a CUDA-graph capture. The op's declaration in ``__init__.py`` takes the hook
(``warmup=warmup.gelu_and_mul_sparse``)."""

from __future__ import annotations

import torch

from exactfuse.ops.gelu_and_mul_sparse import heuristics, launch
from exactfuse.ops.gelu_and_mul_sparse.native import STD_MULTIPLIER
from exactfuse.utils import num_sms


def gelu_and_mul_sparse(device, dtype, *, widths=(2048, 8192, 16384), approximate=("tanh",), **_other_ops_options):
    """Compile the kernels for each output width ``d`` in ``widths`` and each GELU form: every kernel
    :func:`~exactfuse.ops.gelu_and_mul_sparse.heuristics.choose_plan` picks for some batch size at that width."""
    sms = num_sms(torch.device(device))
    for a in (approximate,) if isinstance(approximate, str) else approximate:
        for d in widths:
            seen = set()
            for T in heuristics.warmup_batches(d, sms):
                if (plan := heuristics.choose_plan(T, d, sms)) not in seen:
                    seen.add(plan)
                    x = torch.ones((T, 2 * d), dtype=dtype, device=device)
                    launch.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, a)
