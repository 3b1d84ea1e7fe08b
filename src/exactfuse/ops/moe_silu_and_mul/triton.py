"""Triton kernel for ``moe_silu_and_mul``: ``silu(gate) * up [* w]`` in fp32, one rounding.

One kernel serves both layouts, with and without row weights, through
``constexpr`` flags (``INTERLEAVED``, ``HAS_WEIGHTS``, ``INT64_INDEX``,
``EVEN_N``). The math repeats the spec's order exactly: gate and up to fp32,
``(g * sigmoid(g)) * u``, then ``* w``, then one cast at the store. The sigmoid
is ``1 / (1 + exp(-g))`` with libdevice ``exp`` and an IEEE division
(``div_rn``), which is how ATen's ``sigmoid_kernel_cuda`` evaluates
``torch.sigmoid`` in fp32; Triton's ``tl.sigmoid``/``tl.exp`` use the
approximate ``ex2.approx`` path.

The interleaved layout is read as one contiguous ``[BM, 2*BN]`` tile and split
into gate and up in registers (``reshape`` to ``[BM, BN, 2]`` + ``split``), so
both layouts issue the same wide, coalesced loads; a stride-2 gather per
operand would touch every sector twice.

The backward kernel (``moe_silu_and_mul_backward_kernel``) computes what eager autograd computes for the
spec (``native.moe_silu_and_mul_backward``), every product a ``mul_rn`` that no compiler contracts: the
gateup gradient bit for bit; the row weights' gradient, a sum over the columns, in the kernel's own order
(a tree within a column tile, tiles in order), deterministic but not ATen's reduction order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from exactfuse.ops.math import exact_exp, mul_rn
from exactfuse.ops.moe_silu_and_mul.heuristics import MAX_COLUMN_TILES, MoeConfig, moe_backward_config, moe_config
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic, needs_int64


@triton.jit(do_not_specialize=["M"])
def moe_silu_and_mul_kernel(
    p_x,
    p_w,
    p_y,
    M,
    N,
    stride_x,
    stride_w,
    INTERLEAVED: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    EVEN_N: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    STORE_RUN: tl.constexpr,
    ROW_GRID: tl.constexpr,
):
    """One ``[BM, BN]`` output tile of ``y = g * sigmoid(g) * u [* w]``.

    p_x: ``[M, 2N]`` rows ``stride_x`` apart, last dim contiguous; split
    (gate at column ``n``, up at ``N + n``) or interleaved (gate at ``2n``, up
    at ``2n + 1``). p_w: ``[M]`` fp32 or the input dtype, ``stride_w`` apart
    (unused unless HAS_WEIGHTS). p_y: ``[M, N]`` contiguous.

    The grid is flat and N-fastest: consecutive programs cover consecutive
    column tiles of one row block, so the reads of neighbouring programs are
    adjacent in memory; with ROW_GRID it is ``(row blocks, column tiles)``,
    row blocks fastest (no division of the program id). constexpr: INTERLEAVED, HAS_WEIGHTS, INT64_INDEX
    (offsets may reach 2**31), EVEN_N (``N % BN == 0``: no column mask), BM, BN,
    EVICT_FIRST (``evict_first`` on the gateup loads), STORE_RUN (see
    ``heuristics.store_run``; 0: no hint). When ``BM == 1`` the grid has exactly M row
    blocks, so the row mask is elided too and an ``EVEN_N`` tile is loaded and
    stored without any mask.
    """
    if ROW_GRID:
        i_m = tl.program_id(0)
        i_n = tl.program_id(1)
        if INT64_INDEX:
            i_m = i_m.to(tl.int64)
    else:
        i_p = tl.program_id(0)
        if INT64_INDEX:
            i_p = i_p.to(tl.int64)
        n_tiles = tl.cdiv(N, BN)
        i_m = i_p // n_tiles
        i_n = i_p % n_tiles
    NO_MASK: tl.constexpr = BM == 1 and EVEN_N
    X_POLICY: tl.constexpr = "evict_first" if EVICT_FIRST else ""

    o_m = i_m * BM + tl.arange(0, BM)
    o_n = i_n * BN + tl.arange(0, BN)
    # Masks are None where the tile is known to be in bounds; masked-off lanes
    # load undefined values that are computed on and never stored.
    m_m = None if BM == 1 else o_m < M
    m_n = None if EVEN_N else o_n < N
    if NO_MASK:
        m_mn = None
    elif BM == 1:
        m_mn = m_n[None, :]
    elif EVEN_N:
        m_mn = m_m[:, None]
    else:
        m_mn = m_m[:, None] & m_n[None, :]

    p_row = p_x + o_m[:, None] * stride_x
    if INTERLEAVED:
        # One contiguous [BM, 2*BN] tile, split into (gate, up) in registers.
        o_2n = i_n * (2 * BN) + tl.arange(0, 2 * BN)
        if NO_MASK:
            m_2n = None
        elif EVEN_N:
            m_2n = m_m[:, None]
        elif BM == 1:
            m_2n = o_2n[None, :] < 2 * N
        else:
            m_2n = m_m[:, None] & (o_2n[None, :] < 2 * N)
        b_x = tl.load(p_row + o_2n[None, :], mask=m_2n, eviction_policy=X_POLICY)
        b_g, b_u = tl.split(tl.reshape(b_x, (BM, BN, 2)))
    else:
        p_g = p_row + o_n[None, :]
        b_g = tl.load(p_g, mask=m_mn, eviction_policy=X_POLICY)
        b_u = tl.load(p_g + N, mask=m_mn, eviction_policy=X_POLICY)
    b_g = b_g.to(tl.float32)
    b_u = b_u.to(tl.float32)

    # fp32 throughout, in the spec's order; IEEE division, libdevice exp.
    b_y = b_g * tl.div_rn(1.0, 1.0 + exact_exp(-b_g)) * b_u
    if HAS_WEIGHTS:
        b_w = tl.load(p_w + o_m * stride_w, mask=m_m, eviction_policy="evict_last")
        b_y = b_y * b_w.to(tl.float32)[:, None]

    if STORE_RUN > 0:
        o_n = tl.max_contiguous(o_n, STORE_RUN)
    tl.store(p_y + o_m[:, None] * N + o_n[None, :], b_y.to(p_y.dtype.element_ty), mask=m_mn)


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
@triton.jit(do_not_specialize=["M"])
def moe_silu_and_mul_backward_kernel(
    p_dy,
    p_x,
    p_w,
    p_dx,
    p_dw,
    M,
    N,
    stride_dy,
    stride_x,
    stride_w,
    INTERLEAVED: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    """The gradients of ``y = g * sigmoid(g) * u [* w]`` for ``BM`` rows and one column tile, or, with
    HAS_WEIGHTS, every column tile of the ``BM`` rows in order (the row weights' gradient sums a whole row).

    p_dy: ``[M, N]`` the output's gradient, rows ``stride_dy`` apart, last dim contiguous. p_x: gateup
    ``[M, 2N]`` as the forward kernel reads it (rows ``stride_x`` apart; split or INTERLEAVED). p_w: ``[M]``
    ``stride_w`` apart (unused unless HAS_WEIGHTS). p_dx: ``[M, 2N]`` contiguous, gateup's layout. p_dw:
    ``[M]`` contiguous, row_weights' dtype (unused unless HAS_WEIGHTS). Grid ``(row blocks, column
    programs)``: without weights one program per column tile, with weights one per row block.

    In fp32, as eager autograd: ``dy * y1`` summed over the row into ``dw`` (``y1 = (g s) u``); ``dy *= w``;
    ``da = dy u``, ``d up = dy (g s)``, ``d gate = da s + (((da g) (1 - s)) s)``; a zero gateup gradient is
    stored as +0 (autograd sums the halves' gradients into zeros of gateup's shape). constexpr:
    INTERLEAVED, HAS_WEIGHTS, INT64_INDEX (offsets may reach 2**31), BM, BN.
    """
    i_m = tl.program_id(0)
    if INT64_INDEX:
        i_m = i_m.to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    m_m = o_m < M
    p_row = p_x + o_m[:, None] * stride_x
    p_drow = p_dx + o_m[:, None] * (2 * N)
    DT = p_dx.dtype.element_ty
    if HAS_WEIGHTS:
        b_w = tl.load(p_w + o_m * stride_w, mask=m_m).to(tl.float32)
        b_dw = tl.zeros((BM,), dtype=tl.float32)
    for i_n in range(tl.program_id(1), tl.cdiv(N, BN), tl.num_programs(1)):
        o_n = i_n * BN + tl.arange(0, BN)
        m_mn = m_m[:, None] & (o_n[None, :] < N)
        if INTERLEAVED:
            o_2n = i_n * (2 * BN) + tl.arange(0, 2 * BN)
            m_2n = m_m[:, None] & (o_2n[None, :] < 2 * N)
            b_g, b_u = tl.split(tl.reshape(tl.load(p_row + o_2n[None, :], mask=m_2n, other=0.0), (BM, BN, 2)))
        else:
            b_g = tl.load(p_row + o_n[None, :], mask=m_mn, other=0.0)
            b_u = tl.load(p_row + N + o_n[None, :], mask=m_mn, other=0.0)
        b_g = b_g.to(tl.float32)
        b_u = b_u.to(tl.float32)
        b_dy = tl.load(p_dy + o_m[:, None] * stride_dy + o_n[None, :], mask=m_mn, other=0.0).to(tl.float32)
        b_s = tl.div_rn(1.0, 1.0 + exact_exp(-b_g))  # torch.sigmoid, as the forward kernel
        b_a = mul_rn(b_g, b_s)
        if HAS_WEIGHTS:
            b_t = tl.where(m_mn, mul_rn(b_dy, mul_rn(b_a, b_u)), 0.0)  # mul's backward: grad * (a u)
            b_dw += tl.sum(b_t, axis=1)
            b_dy = mul_rn(b_dy, b_w[:, None])
        b_da = mul_rn(b_dy, b_u)
        b_du = mul_rn(b_dy, b_a)
        b_dg = mul_rn(b_da, b_s) + mul_rn(mul_rn(mul_rn(b_da, b_g), 1.0 - b_s), b_s)
        b_dg = tl.where(b_dg == 0.0, 0.0, b_dg).to(DT)  # -0 + 0 = +0, before the cast as autograd sums
        b_du = tl.where(b_du == 0.0, 0.0, b_du).to(DT)
        if INTERLEAVED:
            tl.store(p_drow + o_2n[None, :], tl.reshape(tl.join(b_dg, b_du), (BM, 2 * BN)), mask=m_2n)
        else:
            tl.store(p_drow + o_n[None, :], b_dg, mask=m_mn)
            tl.store(p_drow + N + o_n[None, :], b_du, mask=m_mn)
    if HAS_WEIGHTS:
        tl.store(p_dw + o_m, b_dw.to(p_dw.dtype.element_ty), mask=m_m)


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
