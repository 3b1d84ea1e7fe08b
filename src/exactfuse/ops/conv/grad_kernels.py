"""Triton kernels of ``causal_conv1d_fn_backward``: the gradients of the stateless causal conv with respect
to ``x``, ``weight`` and ``bias`` (launched by ``triton.py``'s :func:`launch_conv_grad`).

Two kernels over ``[BT, BC]`` tiles of rows and channels (``heuristics.conv_grad_config``), each row's
sequence found by the forward's binary search over ``query_start_loc`` (``slots.find_request``):

- :func:`conv_grad_rows_kernel` recomputes the conv of its rows (the forward's tap sum, ``kernels._tap_sum``
  order and roundings) and turns the output's gradient into the conv's, ``dconv`` (fp32): through the SiLU
  as ATen's CUDA ``silu_backward`` evaluates it (``exactfuse.ops.math.activation_backward``) at the conv
  the forward's SiLU read (rounded to x's dtype for 16-bit weights, and the result rounded to it as well,
  since eager's ``silu_backward`` returns that dtype; unrounded for fp32 weights), zero on rows without an
  output. A program walks ``STEPS`` tiles down the rows: it stores their ``dconv`` and keeps the sums
  ``dconv`` (d bias) and ``dconv · tap_k`` (d weight) per row position of the tile in registers, summed over
  the tile's rows once at the end (one cross-thread reduction a program, not one a tile and tap).
- The gradient of the initial states (``[R, C, SL]``, small) is gathered from ``dconv`` by torch in the
  launcher (``native.initial_state_grads``).
- :func:`conv_grad_x_kernel` gathers ``dx[s] = Σ_k w[k] · dconv[s + SL - D k]`` over the rows ``s + SL -
  D k`` of the same sequence (and ``seq_idx``) in fp32, ``k`` ascending, one rounding to x's dtype.

The launcher sums the per-program partials over the programs in a fixed order (``torch.sum`` over a
dimension of a static shape): the weight and bias gradients are the same bits run to run, without atomics.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.kernels import _row_seq
from exactfuse.ops.conv.slots import find_request, mask_and
from exactfuse.ops.math import activation_backward, mul_rn


@triton.jit
def _tap(p_x, p_seq, p_init, o_t, r, q_start, o_c, m_c, out_ok, seq, L, stride_x, stride_i_r, stride_i_c, stride_i_w,
         k, K: tl.constexpr, D: tl.constexpr, HAS_SEQ_IDX: tl.constexpr, HAS_INIT: tl.constexpr):  # fmt: skip
    """Tap ``k`` of rows ``o_t``: the input row ``o_t + D k - SL`` in fp32; before the row's sequence its
    history position (HAS_INIT: ``p_init[r]``, request ``r``'s initial state), else zero; zero past the rows,
    across a ``seq_idx`` change, or where the row has no output."""
    o_row = o_t + D * k - (K - 1) * D
    m_x = (o_row >= q_start) & out_ok & (o_row < L)
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
    seq, out_ok = _row_seq(p_seq, o_t, in_range, L, HAS_SEQ_IDX)
    return o_t[:, None], o_c, o_c < C, r[:, None], q_start[:, None], q_end[:, None], seq[:, None], out_ok[:, None]


@triton.jit(do_not_specialize=["L", "R"])
def conv_grad_rows_kernel(
    p_g, p_x, p_w, p_b, p_qsl, p_seq, p_init, p_dconv, p_dw, p_db, L, R, C,
    stride_g, stride_x, stride_w_c, stride_w_k, stride_i_r, stride_i_c, stride_i_w,
    K: tl.constexpr, KP: tl.constexpr, D: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    HAS_SEQ_IDX: tl.constexpr, HAS_INIT: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, STEPS: tl.constexpr,
):  # fmt: skip
    """``dconv`` of ``STEPS`` tiles of ``BT`` rows x ``BC`` channels down the rows, and this program's
    partial sums of the weight and bias gradients.

    p_g: the output's gradient ``[L, C]``, rows ``stride_g`` apart; p_x ``[L, C]`` rows ``stride_x`` apart;
    p_w ``[C, K]`` (x's dtype or fp32), p_b ``[C]`` (HAS_BIAS); p_qsl ``[R + 1]`` int32; p_seq ``[L]`` int32
    (HAS_SEQ_IDX); p_init ``[R, C, SL]`` with strides ``stride_i_*`` (HAS_INIT: each sequence's history). Unit
    channel strides. p_dconv: ``[L, C]`` contiguous, fp32 for an fp32 weight's SiLU, else x's dtype (dconv
    is a value of it there); p_dw: ``[programs, K, C]`` fp32;
    p_db: ``[programs, C]`` fp32 (HAS_BIAS). ACT: 0 SiLU, -1 none. KP: ``K``'s power of two, the taps'
    axis of the ``[BT, KP, BC]`` weight-gradient sums (each step adds ``dconv · tap_k`` to them, and the
    rows are summed once at the end: fixed orders, no atomics).
    """
    i_t = tl.program_id(0)
    k3 = tl.arange(0, KP)[None, :, None]
    dw_sums = tl.zeros([BT, KP, BC], dtype=tl.float32)
    db_sums = tl.zeros([BT, BC], dtype=tl.float32)
    for step in range(STEPS):
        rows, o_c, m_c, r, q_start, _, seq, out_ok = _tile(
            p_qsl, p_seq, (i_t * STEPS + step) * BT, L, R, C, HAS_SEQ_IDX, BT, BC
        )
        acc = tl.zeros([BT, BC], dtype=tl.float32)
        for k in tl.static_range(K):
            w_k = tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c).to(tl.float32)
            tap = _tap(p_x, p_seq, p_init, rows, r, q_start, o_c, m_c, out_ok, seq, L, stride_x, stride_i_r,
                       stride_i_c, stride_i_w, k, K, D, HAS_SEQ_IDX, HAS_INIT)  # fmt: skip
            acc = acc + mul_rn(w_k, tap)
        if HAS_BIAS:
            acc = acc + tl.load(p_b + o_c, mask=m_c).to(tl.float32)
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
        taps = _tap(p_x, p_seq, p_init, rows[:, :, None], r[:, :, None], q_start[:, :, None], o_c[:, None, :],
                    m_c[:, None, :] & (k3 < K), out_ok[:, :, None], seq[:, :, None], L, stride_x, stride_i_r,
                    stride_i_c, stride_i_w, k3, K, D, HAS_SEQ_IDX, HAS_INIT)  # fmt: skip
        dw_sums += mul_rn(dconv[:, None, :], taps)
    o_c1 = tl.program_id(1) * BC + tl.arange(0, BC)
    m_c1 = o_c1 < C
    if HAS_BIAS:
        tl.store(p_db + i_t.to(tl.int64) * C + o_c1, tl.sum(db_sums, 0), mask=m_c1)
    k2 = tl.arange(0, KP)[:, None]
    o_dw = (i_t.to(tl.int64) * K + k2) * C + o_c1[None, :]
    tl.store(p_dw + o_dw, tl.sum(dw_sums, 0), mask=(k2 < K) & m_c1[None, :])


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
    acc = tl.zeros([BT, BC], dtype=tl.float32)
    for k in tl.static_range(K):
        dest = rows + (K - 1 - k) * D  # the row whose tap k is row s
        m_d = out_ok & (dest < q_end) & (dest < L)
        if HAS_SEQ_IDX:
            m_d = m_d & (tl.load(p_seq + dest, mask=m_d, other=-1) == seq)
        d = tl.load(p_dconv + dest.to(tl.int64) * C + o_c, mask=mask_and(m_c, m_d), other=0.0).to(tl.float32)
        w_k = tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c).to(tl.float32)
        acc = acc + mul_rn(w_k, d)
    tl.store(p_dx + rows.to(tl.int64) * stride_dx + o_c, acc.to(p_dx.dtype.element_ty), mask=mask_and(m_c, rows < L))
