"""Triton kernels of ``moe_silu_and_mul``: ``silu(gate) * up [* w]`` in fp32, one rounding.

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

import triton
import triton.language as tl

from exactfuse.ops.math import exact_exp, mul_rn


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
