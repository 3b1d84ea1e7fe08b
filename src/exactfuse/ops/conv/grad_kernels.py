"""Triton kernels of ``causal_conv1d_fn_backward``: the gradients of the stateless causal conv with respect
to ``x``, ``weight`` and ``bias`` (launched by ``launch.py``'s :func:`launch_conv_grad`).

Two kernels over ``[BT, BC]`` tiles of rows and channels (``heuristics.conv_grad_config``), each row's
sequence found by the forward's binary search over ``query_start_loc`` (``slots.find_request``):

- :func:`conv_grad_rows_kernel` recomputes the conv of its rows (the forward's tap sum, ``rows.tap_sum``
  order and roundings) and turns the output's gradient into the conv's, ``dconv`` (fp32): through the SiLU
  as ATen's CUDA ``silu_backward`` evaluates it (``exactfuse.ops.math.activation_backward``) at the conv
  the forward's SiLU read (rounded to x's dtype for 16-bit weights, and the result rounded to it as well,
  since eager's ``silu_backward`` returns that dtype; unrounded for fp32 weights), zero on rows without an
  output. A program walks ``STEPS`` tiles down the rows: it stores their ``dconv`` and keeps the sums
  ``dconv`` (d bias) and ``dconv · tap_k`` (d weight) per row position of the tile in registers, summed over
  the tile's rows once at the end as a pairwise tree (:func:`_sum_rows`: the same bits under any layout).
- :func:`conv_grad_init_kernel` gathers the initial states' gradient (``[R, C, SL]``, small) from ``dconv``:
  ``Σ_k w[k] · dconv[start_r + j - D k]`` over the rows of sequence ``r``, ``k`` ascending, each product
  rounded before its sum (``native_grads.initial_state_grads``). A kernel, not torch ops in the launcher: under
  torch.compile, Inductor fuses those ops' multiply and add into one FMA (a compiled backward whose initial
  states' gradient differed from eager in its last bits).
- :func:`conv_grad_x_kernel` gathers ``dx[s] = Σ_k w[k] · dconv[s + SL - D k]`` over the rows ``s + SL -
  D k`` of the same sequence (and ``seq_idx``) in fp32, ``k`` ascending, one rounding to x's dtype.

The launcher sums the per-program partials over the programs in a fixed order (``torch.sum`` over a
dimension of a static shape): the weight and bias gradients are the same bits run to run, without atomics.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.lean import tile_weights
from exactfuse.ops.conv.rounding import bias_values
from exactfuse.ops.conv.rows import row_seq
from exactfuse.ops.conv.slots import find_request, mask_and
from exactfuse.ops.math import activation_backward, mul_rn


@triton.jit
def _tap(
    p_x, p_seq, p_init, o_t, r, q_start, first, o_c, m_c, out_ok, seq, L, stride_x, stride_i_r, stride_i_c, stride_i_w,
    k, K: tl.constexpr, D: tl.constexpr, HAS_SEQ_IDX: tl.constexpr, HAS_INIT: tl.constexpr,
):  # fmt: skip
    """Tap ``k`` of rows ``o_t``: the input row ``o_t + D k - SL`` in fp32; before the row's sequence its
    history position (HAS_INIT: ``p_init[r]``, request ``r``'s initial state), else zero; zero past the rows,
    across a ``seq_idx`` change, or where the row has no output. ``first``: the row's sequence start where it
    has an output, else past every row (:func:`_row_bound`)."""
    o_row = o_t + D * k - (K - 1) * D
    m_x = (o_row >= first) & (o_row < L)
    if HAS_SEQ_IDX:
        m_x = m_x & (tl.load(p_seq + o_row, mask=m_x, other=-1) == seq)
    value = tl.load(p_x + o_row.to(tl.int64) * stride_x + o_c, mask=mask_and(m_c, m_x), other=0.0).to(tl.float32)
    if HAS_INIT:
        h = o_row - q_start + (K - 1) * D  # the history position, for rows before the sequence's start
        m_s = out_ok & (o_row < q_start)
        o_s = r.to(tl.int64) * stride_i_r + o_c * stride_i_c + h * stride_i_w
        value = tl.where(
            o_row < q_start, tl.load(p_init + o_s, mask=mask_and(m_c, m_s), other=0.0).to(tl.float32), value
        )
    return value


@triton.jit
def _row_bound(bound, out_ok, m_c, none):
    """A ``[BT, 1]`` column of row facts (``bound`` where the row has an output, else ``none``) as a ``[BT, BC]``
    tile (0 on masked channels), for the tile's masks to compare against. The facts take the layout of their
    loads (``query_start_loc``'s gathers), not the tile's: as a tile, they move to the tile's layout once. A
    column is combined into each tap's mask first and moved once a tap, each move a store to shared memory,
    a barrier at which the program's warps wait for one another, and a load back."""
    return tl.where(m_c, tl.where(out_ok, bound, none), 0)


@triton.jit
def _sum_rows(t):
    """``t`` (``[BT, BC]``, BT a power of two) summed over its rows as a pairwise tree: rows ``2i`` and ``2i +
    1`` added, then the halves' rows the same way. Each addition is of two values, whose order does not change
    its bits, so the sum is the same whatever register layout the compiler gives the tile (a ``tl.sum`` over
    the rows adds in an order that follows the layout, which follows the launch's specialization: alignment,
    strides known to be 1)."""
    for _i in tl.static_range(t.shape[0]):
        if t.shape[0] > 1:
            t = tl.sum(tl.reshape(t, (t.shape[0] // 2, 2, t.shape[1])), 1)
    return tl.reshape(t, (t.shape[1],))


@triton.jit
def _tile(p_qsl, p_seq, row0, L, R, C, HAS_SEQ_IDX: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """Rows ``row0 + [0, BT)`` (a ``[BT, 1]`` column) and this program's ``BC`` channels (``[1, BC]``, with
    their mask), and per row its sequence, that sequence's start and end, ``seq_idx`` and whether it has
    an output."""
    o_t = row0 + tl.arange(0, BT)
    o_c = (tl.program_id(1) * BC + tl.arange(0, BC))[None, :]
    r = find_request(o_t, R, p_qsl)
    q_start = tl.load(p_qsl + r)
    q_end = tl.load(p_qsl + r + 1, mask=r + 1 <= R, other=0)
    in_range = (q_start <= o_t) & (o_t < tl.load(p_qsl + R))
    seq, out_ok = row_seq(p_seq, o_t, in_range, L, HAS_SEQ_IDX)
    return o_t[:, None], o_c, o_c < C, r[:, None], q_start[:, None], q_end[:, None], seq[:, None], out_ok[:, None]


@triton.jit(do_not_specialize=["L", "R"])
def conv_grad_rows_kernel(
    p_g, p_x, p_w, p_b, p_qsl, p_seq, p_init, p_dconv, p_dw, p_db, L, R, C,
    stride_g, stride_x, stride_w_c, stride_w_k, stride_i_r, stride_i_c, stride_i_w,
    K: tl.constexpr, D: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_SEQ_IDX: tl.constexpr,
    HAS_INIT: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, STEPS: tl.constexpr, W_ALIGN: tl.constexpr,
    W_WORD: tl.constexpr,
):  # fmt: skip
    """``dconv`` of ``STEPS`` tiles of ``BT`` rows x ``BC`` channels down the rows, and this program's
    partial sums of the weight and bias gradients.

    p_g: the output's gradient ``[L, C]``, rows ``stride_g`` apart; p_x ``[L, C]`` rows ``stride_x`` apart;
    p_w ``[C, K]`` (x's dtype or fp32), p_b ``[C]`` (HAS_BIAS); p_qsl ``[R + 1]`` int32; p_seq ``[L]`` int32
    (HAS_SEQ_IDX); p_init ``[R, C, SL]`` with strides ``stride_i_*`` (HAS_INIT: each sequence's history). Unit
    channel strides. p_dconv: ``[L, C]`` contiguous, fp32 for an fp32 weight's SiLU, else x's dtype (dconv
    is a value of it there); p_dw: ``[programs, K, C]`` fp32; p_db: ``[programs, C]`` fp32 (HAS_BIAS).
    ACT: 0 SiLU, -1 none. W_ALIGN, W_WORD: how the weights are read (``lean.tile_weights``), once a program
    in the tile's register layout.

    The weight-gradient sums are ``K`` ``[BT, BC]`` tiles, each step adding ``dconv · tap_k`` from the taps
    the recompute loaded (no second load of the taps, no 3-D layout); the rows are summed once at the end:
    fixed orders, no atomics.
    """
    i_t = tl.program_id(0)
    o_c = (tl.program_id(1) * BC + tl.arange(0, BC))[None, :]
    zeros = tl.zeros([BT, BC], dtype=tl.float32)
    column = tl.arange(0, BT)[:, None]
    weights = tile_weights(p_w, o_c, o_c < C, column, stride_w_c, stride_w_k, K, W_ALIGN, W_WORD)
    dw_sums = ()
    for _k in tl.static_range(K):
        dw_sums += (zeros,)
    db_sums = zeros
    for step in range(STEPS):
        rows, o_c, m_c, r, q_start, _, seq, out_ok = _tile(
            p_qsl, p_seq, (i_t * STEPS + step) * BT, L, R, C, HAS_SEQ_IDX, BT, BC
        )
        first = _row_bound(q_start, out_ok, m_c, 2147483647)  # the first row a tap may read; past all without an output
        out_ok = rows >= first
        acc = zeros
        taps = ()
        for k in tl.static_range(K):
            tap = _tap(p_x, p_seq, p_init, rows, r, q_start, first, o_c, m_c, out_ok, seq, L, stride_x, stride_i_r,
                       stride_i_c, stride_i_w, k, K, D, HAS_SEQ_IDX, HAS_INIT)  # fmt: skip
            taps += (tap,)
            acc = acc + mul_rn(weights[k], tap)
        if HAS_BIAS:  # read in the tile's shape each step (L1 hits), not held across the loop in registers
            acc = acc + bias_values(p_b, o_c, m_c, rows, HAS_BIAS)
        g = tl.load(p_g + rows.to(tl.int64) * stride_g + o_c, mask=mask_and(m_c, out_ok), other=0.0).to(tl.float32)
        if ACT >= 0:
            if p_w.dtype.element_ty == tl.float32:  # the SiLU read the fp32 conv; no rounding on the way back
                _, dconv = activation_backward(acc, g, ACT)
            else:  # it read the conv rounded to x's dtype, and eager's silu_backward returns that dtype
                conv = acc.to(p_x.dtype.element_ty).to(tl.float32)
                _, dconv = activation_backward(conv, g, ACT)
                dconv = dconv.to(p_x.dtype.element_ty).to(tl.float32)
        else:
            dconv = g
        dconv = tl.where(out_ok & m_c, dconv, 0.0)
        m_row = mask_and(m_c, rows < L)
        tl.store(p_dconv + rows.to(tl.int64) * C + o_c, dconv.to(p_dconv.dtype.element_ty), mask=m_row)
        db_sums += dconv
        summed = ()
        for k in tl.static_range(K):
            summed += (dw_sums[k] + mul_rn(dconv, taps[k]),)
        dw_sums = summed
    o_c1 = tl.program_id(1) * BC + tl.arange(0, BC)
    m_c1 = o_c1 < C
    if HAS_BIAS:
        tl.store(p_db + i_t.to(tl.int64) * C + o_c1, _sum_rows(db_sums), mask=m_c1)
    for k in tl.static_range(K):
        tl.store(p_dw + (i_t.to(tl.int64) * K + k) * C + o_c1, _sum_rows(dw_sums[k]), mask=m_c1)


@triton.jit(do_not_specialize=["L", "R"])
def conv_grad_x_kernel(
    p_dconv, p_w, p_qsl, p_seq, p_dx, L, R, C, stride_dx, stride_w_c, stride_w_k,
    K: tl.constexpr, D: tl.constexpr, HAS_SEQ_IDX: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
):  # fmt: skip
    """``dx`` of ``BT`` rows x ``BC`` channels: row ``s`` collects ``w[k] · dconv[s + SL - D k]`` for ``k``
    ascending over the rows of its own sequence (and ``seq_idx``), in fp32, rounded once to p_dx's dtype.
    p_dconv ``[L, C]`` contiguous (zero on rows without an output); p_dx ``[L, C]`` rows ``stride_dx``
    apart; the rest as :func:`conv_grad_rows_kernel`."""
    rows, o_c, m_c, _, _, q_end, seq, out_ok = _tile(p_qsl, p_seq, tl.program_id(0) * BT, L, R, C, HAS_SEQ_IDX, BT, BC)
    end = _row_bound(q_end, out_ok, m_c, -2147483648)  # the end of the rows a row's gradient reads from
    acc = tl.zeros([BT, BC], dtype=tl.float32)
    for k in tl.static_range(K):
        dest = rows + (K - 1 - k) * D  # the row whose tap k is row s
        m_d = (dest < end) & (dest < L)
        if HAS_SEQ_IDX:
            m_d = m_d & (tl.load(p_seq + dest, mask=m_d, other=-1) == seq)
        d = tl.load(p_dconv + dest.to(tl.int64) * C + o_c, mask=mask_and(m_c, m_d), other=0.0).to(tl.float32)
        w_k = tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c).to(tl.float32)
        acc = acc + mul_rn(w_k, d)
    tl.store(p_dx + rows.to(tl.int64) * stride_dx + o_c, acc.to(p_dx.dtype.element_ty), mask=mask_and(m_c, rows < L))


@triton.jit
def conv_grad_init_kernel(
    p_dconv, p_w, p_qsl, p_out, C, stride_d_t, stride_w_c, stride_w_k,
    K: tl.constexpr, D: tl.constexpr, BC: tl.constexpr,
):  # fmt: skip
    """``d initial_states`` of sequence ``r = program_id(0)`` for ``BC`` channels, into ``out [R, SL, C]``
    (the launcher returns its ``[R, C, SL]`` view, the spec's strides): history position ``j`` is tap ``k``
    of row ``start_r + j - D k`` when that row is in the sequence, zero otherwise; fp32, ``k`` ascending,
    each product rounded (``mul_rn``) and then summed, rounded once to the states' dtype at the store."""
    SL: tl.constexpr = (K - 1) * D
    r = tl.program_id(0).to(tl.int64)
    o_c = tl.program_id(1) * BC + tl.arange(0, BC)
    m_c = o_c < C
    start = tl.load(p_qsl + r)
    end = tl.load(p_qsl + r + 1)
    for j in tl.static_range(SL):
        acc = tl.zeros([BC], dtype=tl.float32)
        for k in tl.static_range(K):
            row = start + (j - D * k)
            ok = (row >= start) & (row < end)
            v = tl.load(p_dconv + row.to(tl.int64) * stride_d_t + o_c, mask=mask_and(m_c, ok), other=0.0).to(tl.float32)
            w = tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c, other=0.0).to(tl.float32)
            acc = acc + mul_rn(w, v)
        tl.store(p_out + (r * SL + j) * C + o_c, acc.to(p_out.dtype.element_ty), mask=m_c)
