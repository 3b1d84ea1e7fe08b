"""Triton kernels of the conv family: ``short_conv``, ``causal_conv1d`` and ``causal_conv1d_update``.

Three kernels (launched by ``triton.py``), with ``constexpr`` flags for the three ops and three modes:

- :func:`conv_lean_kernel` (prefill without a token map or ``seq_idx``): the ``[BT, BC]`` tiles with no
  request boundary near them, each ``K`` shifted loads and the tap sum; the row kernel's FIXUP launch
  then takes the tiles it left (at boundaries, the first and the last).
- :func:`conv_rows_kernel`, one program per (row block, channel block): one row in decode, a
  ``[BT, BC]`` tile in spec/prefill (each tap's rows loaded, or runs of rows over a register window:
  ``UNROLL``), each row's request found by a binary search over ``query_start_loc``. Sums the ``K``
  taps in fp32 in ascending ``k``, rounds as the spec does (``native.py``) and stores the residual
  (``short_conv``) or the output (``causal_conv1d*``). In decode mode it also shifts the row's state
  window (each request is one row, so nothing else reads that slot).
- :func:`conv_state_kernel`, one program per (request, channel block), launched after the first in
  spec and prefill mode so that every row has read the old state: writes the new window.

Each product is ``mul_rn`` (``exactfuse.ops.math``: ``mul.rn.f32``, which the compiler does not contract
into an FMA), then added, the spec's separately rounded multiply and add. Where both factors are fp16
values (fp16 weights, input and state) the product is exact in fp32, so one ``fma_rn`` gives the same bits
(:func:`_tap`); bf16 products can fall outside fp32's range or precision, so bf16 keeps the two.

The SiLU reads the conv already rounded to the activation dtype, a 16-bit value for fp16/bf16: ``ACT`` is the
formula id of ``exactfuse.ops.math.activation`` that ``exactfuse.ops.fastmath.chosen_formula`` admits (a fast
formula only where its exhaustive proof over all 65,536 inputs found no difference from eager ``F.silu``; else
``div_rn(c, 1 + exp(-c))`` with libdevice ``exp``, as ATen's CUDA silu evaluates it), or -1 for no activation.

With fp32 weights and a 16-bit ``x`` (Dao's convention, the ``causal_*`` ops) the products are fp32
products rounded once each (``mul_rn``, as the spec's), and the SiLU reads the fp32 conv, unrounded, with
fp32's formula: one rounding at the store.

Index values are never trusted for addressing: a slot outside ``[0, slots)``, a token index outside
``[0, N)`` or a request offset outside ``[0, L]`` masks the access (the eager check rejects them first;
under torch.compile and CUDA graphs it cannot read them). Row and slot base offsets are 64-bit always.
The request and state-slot helpers both kernels share are in ``slots.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.slots import (
    find_request,
    fixup_tile,
    lean_tile,
    mask_and,
    request_slot,
    store_window,
    window_columns,
    window_tile,
    window_values,
)
from exactfuse.ops.math import activation, fma_rn, mul_rn

MODE_CODES = {"decode": 0, "spec": 1, "prefill": 2}
INIT_CODES = {"never": 0, "tensor": 1, "always": 2}


@triton.jit
def _tap(acc, w, x, EXACT: tl.constexpr):
    """``acc + w * x`` (fp32) as the spec rounds it, the product and then the sum; one ``fma_rn`` where EXACT
    (both factors fp16 values, whose product fp32 holds exactly, so the FMA's one rounding is the sum's)."""
    if EXACT:
        return fma_rn(w, x, acc)
    return acc + mul_rn(w, x)


@triton.jit
def _tap_sum(
    p_x, p_w, p_slot, p_tok, p_seq, j, o_c, m_c, q_start, out_ok, read_state, slot_off, seq, L, N,
    stride_x, stride_w_c, stride_w_k, stride_s_c, stride_s_w,
    K: tl.constexpr, D: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr, READ_STATE: tl.constexpr,
    HAS_SEQ_IDX: tl.constexpr,
):  # fmt: skip
    """The fp32 sum over taps ``k`` ascending of ``w[k] * (state or input)`` for rows ``j`` past their
    request's start; without READ_STATE every tap is an input row (no row's tap reaches the state).
    HAS_SEQ_IDX: an input tap counts only where its row's ``seq_idx`` is the output row's ``seq``."""
    SL: tl.constexpr = (K - 1) * D
    FP16_TAPS: tl.constexpr = (
        (p_w.dtype.element_ty == tl.float16)
        & (p_x.dtype.element_ty == tl.float16)
        & ((p_slot.dtype.element_ty == tl.float16) | (not READ_STATE))
    )
    acc = tl.zeros_like(j * o_c).to(tl.float32)
    for k in tl.static_range(K):
        h = j + D * k
        b_w = tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c).to(tl.float32)
        o_row = q_start + h - SL
        m_x = (h >= SL) & out_ok & (o_row >= 0) & (o_row < L)
        if HAS_SEQ_IDX:
            m_x = m_x & (tl.load(p_seq + o_row, mask=m_x, other=-1) == seq)
        if HAS_TOKEN_MAP:
            o_row = tl.load(p_tok + o_row, mask=m_x, other=0)
            m_x = m_x & (o_row >= 0) & (o_row < N)
        b_x = tl.load(p_x + o_row.to(tl.int64) * stride_x + o_c, mask=mask_and(m_c, m_x), other=0.0).to(tl.float32)
        if READ_STATE:
            m_s = mask_and(m_c, (h < SL) & read_state)
            b_s = tl.load(p_slot + (h + slot_off) * stride_s_w + o_c * stride_s_c, mask=m_s, other=0.0)
            b_x = tl.where(h < SL, b_s.to(tl.float32), b_x)
        else:
            b_x = tl.where(h < SL, 0.0, b_x)
        acc = _tap(acc, b_w, b_x, FP16_TAPS)
    return acc


@triton.jit
def _conv_rows(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_slot, p_tok, p_seq, o_t, o_c, m_c, q_start, out_ok, read_state,
    slot_off, seq, need_state, L, N, stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_c, stride_s_w, K: tl.constexpr, D: tl.constexpr, HAS_STATE: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    HAS_SEQ_IDX: tl.constexpr,
):  # fmt: skip
    """The conv output of logical rows ``o_t`` over channels ``o_c``, stored as residual or output.

    Row values (``o_t``, ``q_start``, ``out_ok``, ``read_state``, ``slot_off``, ``seq`` and the slot pointers
    ``p_slot``) are scalars with ``o_c`` a vector (one row), or ``[BT, 1]`` columns with ``o_c`` a
    ``[1, BC]`` row (a tile): every expression broadcasts, and each output element is the same
    sequence of roundings either way. ``need_state`` (a scalar: whether any of the rows has a tap in the
    state) chooses the tap sum with state loads, so that the rows of a long prefill past their request's
    first ``SL`` issue none of them, every one of which would be masked off.
    """
    read = HAS_STATE  # constexpr: a slot cache; then at run time, whether any row reads it
    if read:
        read = need_state
    if read:
        acc = _tap_sum(
                p_x, p_w, p_slot, p_tok, p_seq, o_t - q_start, o_c, m_c, q_start, out_ok, read_state, slot_off, seq,
                L, N, stride_x, stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_TOKEN_MAP, True, HAS_SEQ_IDX,
            )  # fmt: skip
    else:
        acc = _tap_sum(
                p_x, p_w, p_slot, p_tok, p_seq, o_t - q_start, o_c, m_c, q_start, out_ok, read_state, slot_off, seq,
                L, N, stride_x, stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_TOKEN_MAP, False, HAS_SEQ_IDX,
            )  # fmt: skip
    _finish(
        acc, p_x, p_w, p_b, p_res, p_outer, p_out, p_tok, o_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer,
        stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
    )  # fmt: skip


@triton.jit
def _row_seq(p_seq, o_t, out_ok, L, HAS_SEQ_IDX: tl.constexpr):
    """Rows ``o_t``'s ``seq_idx`` (HAS_SEQ_IDX; else 0) and ``out_ok`` without the padding rows
    (``seq_idx < 0``), which have no output."""
    if HAS_SEQ_IDX:
        seq = tl.load(p_seq + o_t, mask=(o_t >= 0) & (o_t < L), other=-1)
        return seq, out_ok & (seq >= 0)
    return o_t * 0, out_ok


@triton.jit
def _needs_state(j, read_state, SL: tl.constexpr):
    """Whether any of the rows ``j`` (row minus its request's start, a vector) has a tap in the state: a
    scalar, so that rows past their requests' first ``SL`` skip the state loads, every one of which
    would be masked off (in long prefill sequences, nearly every run)."""
    return tl.max(tl.where((j < SL) & read_state, 1, 0), 0) > 0


@triton.jit
def _finish(
    acc, p_x, p_w, p_b, p_res, p_outer, p_out, p_tok, o_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer, stride_out,
    HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
):  # fmt: skip
    """The tap sum ``acc`` (fp32) of rows ``o_t``: bias, rounding, SiLU, then the residual update or the store.
    fp32 weights (p_w's dtype, part of the specialization): the SiLU reads the unrounded fp32 conv."""
    if HAS_BIAS:
        acc = acc + tl.load(p_b + o_c, mask=m_c).to(tl.float32)
    if p_w.dtype.element_ty == tl.float32:
        conv = acc
        if ACT >= 0:
            conv = activation(conv, ACT)
        conv = conv.to(p_x.dtype.element_ty)
    else:
        conv = acc.to(p_x.dtype.element_ty)
        if ACT >= 0:
            conv = activation(conv.to(tl.float32), ACT).to(p_x.dtype.element_ty)
    conv_out = tl.where(out_ok, conv, tl.zeros_like(conv))
    row_ok = (o_t >= 0) & (o_t < L)

    if HAS_RESIDUAL:
        o_out = tl.load(p_tok + o_t, mask=row_ok, other=-1) if HAS_TOKEN_MAP else o_t
        m_out = mask_and(m_c, row_ok & (o_out >= 0) & (o_out < N))
        o_out = o_out.to(tl.int64)
        p_r = p_res + o_out * stride_res + o_c
        b_r = tl.load(p_r, mask=m_out)
        b_y = (b_r.to(tl.float32) + conv_out.to(tl.float32)).to(p_res.dtype.element_ty)
        if HAS_OUTER:
            b_o = tl.load(p_outer + o_out * stride_outer + o_c, mask=m_out)
            b_y = (b_o.to(tl.float32) + b_y.to(tl.float32)).to(p_res.dtype.element_ty)
        tl.store(p_r, b_y, mask=m_out)
    else:
        tl.store(p_out + o_t.to(tl.int64) * stride_out + o_c, conv_out, mask=mask_and(m_c, row_ok))


@triton.jit
def _conv_runs(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_state, p_sid, p_qsl, p_acc, p_init, p_tok, p_seq, i_t, o_c, m_c,
    L, R, N, slots, null_slot, stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    MODE: tl.constexpr, K: tl.constexpr, D: tl.constexpr, SQL: tl.constexpr, HAS_STATE: tl.constexpr,
    HAS_SID: tl.constexpr, INIT: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BT: tl.constexpr, UNROLL: tl.constexpr,
    HAS_SEQ_IDX: tl.constexpr,
):  # fmt: skip
    """Rows ``i_t * BT ...`` as ``BT // UNROLL`` runs of ``UNROLL`` consecutive rows (spec, prefill).

    The ``UNROLL + SL`` input rows a run's taps touch are loaded once into a register window and each
    output row takes its taps from it, ``(UNROLL + SL) / UNROLL`` loads an output row instead of ``K``.
    A tap that reaches before the row's request reads the state as in :func:`_conv_rows`, and the
    sums are the same sequence of roundings, so the two paths give the same bits. HAS_SEQ_IDX: the
    window's ``seq_idx`` are loaded beside it, and a tap counts where its row's equals the output row's.
    """
    SL: tl.constexpr = (K - 1) * D
    FP16_TAPS: tl.constexpr = (
        (p_w.dtype.element_ty == tl.float16)
        & (p_x.dtype.element_ty == tl.float16)
        & ((p_state.dtype.element_ty == tl.float16) | (not HAS_STATE))
    )
    start = i_t * BT + tl.arange(0, BT // UNROLL) * UNROLL
    window = ()
    seqs = ()
    for i in tl.static_range(UNROLL + SL):
        g = start + (i - SL)
        m_g = (g >= 0) & (g < L)
        if HAS_SEQ_IDX:
            seqs += (tl.load(p_seq + g, mask=m_g, other=-1),)
        if HAS_TOKEN_MAP:
            g = tl.load(p_tok + g, mask=m_g, other=0)
            m_g = m_g & (g >= 0) & (g < N)
        b_x = tl.load(p_x + g.to(tl.int64)[:, None] * stride_x + o_c, mask=m_g[:, None] & m_c, other=0.0)
        window += (b_x.to(tl.float32),)
    weights = ()
    for k in tl.static_range(K):
        weights += (tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c).to(tl.float32),)
    # a run's request: found once, for its first row; only a program with a run that crosses a request
    # boundary (rare in long sequences) searches again for every row
    r_first = find_request(start, R, p_qsl)
    straddles = tl.max(find_request(start + UNROLL - 1, R, p_qsl) - r_first, 0) > 0
    q_first = tl.load(p_qsl + r_first)
    first = request_slot(
        r_first, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, HAS_STATE, HAS_SID, INIT
    )
    q_end = tl.load(p_qsl + R)
    for i_r in tl.static_range(UNROLL):
        o_t = start + i_r
        if straddles:
            r = find_request(o_t, R, p_qsl)
            q_start = tl.load(p_qsl + r)
            sid, state_ok, read_state, slot_off = request_slot(
                r, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, HAS_STATE, HAS_SID, INIT
            )
        else:
            q_start = q_first
            sid, state_ok, read_state, slot_off = first
        in_range = (q_start <= o_t) & (o_t < q_end)
        out_ok = in_range if MODE == 1 or not HAS_STATE else in_range & state_ok
        if HAS_SEQ_IDX:
            out_ok = out_ok & (seqs[i_r + SL] >= 0)
        p_slot = (p_state + sid.to(tl.int64) * stride_s_slot)[:, None]
        j = (o_t - q_start)[:, None]
        acc = tl.zeros_like(j * o_c).to(tl.float32)
        need_state = _needs_state(o_t - q_start, read_state, SL)
        for k in tl.static_range(K):
            h = j + D * k
            b_s = tl.zeros_like(acc)
            if HAS_STATE:  # noqa: SIM102 (a constexpr, then a runtime scalar)
                if need_state:
                    m_s = mask_and(m_c, (h < SL) & read_state[:, None])
                    p_s = p_slot + (h + slot_off[:, None]) * stride_s_w + o_c * stride_s_c
                    b_s = tl.load(p_s, mask=m_s, other=0.0).to(tl.float32)
            b_x = window[i_r + D * k]
            if HAS_SEQ_IDX:
                b_x = tl.where((seqs[i_r + D * k] == seqs[i_r + SL])[:, None], b_x, 0.0)
            acc = _tap(acc, weights[k], tl.where(h < SL, b_s, b_x), FP16_TAPS)
        _finish(
            acc, p_x, p_w, p_b, p_res, p_outer, p_out, p_tok, o_t[:, None], o_c, m_c, out_ok[:, None], L, N,
            stride_res, stride_outer, stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
        )  # fmt: skip


@triton.jit
def _tap_weights(p_w, o_c, m_c, stride_w_c, stride_w_k, K: tl.constexpr, BC: tl.constexpr, W_ALIGN: tl.constexpr):
    """The ``K`` taps' weights of channels ``o_c`` in fp32, a tuple: one ``[BC, KW]`` tile load (each channel's
    ``K`` weights one vector access where ``stride_w_c`` is a multiple of ``W_ALIGN`` elements), its columns
    taken by :func:`slots.window_columns`. ``K <= 32``: the register window's ``BW <= 16`` bounds it."""
    KW: tl.constexpr = 1 if K <= 1 else (2 if K <= 2 else (4 if K <= 4 else (8 if K <= 8 else (16 if K <= 16 else 32))))
    tl.static_assert(K <= KW)
    stride_w_c = (stride_w_c // W_ALIGN) * W_ALIGN  # the same value, its alignment visible to the compiler
    o_k = tl.arange(0, KW)
    p_tile = p_w + o_c[:, None] * stride_w_c + o_k[None, :] * stride_w_k
    columns = window_columns(tl.load(p_tile, mask=m_c[:, None] & (o_k < K)[None, :], other=0.0), BC, KW)
    weights = ()
    for k in tl.static_range(K):
        weights += (columns[k].to(tl.float32),)
    return weights


@triton.jit
def _decode_window(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_window, p_tok, i_t, c0, o_c, m_c, out_ok, state_ok, read_state, L, N,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k, stride_s_c, stride_s_w,
    K: tl.constexpr, D: tl.constexpr, HEAD: tl.constexpr, BC: tl.constexpr, BW: tl.constexpr, S_ALIGN: tl.constexpr,
    W_ALIGN: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, FLAT: tl.constexpr,
):  # fmt: skip
    """Decode row ``i_t`` with its slot's window held in registers: the ``HEAD + SL`` old positions loaded once
    as a ``[BC, BW]`` tile (each channel's window one vector access where the state's channel stride is a
    multiple of ``S_ALIGN`` elements, a power of two the launcher read off the stride), the taps taken from
    its columns and the row, and the window shifted by one in registers and stored back. The same values and
    roundings as :func:`_conv_rows` followed by :func:`window_values` / :func:`store_window`; the weights as
    :func:`_tap_weights` loads them.

    FLAT (the launcher's check: a dense ``[C, HEAD + SL]`` block per slot, channels ``c0 ... c0 + BC`` all
    below ``C``): the block's ``BC (HEAD + SL)`` elements are one contiguous run, loaded and stored as a flat
    vector of 16-byte accesses whatever the window's length; the taps and the shifted window are gathered
    from it (``tl.gather``: through shared memory at two or more warps, shuffles at one)."""
    SL: tl.constexpr = (K - 1) * D
    NW: tl.constexpr = HEAD + SL
    FP16_TAPS: tl.constexpr = (
        (p_w.dtype.element_ty == tl.float16)
        & (p_x.dtype.element_ty == tl.float16)
        & (p_window.dtype.element_ty == tl.float16)
    )
    if FLAT:
        o_f = tl.arange(0, BC * BW)
        p_old = p_window + c0.to(tl.int64) * NW + o_f
        m_old = o_f < BC * NW
    else:
        stride_s_c = (stride_s_c // S_ALIGN) * S_ALIGN  # the same value, its alignment visible to the compiler
        o_w = tl.arange(0, BW)
        p_old = p_window + o_c[:, None] * stride_s_c + o_w[None, :] * stride_s_w
        m_old = m_c[:, None] & (o_w < NW)[None, :]
    old = tl.load(p_old, mask=mask_and(m_old, read_state), other=0.0)
    o_row = i_t
    m_x = state_ok & (o_row >= 0) & (o_row < L)
    if HAS_TOKEN_MAP:
        o_row = tl.load(p_tok + o_row, mask=m_x, other=0)
        m_x = m_x & (o_row >= 0) & (o_row < N)
    b_x = tl.load(p_x + o_row.to(tl.int64) * stride_x + o_c, mask=mask_and(m_c, m_x), other=0.0)
    if not FLAT:
        cols = window_columns(old, BC, BW)
    weights = _tap_weights(p_w, o_c, m_c, stride_w_c, stride_w_k, K, BC, W_ALIGN)
    acc = tl.zeros_like(o_c).to(tl.float32)
    for k in tl.static_range(K):  # position HEAD + D k of old window ‖ row; the last tap is the row
        if HEAD + D * k < NW:
            if FLAT:  # noqa: SIM108 (a constexpr branch: cols exists only without FLAT)
                tap = tl.gather(old, (o_c - c0) * NW + (HEAD + D * k), 0)
            else:
                tap = cols[HEAD + D * k]
            acc = _tap(acc, weights[k], tap.to(tl.float32), FP16_TAPS)
        else:
            acc = _tap(acc, weights[k], b_x.to(tl.float32), FP16_TAPS)
    _finish(
        acc, p_x, p_w, p_b, p_res, p_outer, p_out, p_tok, i_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer,
        stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
    )  # fmt: skip
    if FLAT:  # element j of the run: channel j // NW, position j % NW, which takes j + 1 or the row
        channel = o_f // NW
        shifted = tl.gather(old, tl.minimum(o_f + 1, BC * BW - 1), 0)
        entering = tl.gather(b_x.to(old.dtype), tl.minimum(channel, BC - 1), 0)
        new = tl.where(o_f - channel * NW == NW - 1, entering, shifted)
    else:
        shifted = ()
        for i in tl.static_range(BW):  # position i takes i + 1; the row enters at NW - 1; positions >= NW stay
            if i + 1 < NW:
                shifted += (cols[i + 1],)
            elif i + 1 == NW:
                shifted += (b_x.to(old.dtype),)
            else:
                shifted += (cols[i],)
        new = window_tile(shifted, BC, BW)
    tl.debug_barrier()  # every thread's loads of the window precede any store into it
    tl.store(p_old, new, mask=mask_and(m_old, state_ok))


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_rows_kernel(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_state, p_sid, p_qsl, p_acc, p_init, p_tok, p_seq,
    L, R, N, C, slots, null_slot,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    MODE: tl.constexpr, K: tl.constexpr, D: tl.constexpr, SQL: tl.constexpr,
    HAS_STATE: tl.constexpr, HAS_SID: tl.constexpr, INIT: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    BC: tl.constexpr, BW: tl.constexpr, BT: tl.constexpr, UNROLL: tl.constexpr, HAS_SEQ_IDX: tl.constexpr,
    FIXUP: tl.constexpr, HEAD: tl.constexpr, WINDOW_TILE: tl.constexpr, S_ALIGN: tl.constexpr, W_ALIGN: tl.constexpr,
    CHANNELS_FIRST: tl.constexpr, FLAT_WINDOW: tl.constexpr,
):  # fmt: skip
    """``BT`` logical rows x ``BC`` channels of the conv output; in decode also the row's state shift.

    p_x: ``[N, C]`` rows ``stride_x`` apart, unit channel stride. p_w: ``[C, K]`` (strides ``stride_w_c,
    stride_w_k``), x's dtype or fp32; p_b: ``[C]``, p_w's dtype (HAS_BIAS). p_res / p_outer: ``[N, C]`` rows
    ``stride_res`` / ``stride_outer`` apart, unit channel stride (HAS_RESIDUAL / HAS_OUTER); p_res is read and
    written. p_out: ``[L, C]`` rows ``stride_out`` apart (without a residual). p_state: logical ``[slots, C, W]``
    with strides ``stride_s_slot, stride_s_c, stride_s_w`` (HAS_STATE). p_sid: ``[R]`` int32 ``stride_sid`` apart
    (HAS_SID; else request ``r`` uses slot ``r``). p_qsl: ``[R + 1]`` int32 (spec, prefill). p_acc: ``[>= R]`` int32
    (spec). p_init: ``[>= R]`` bool (INIT 1). p_tok: ``[L]`` int32/int64 logical -> physical rows (HAS_TOKEN_MAP).
    p_seq: ``[L]`` int32, each logical row's sequence (HAS_SEQ_IDX: Dao's ``seq_idx``; taps across a change are
    zero, rows < 0 have no output; never with a state). constexpr: MODE (0 decode, 1 spec, 2 prefill), K, D
    (dilation), SQL, INIT (0 never, 1 tensor, 2 always), the HAS_* flags, ACT (the SiLU's formula id, -1 none), BC
    (channels per program), BW (``next_power_of_2(HEAD + SL + SQL - 1)``), BT (rows per program: 1 in decode, where
    each row is a request and shifts its own window), UNROLL (spec, prefill: 1 loads each tap's rows, more takes runs
    of UNROLL rows from a register window, :func:`_conv_runs`; a power of two dividing BT), HEAD (Dao's wide window
    with the history at its end: each slot's history starts ``HEAD`` positions into its window at p_state, and
    those positions shift with it, ``(window ‖ rows)[qlen:]``; 0 otherwise), WINDOW_TILE (decode with a state: the
    window held in registers, :func:`_decode_window`), S_ALIGN and W_ALIGN (powers of two dividing ``stride_s_c``
    and ``stride_w_c``, for WINDOW_TILE's vector accesses), CHANNELS_FIRST (decode: a one-axis grid, program
    ``r * cdiv(C, BC) + c`` taking row ``r``'s channel block ``c``, so that neighbouring programs read
    neighbouring bytes; else rows on axis 0 and channel blocks on axis 1), FLAT_WINDOW (decode with a state
    whose slots are dense ``[C, HEAD + SL]`` blocks and ``BC`` dividing ``C``: each program's windows read and
    written as one flat run, :func:`_decode_window`'s FLAT).
    L, R, N, slots and null_slot are runtime values, not
    specialized: one compile serves every batch.
    """
    SL: tl.constexpr = (K - 1) * D
    if MODE == 0 and CHANNELS_FIRST:  # one flat axis: consecutive programs take one row's channel blocks
        i_t = tl.program_id(0) // tl.cdiv(C, BC)
        i_c = tl.program_id(0) % tl.cdiv(C, BC)
    else:
        i_t = tl.program_id(0)
        i_c = tl.program_id(1)
    p_hist = p_state + HEAD * stride_s_w  # each slot's history: HEAD positions into its window
    if MODE == 0:  # one row, one request
        o_c = i_c * BC + tl.arange(0, BC)
        m_c = o_c < C
        sid, state_ok, read_state, slot_off = request_slot(
            i_t, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, HAS_STATE, HAS_SID, INIT
        )
        out_ok = i_t < L
        if HAS_STATE:
            out_ok = out_ok & state_ok
        seq, out_ok = _row_seq(p_seq, i_t, out_ok, L, HAS_SEQ_IDX)
        # the whole window shifts by the one row: HEAD + SL positions from the slot's start
        p_window = p_state + sid.to(tl.int64) * stride_s_slot
        if HAS_STATE and (WINDOW_TILE or FLAT_WINDOW):
            _decode_window(
                p_x, p_w, p_b, p_res, p_outer, p_out, p_window, p_tok, i_t, i_c * BC, o_c, m_c, out_ok, state_ok,
                read_state, L, N, stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k, stride_s_c,
                stride_s_w, K, D, HEAD, BC, BW, S_ALIGN, W_ALIGN, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
                FLAT_WINDOW,
            )  # fmt: skip
        else:
            _conv_rows(
                p_x, p_w, p_b, p_res, p_outer, p_out, p_window + HEAD * stride_s_w, p_tok, p_seq, i_t, o_c, m_c, i_t,
                out_ok, read_state, slot_off, seq, read_state, L, N, stride_x, stride_res, stride_outer, stride_out,
                stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_STATE, HAS_TOKEN_MAP, HAS_RESIDUAL,
                HAS_OUTER, HAS_BIAS, ACT, HAS_SEQ_IDX,
            )  # fmt: skip
            if HAS_STATE:
                b_window, m_window = window_values(
                    p_window, p_x, p_tok, o_c, m_c, i_t, 1, 0, HEAD + SL, state_ok, read_state, L, N,
                    stride_x, stride_s_c, stride_s_w, HEAD + SL, HEAD + SL, BW, HAS_TOKEN_MAP,
                )  # fmt: skip
                store_window(p_window, o_c, m_c, b_window, m_window, stride_s_c, stride_s_w, BW)
    elif UNROLL > 1:  # runs of UNROLL rows over a register window
        o_c = (i_c * BC + tl.arange(0, BC))[None, :]
        _conv_runs(
            p_x, p_w, p_b, p_res, p_outer, p_out, p_hist, p_sid, p_qsl, p_acc, p_init, p_tok, p_seq, i_t, o_c,
            o_c < C, L, R, N, slots, null_slot, stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
            stride_s_slot, stride_s_c, stride_s_w, stride_sid,
            MODE, K, D, SQL, HAS_STATE, HAS_SID, INIT, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
            BT, UNROLL, HAS_SEQ_IDX,
        )  # fmt: skip
    else:  # a [BT, BC] tile of rows: the program's own (every tile), or in FIXUP a tile the lean kernel left
        o_c = (i_c * BC + tl.arange(0, BC))[None, :]
        t0 = i_t * BT
        own = i_t >= 0
        if FIXUP:
            t0, own = fixup_tile(i_t, L, R, p_qsl, SL, BT)
        if own:  # each row's request found by its own search, every tap masked by its request, state, sequence
            o_t = t0 + tl.arange(0, BT)
            m_c = o_c < C
            r = find_request(o_t, R, p_qsl)
            q_start = tl.load(p_qsl + r)
            in_range = (q_start <= o_t) & (o_t < tl.load(p_qsl + R))
            sid, state_ok, read_state, slot_off = request_slot(
                r, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, HAS_STATE, HAS_SID, INIT
            )
            out_ok = in_range if MODE == 1 or not HAS_STATE else in_range & state_ok
            seq, out_ok = _row_seq(p_seq, o_t, out_ok, L, HAS_SEQ_IDX)
            p_slot = p_hist + sid.to(tl.int64) * stride_s_slot
            _conv_rows(
                p_x, p_w, p_b, p_res, p_outer, p_out, p_slot[:, None], p_tok, p_seq, o_t[:, None], o_c, m_c,
                q_start[:, None], out_ok[:, None], read_state[:, None], slot_off[:, None], seq[:, None],
                _needs_state(o_t - q_start, read_state, SL), L, N, stride_x, stride_res, stride_outer, stride_out,
                stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_STATE, HAS_TOKEN_MAP, HAS_RESIDUAL,
                HAS_OUTER, HAS_BIAS, ACT, HAS_SEQ_IDX,
            )  # fmt: skip


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_lean_kernel(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_sid, p_qsl, p_init,
    L, R, N, C, slots, null_slot,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k, stride_sid,
    K: tl.constexpr, D: tl.constexpr, HAS_STATE: tl.constexpr, HAS_SID: tl.constexpr, INIT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    BC: tl.constexpr, BT: tl.constexpr,
):  # fmt: skip
    """Prefill (no token map, no ``seq_idx``): a ``[BT, BC]`` tile of rows x channels whose rows and taps are
    all in one request past its first ``SL`` rows (or all outside every request), ``slots.lean_tile``. No tap
    reaches a state, so the tile is ``K`` shifted loads of ``x`` and the tap sum, issued before the request
    search they do not depend on; the other tiles are left to ``conv_rows_kernel``'s FIXUP launch. The sums
    are :func:`_tap_sum`'s sequence of roundings, so every output is that kernel's bits. Arguments as
    :func:`conv_rows_kernel`'s."""
    SL: tl.constexpr = (K - 1) * D
    FP16_TAPS: tl.constexpr = (p_w.dtype.element_ty == tl.float16) & (p_x.dtype.element_ty == tl.float16)
    t0 = tl.program_id(0) * BT
    o_t = (t0 + tl.arange(0, BT))[:, None]
    o_c = (tl.program_id(1) * BC + tl.arange(0, BC))[None, :]
    m_c = o_c < C
    taps = ()
    for k in tl.static_range(K):
        o_row = o_t + (D * k - SL)
        m_x = mask_and(m_c, (o_row >= 0) & (o_row < L))
        taps += (tl.load(p_x + o_row.to(tl.int64) * stride_x + o_c, mask=m_x, other=0.0),)
    lean, inside, r = lean_tile(t0, L, R, p_qsl, SL, BT)
    if lean:
        out_ok = inside
        if HAS_STATE:  # a request with no slot (padding) has no output; prefill mode (2), no spec rows (1)
            state_ok = request_slot(
                r, R, p_sid, p_sid, p_init, slots, null_slot, stride_sid, 2, 1, HAS_STATE, HAS_SID, INIT
            )[1]
            out_ok = out_ok & state_ok
        acc = tl.zeros_like(o_t * o_c).to(tl.float32)
        for k in tl.static_range(K):
            b_w = tl.load(p_w + o_c * stride_w_c + k * stride_w_k, mask=m_c).to(tl.float32)
            acc = _tap(acc, b_w, taps[k].to(tl.float32), FP16_TAPS)
        _finish(
            acc, p_x, p_w, p_b, p_res, p_outer, p_out, p_x, o_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer,
            stride_out, False, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
        )  # fmt: skip


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_state_kernel(
    p_x, p_state, p_sid, p_qsl, p_acc, p_init, p_tok,
    L, R, N, C, slots, null_slot,
    stride_x, stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    MODE: tl.constexpr, K: tl.constexpr, D: tl.constexpr, SQL: tl.constexpr,
    HAS_SID: tl.constexpr, INIT: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr,
    BC: tl.constexpr, BW: tl.constexpr, HEAD: tl.constexpr,
):  # fmt: skip
    """State write-back of one (request, channel block) in spec (MODE 1) or prefill (MODE 2) mode.

    Pointers and strides as in :func:`conv_rows_kernel`. Prefill: the window becomes the last ``SL``
    entries of ``history ‖ chunk`` (nothing when the chunk is empty); spec: ``history[1:] ‖ all chunk
    rows``, positions from ``SL + qlen - 1`` on keep their values. HEAD (prefill only): each slot's history
    starts ``HEAD`` positions into its window at p_state, and the window of ``HEAD + SL`` positions becomes the
    last ones of ``window ‖ chunk``.
    """
    SL: tl.constexpr = (K - 1) * D
    NW: tl.constexpr = HEAD + SL + SQL - 1
    r = tl.program_id(0)
    i_c = tl.program_id(1)
    o_c = i_c * BC + tl.arange(0, BC)
    m_c = o_c < C
    sid, state_ok, read_state, slot_off = request_slot(
        r, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, True, HAS_SID, INIT
    )
    q_start = tl.load(p_qsl + r)
    qlen = tl.load(p_qsl + r + 1) - q_start
    if MODE == 1:
        shift = r * 0 + 1
        count = tl.minimum(SL + qlen - 1, NW)
        write_ok = state_ok
    else:
        shift = qlen
        count = r * 0 + HEAD + SL
        write_ok = state_ok & (qlen > 0)
    p_window = p_state + sid.to(tl.int64) * stride_s_slot
    b_window, m_window = window_values(
        p_window, p_x, p_tok, o_c, m_c, q_start, shift, slot_off, count, write_ok, read_state, L, N,
        stride_x, stride_s_c, stride_s_w, HEAD + SL, NW, BW, HAS_TOKEN_MAP,
    )  # fmt: skip
    store_window(p_window, o_c, m_c, b_window, m_window, stride_s_c, stride_s_w, BW)
