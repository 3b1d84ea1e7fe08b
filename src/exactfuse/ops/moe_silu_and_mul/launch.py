"""The host side of ``moe_silu_and_mul``'s Triton provider and its backward's: the launchers (the configuration
from ``heuristics.py``, the outputs allocated, the kernels of ``moe_gated_kernel.py`` launched), the provider
functions with the specs' signatures, and what the kernels take (the providers' ``supports_args``)."""

from __future__ import annotations

import torch
import triton

from exactfuse.ops.moe_silu_and_mul.heuristics import MAX_COLUMN_TILES, MoeConfig, moe_backward_config, moe_config
from exactfuse.ops.moe_silu_and_mul.moe_gated_kernel import moe_silu_and_mul_backward_kernel, moe_silu_and_mul_kernel
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic, needs_int64


def launch_moe_silu_and_mul(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None,
    interleaved: bool,
    out_dtype: torch.dtype | None,
    config: MoeConfig | None = None,
) -> torch.Tensor:
    """Launch :func:`moe_silu_and_mul_kernel`: ``[M, 2N] -> [M, N]``.

    ``config`` defaults to :func:`~exactfuse.ops.moe_silu_and_mul.heuristics.moe_config`; tests and
    sweeps pass another :class:`~exactfuse.ops.moe_silu_and_mul.heuristics.MoeConfig`.
    """
    M, N = gateup.shape[0], gateup.shape[1] // 2
    y = empty((M, N), out_dtype or gateup.dtype, gateup.device)
    if not is_symbolic(M) and M * N == 0:
        return y
    cfg = config or moe_config(N, gateup.element_size(), interleaved)
    has_weights = row_weights is not None
    int64_index = cfg.int64_index
    if int64_index is None:
        int64_index = needs_int64(M, max(gateup.stride(0), 2 * N))
    if cfg.row_grid:
        n_tiles = triton.cdiv(N, cfg.BN)
        torch._check(
            n_tiles <= MAX_COLUMN_TILES, lambda: f"N = {N}: more than {MAX_COLUMN_TILES} column tiles of {cfg.BN}"
        )
        grid = (triton.cdiv(M, cfg.BM), n_tiles)
    else:
        grid = (triton.cdiv(M, cfg.BM) * triton.cdiv(N, cfg.BN),)
    torch.library.wrap_triton(moe_silu_and_mul_kernel)[grid](
        gateup,
        row_weights if has_weights else gateup,
        y,
        M,
        N,
        gateup.stride(0),
        row_weights.stride(0) if has_weights else 0,
        INTERLEAVED=interleaved,
        HAS_WEIGHTS=has_weights,
        INT64_INDEX=int64_index,
        EVEN_N=N % cfg.BN == 0,
        BM=cfg.BM,
        BN=cfg.BN,
        EVICT_FIRST=cfg.evict_first,
        STORE_RUN=cfg.store_run,
        ROW_GRID=cfg.row_grid,
        num_warps=cfg.num_warps,
    )
    return y


def moe_silu_and_mul_triton(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    return launch_moe_silu_and_mul(gateup, row_weights, interleaved, out_dtype)


# ------------------------------------------------------------------ backward
def launch_moe_silu_and_mul_backward(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None,
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch :func:`moe_silu_and_mul_backward_kernel`: ``(d gateup [M, 2N], d row_weights [M])``, the
    second an empty fp32 ``[0]`` without row weights. The launch depends on ``N`` alone
    (:func:`~exactfuse.ops.moe_silu_and_mul.heuristics.moe_backward_config`), so a traced call is correct
    for every M."""
    M, N = gateup.shape[0], gateup.shape[1] // 2
    dx = empty((M, 2 * N), gateup.dtype, gateup.device)
    has_weights = row_weights is not None
    if not has_weights:
        dw = gateup.new_empty((0,), dtype=torch.float32)
    elif N == 0:  # an empty sum
        dw = torch.zeros((M,), dtype=row_weights.dtype, device=gateup.device)
    else:
        dw = empty((M,), row_weights.dtype, gateup.device)
    if N == 0 or (not is_symbolic(M) and M == 0):
        return dx, dw
    cfg = moe_backward_config(N)
    n_tiles = triton.cdiv(N, cfg.BN)
    grid = (triton.cdiv(M, cfg.BM), 1 if has_weights else n_tiles)
    torch.library.wrap_triton(moe_silu_and_mul_backward_kernel)[grid](
        grad,
        gateup,
        row_weights if has_weights else gateup,
        dx,
        dw if has_weights else dx,
        M,
        N,
        grad.stride(0),
        gateup.stride(0),
        row_weights.stride(0) if has_weights else 0,
        INTERLEAVED=interleaved,
        HAS_WEIGHTS=has_weights,
        INT64_INDEX=needs_int64(M, max(grad.stride(0), gateup.stride(0), 2 * N)),
        BM=cfg.BM,
        BN=cfg.BN,
        num_warps=cfg.num_warps,
    )
    return dx, dw


def moe_silu_and_mul_backward_triton(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return launch_moe_silu_and_mul_backward(grad, gateup, row_weights, interleaved)


# ------------------------------------------------------------------ what the kernels take (supports_args)
def triton_supports(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> bool | str:
    """A gateup Triton can read (no bf16 anywhere under the interpreter), its last dim contiguous."""
    if not gateup.is_cuda and (reason := platform.triton_reads("gateup", gateup)) is not True:
        return reason
    if gateup.is_cpu and torch.bfloat16 in (out_dtype, None if row_weights is None else row_weights.dtype):
        return "bfloat16 row_weights or out_dtype on the CPU: the Triton interpreter has no bf16 arithmetic"
    if gateup.stride(1) == 1 or gateup.numel() == 0:
        return True
    return f"gateup has strides {tuple(gateup.stride())}: the kernel reads rows with unit last stride"


def triton_supports_backward(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> bool | str:
    """What the forward kernel takes, and a gradient read as rows with unit last stride (an expanded
    ``y.sum()`` gradient, strides 0, falls back to the spec)."""
    reason = triton_supports(gateup, row_weights, interleaved, out_dtype)
    if reason is not True:
        return reason
    if not grad.is_cuda and (reason := platform.triton_reads("grad", grad)) is not True:
        return reason
    if grad.stride(1) == 1 or grad.numel() == 0:
        return True
    return f"grad has strides {tuple(grad.stride())}: the kernel reads rows with unit last stride"
