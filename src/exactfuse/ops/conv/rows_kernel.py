"""Triton kernels of the conv family: ``short_conv``, ``causal_conv1d`` and ``causal_conv1d_update``.

Two kernels (launched by ``launch.py``), with ``constexpr`` flags for the three ops and three modes, beside
``lean.conv_lean_kernel`` (prefill without a token map or ``seq_idx``: the tiles with no request boundary
near them, whose rows the row kernel's FIXUP launch then leaves):

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
(:func:`rounding.tap`); bf16 products can fall outside fp32's range or precision, so bf16 keeps the two.

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
The request and state-slot helpers the kernels share are in ``slots.py``, the spec's roundings (each tap,
the output's epilogue) in ``rounding.py``, the decode step's window in registers in ``decode.py``; the lean
kernel shares them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.decode import decode_window, tap_weights
from exactfuse.ops.conv.rounding import bias_values, finish, tap
from exactfuse.ops.conv.slots import (
    channel_mask,
    find_request,
    find_request_near,
    fixup_tile,
    mask_and,
    request_slot,
    store_window,
    window_values,
)

MODE_CODES = {"decode": 0, "spec": 1, "prefill": 2}
INIT_CODES = {"never": 0, "tensor": 1, "always": 2}


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
        acc = tap(acc, b_w, b_x, FP16_TAPS)
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
    finish(
        acc, bias_values(p_b, o_c, m_c, o_t, HAS_BIAS), p_x, p_w, p_res, p_outer, p_out, p_tok, o_t, o_c, m_c, out_ok,
        L, N, stride_res, stride_outer, stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
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
    b_bias = bias_values(p_b, o_c, m_c, start[:, None], HAS_BIAS)  # once for the program's runs
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
            acc = tap(acc, weights[k], tl.where(h < SL, b_s, b_x), FP16_TAPS)
        finish(
            acc, b_bias, p_x, p_w, p_res, p_outer, p_out, p_tok, o_t[:, None], o_c, m_c, out_ok[:, None], L, N,
            stride_res, stride_outer, stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
        )  # fmt: skip


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
    CHANNELS_FIRST: tl.constexpr, FLAT_WINDOW: tl.constexpr, EVEN_C: tl.constexpr, SCALAR_WINDOW: tl.constexpr,
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
    (channels per program), BW (``next_power_of_2(HEAD + SL + SQL - 1)``), BT (rows per program; in decode each row
    is a request and shifts its own window, the program's rows one after another, its weights and bias read once),
    UNROLL (spec, prefill: 1 loads each tap's rows, more takes runs of UNROLL rows from a register window,
    :func:`_conv_runs`; a power of two dividing BT), HEAD (Dao's wide window
    with the history at its end: each slot's history starts ``HEAD`` positions into its window at p_state, and
    those positions shift with it, ``(window ‖ rows)[qlen:]``; 0 otherwise), WINDOW_TILE (decode with a state: the
    window held in registers, :func:`decode.decode_window`), S_ALIGN and W_ALIGN (powers of two dividing ``stride_s_c``
    and ``stride_w_c``, for WINDOW_TILE's vector accesses), CHANNELS_FIRST (decode: a one-axis grid, program
    ``r * cdiv(C, BC) + c`` taking row block ``r``'s channel block ``c``, so that neighbouring programs read
    neighbouring bytes; else rows on axis 0 and channel blocks on axis 1), FLAT_WINDOW (decode with a state
    whose slots are dense ``[C, HEAD + SL]`` blocks and ``BC`` dividing ``C``: each program's windows read and
    written as one flat run, :func:`decode.decode_window`'s FLAT), EVEN_C (``BC`` divides ``C``: no channel masks).
    SCALAR_WINDOW (the launcher's ``_scalar_window``: ``[slot, C, W]`` storage whose channel stride no power of
    two above 1 divides, a short window): the register window one ``[BC]`` vector a position,
    ``decode.decode_window``'s SCALAR.
    L, R, N, slots and null_slot are runtime values, not specialized: one compile serves every batch.
    """
    SL: tl.constexpr = (K - 1) * D
    if MODE == 0 and CHANNELS_FIRST:  # one flat axis: consecutive programs take one row's channel blocks
        i_t = tl.program_id(0) // tl.cdiv(C, BC)
        i_c = tl.program_id(0) % tl.cdiv(C, BC)
    else:
        i_t = tl.program_id(0)
        i_c = tl.program_id(1)
    p_hist = p_state + HEAD * stride_s_w  # each slot's history: HEAD positions into its window
    if MODE == 0:  # BT rows, each one request, in turn
        o_c = i_c * BC + tl.arange(0, BC)
        m_c = channel_mask(o_c, C, EVEN_C)
        WINDOW: tl.constexpr = HAS_STATE and (WINDOW_TILE or FLAT_WINDOW)
        if WINDOW:  # the weights and the bias once for the program's rows
            weights = tap_weights(p_w, o_c, m_c, stride_w_c, stride_w_k, K, BC, W_ALIGN)
            b_bias = bias_values(p_b, o_c, m_c, 0, HAS_BIAS)
        for i_r in tl.static_range(BT):
            i_row = i_t * BT + i_r
            sid, state_ok, read_state, slot_off = request_slot(
                i_row, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, HAS_STATE, HAS_SID, INIT
            )
            out_ok = i_row < L
            if HAS_STATE:
                out_ok = out_ok & state_ok
            seq, out_ok = _row_seq(p_seq, i_row, out_ok, L, HAS_SEQ_IDX)
            # the whole window shifts by the one row: HEAD + SL positions from the slot's start
            p_window = p_state + sid.to(tl.int64) * stride_s_slot
            if WINDOW:
                decode_window(
                    p_x, p_w, weights, b_bias, p_res, p_outer, p_out, p_window, p_tok, i_row, i_c * BC, o_c, m_c,
                    out_ok, state_ok, read_state, L, N, stride_x, stride_res, stride_outer, stride_out, stride_s_c,
                    stride_s_w, K, D, HEAD, BC, BW, S_ALIGN, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
                    FLAT_WINDOW, SCALAR_WINDOW,
                )  # fmt: skip
            else:
                _conv_rows(
                    p_x, p_w, p_b, p_res, p_outer, p_out, p_window + HEAD * stride_s_w, p_tok, p_seq, i_row, o_c, m_c,
                    i_row, out_ok, read_state, slot_off, seq, read_state, L, N, stride_x, stride_res, stride_outer,
                    stride_out, stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_STATE, HAS_TOKEN_MAP,
                    HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT, HAS_SEQ_IDX,
                )  # fmt: skip
                if HAS_STATE:
                    b_window, m_window = window_values(
                        p_window, p_x, p_tok, o_c, m_c, i_row, 1, 0, HEAD + SL, state_ok, read_state, L, N,
                        stride_x, stride_s_c, stride_s_w, HEAD + SL, HEAD + SL, BW, HAS_TOKEN_MAP,
                    )  # fmt: skip
                    store_window(p_window, o_c, m_c, b_window, m_window, stride_s_c, stride_s_w, BW)
    elif UNROLL > 1:  # runs of UNROLL rows over a register window
        o_c = (i_c * BC + tl.arange(0, BC))[None, :]
        _conv_runs(
            p_x, p_w, p_b, p_res, p_outer, p_out, p_hist, p_sid, p_qsl, p_acc, p_init, p_tok, p_seq, i_t, o_c,
            channel_mask(o_c, C, EVEN_C), L, R, N, slots, null_slot, stride_x, stride_res, stride_outer, stride_out,
            stride_w_c, stride_w_k, stride_s_slot, stride_s_c, stride_s_w, stride_sid,
            MODE, K, D, SQL, HAS_STATE, HAS_SID, INIT, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
            BT, UNROLL, HAS_SEQ_IDX,
        )  # fmt: skip
    else:  # a [BT, BC] tile of rows: the program's own (every tile), or in FIXUP a tile the lean kernel left
        o_c = (i_c * BC + tl.arange(0, BC))[None, :]
        t0 = i_t * BT
        own = i_t >= 0
        near = i_t * 0 - 1
        if FIXUP:
            t0, own, near = fixup_tile(i_t, L, R, p_qsl, SL, BT)
        if own:  # each row's request found by its own search, every tap masked by its request, state, sequence
            o_t = t0 + tl.arange(0, BT)
            m_c = channel_mask(o_c, C, EVEN_C)
            # FIXUP: a boundary's 2 BT + SL - 1 requests (none empty) in one load of 4 BT; wider: the search
            r = (
                find_request_near(o_t, t0, t0 + BT - 1, near, R, p_qsl, 4 * BT)
                if FIXUP
                else find_request(o_t, R, p_qsl)
            )
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
