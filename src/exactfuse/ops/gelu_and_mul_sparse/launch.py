"""The host side of ``gelu_and_mul_sparse``'s Triton provider: the launcher (the plan from ``heuristics.py``,
the output allocated, the kernels of ``sparse_gelu_kernel.py`` launched), the provider function with the spec's
signature, and what the kernels take (the provider's ``supports_args``)."""

from __future__ import annotations

import torch
import triton

from exactfuse.ops.fastmath import GELU_ERF, GELU_TANH
from exactfuse.ops.gelu_and_mul_sparse import heuristics
from exactfuse.ops.gelu_and_mul_sparse.sparse_gelu_kernel import (
    gelu_and_mul_sparse_kernel,
    gelu_and_mul_sparse_looped_kernel,
    gelu_and_mul_sparse_split_apply_kernel,
    gelu_and_mul_sparse_split_stats_kernel,
)
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic, needs_int64, next_power_of_2, num_sms


def launch_gelu_and_mul_sparse(
    x: torch.Tensor, std_multiplier: float, approximate: str, plan: heuristics.SparsePlan | None = None
) -> torch.Tensor:
    """Launch the kernels on ``x: [..., 2d]`` -> ``[..., d]``.

    ``plan`` defaults to :func:`heuristics.choose_plan` for a concrete row count and to
    :func:`heuristics.traced_plan` for a symbolic one; tests and sweeps pass their own.
    """
    D = x.shape[-1] // 2
    device = x.device  # builds a torch.device: once per call
    y = empty((*x.shape[:-1], D), x.dtype, device)
    x2 = x if x.dim() == 2 else x.reshape(-1, 2 * D)
    T = x2.shape[0]
    if plan is None:
        if is_symbolic(T):
            plan = heuristics.traced_plan(D)
        elif T * D == 0:
            return y
        else:
            plan = heuristics.choose_plan(T, D, num_sms(device))
    common = dict(
        ACTIVATION=GELU_TANH if approximate == "tanh" else GELU_ERF,
        ROUND=plan.round_mask,
        INT64_INDEX=needs_int64(T, x2.stride(0)),
        num_warps=plan.num_warps,
    )
    args = (x2, y, T, D, x2.stride(0), D, float(std_multiplier))
    if plan.kernel == "looped":
        keep = heuristics.looped_keep_gate(D)
        torch.library.wrap_triton(gelu_and_mul_sparse_looped_kernel)[(T,)](
            *args, BC=plan.block, KEEP_GATE=keep, **common
        )
    elif plan.kernel == "split":
        S = triton.cdiv(D, plan.block)
        # fp32 (sum, m2) per row and chunk; the first kernel writes every entry
        stats = empty((T, S, 2), torch.float32, device)
        torch.library.wrap_triton(gelu_and_mul_sparse_split_stats_kernel)[(T, S)](
            x2, stats, D, x2.stride(0), BC=plan.block, INT64_INDEX=common["INT64_INDEX"], num_warps=plan.num_warps
        )
        torch.library.wrap_triton(gelu_and_mul_sparse_split_apply_kernel)[(T, S)](
            *args, stats, BC=plan.block, BS=next_power_of_2(S), **common
        )
    else:
        BT = max(1, 1024 // plan.block)
        torch.library.wrap_triton(gelu_and_mul_sparse_kernel)[(triton.cdiv(T, BT),)](
            *args, BT=BT, BD=plan.block, **common
        )
    return y


def gelu_and_mul_sparse_triton(x: torch.Tensor, std_multiplier: float, approximate: str) -> torch.Tensor:
    return launch_gelu_and_mul_sparse(x, std_multiplier, approximate)


def triton_supports(x: torch.Tensor, std_multiplier: float, approximate: str) -> bool | str:
    """A tensor Triton can read, d <= 32768, 2-D rows with unit last stride or contiguous."""
    if not x.is_cuda and (reason := platform.triton_reads("x", x)) is not True:
        return reason
    if x.shape[-1] // 2 > heuristics.MAX_D:
        return f"x's rows have d = {x.shape[-1] // 2} outputs; the kernels take d <= {heuristics.MAX_D}"
    if (x.dim() == 2 and x.stride(-1) == 1) or x.is_contiguous():
        return True
    return f"x has strides {tuple(x.stride())}: the kernels read contiguous x, or 2-D rows with unit last stride"
