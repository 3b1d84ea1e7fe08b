"""The row helpers of the conv family's forward kernels (``prefill.conv_prefill_kernel`` and
``spec.conv_spec_kernel``; ``update.conv_decode_kernel`` takes :func:`conv_rows`, the backward's row kernel
:func:`row_seq`).

- :func:`tap_sum`: the fp32 sum of a row's ``K`` taps in ascending ``k``, each tap an input row or a state
  position (``rounding.tap``: each product rounded, then added, as the spec's).
- :func:`conv_rows`: the conv output of one row or a ``[BT, BC]`` tile of rows, each tap's rows loaded, rounded
  and stored as the spec does (``rounding.finish``).
- :func:`conv_runs`: the same outputs from runs of ``UNROLL`` rows over a register window of input rows.
- :func:`conv_block`: one program's rows in spec and prefill mode: the runs, or the tile with each row's request
  found by a binary search over ``query_start_loc`` (FIXUP: a tile the lean prefill kernel left).

The paths give the same bits: every output element is the same sequence of roundings. Each product is
``mul_rn`` (``exactfuse.ops.math``: ``mul.rn.f32``, which the compiler does not contract into an FMA), then added,
the spec's separately rounded multiply and add. Where both factors are fp16 values (fp16 weights, input and
state) the product is exact in fp32, so one ``fma_rn`` gives the same bits (``rounding.tap``); bf16 products can
fall outside fp32's range or precision, so bf16 keeps the two.

The SiLU reads the conv already rounded to the activation dtype, a 16-bit value for fp16/bf16: ``ACT`` is the
formula id of ``exactfuse.ops.math.activation`` that ``exactfuse.ops.fastmath.chosen_formula`` admits (a fast
formula only where its exhaustive proof over all 65,536 inputs found no difference from eager ``F.silu``; else
``div_rn(c, 1 + exp(-c))`` with libdevice ``exp``, as ATen's CUDA silu evaluates it), or -1 for no activation.
With fp32 weights and a 16-bit ``x`` (Dao's convention, the ``causal_*`` ops) the products are fp32 products
rounded once each (``mul_rn``, as the spec's), and the SiLU reads the fp32 conv, unrounded, with fp32's
formula: one rounding at the store.

Index values are never trusted for addressing: a slot outside ``[0, slots)``, a token index outside ``[0, N)``
or a request offset outside ``[0, L]`` masks the access (the eager check rejects them first; under
torch.compile and CUDA graphs it cannot read them). Row and slot base offsets are 64-bit always.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.rounding import bias_values, finish, tap
from exactfuse.ops.conv.slots import (
    channel_mask,
    find_request,
    find_request_near,
    fixup_tile,
    mask_and,
    request_slot,
)

MODE_CODES = {"decode": 0, "spec": 1, "prefill": 2}
INIT_CODES = {"never": 0, "tensor": 1, "always": 2}


@triton.jit
def tap_sum(
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
def conv_rows(
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
        acc = tap_sum(
                p_x, p_w, p_slot, p_tok, p_seq, o_t - q_start, o_c, m_c, q_start, out_ok, read_state, slot_off, seq,
                L, N, stride_x, stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_TOKEN_MAP, True, HAS_SEQ_IDX,
            )  # fmt: skip
    else:
        acc = tap_sum(
                p_x, p_w, p_slot, p_tok, p_seq, o_t - q_start, o_c, m_c, q_start, out_ok, read_state, slot_off, seq,
                L, N, stride_x, stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_TOKEN_MAP, False, HAS_SEQ_IDX,
            )  # fmt: skip
    finish(
        acc, bias_values(p_b, o_c, m_c, o_t, HAS_BIAS), p_x, p_w, p_res, p_outer, p_out, p_tok, o_t, o_c, m_c, out_ok,
        L, N, stride_res, stride_outer, stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
    )  # fmt: skip


@triton.jit
def row_seq(p_seq, o_t, out_ok, L, HAS_SEQ_IDX: tl.constexpr):
    """Rows ``o_t``'s ``seq_idx`` (HAS_SEQ_IDX; else 0) and ``out_ok`` without the padding rows
    (``seq_idx < 0``), which have no output."""
    if HAS_SEQ_IDX:
        seq = tl.load(p_seq + o_t, mask=(o_t >= 0) & (o_t < L), other=-1)
        return seq, out_ok & (seq >= 0)
    return o_t * 0, out_ok


@triton.jit
def needs_state(j, read_state, SL: tl.constexpr):
    """Whether any of the rows ``j`` (row minus its request's start, a vector) has a tap in the state: a
    scalar, so that rows past their requests' first ``SL`` skip the state loads, every one of which
    would be masked off (in long prefill sequences, nearly every run)."""
    return tl.max(tl.where((j < SL) & read_state, 1, 0), 0) > 0


@triton.jit
def conv_runs(
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
    A tap that reaches before the row's request reads the state as in :func:`conv_rows`, and the
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
        need_state = needs_state(o_t - q_start, read_state, SL)
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


@triton.jit
def conv_block(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_hist, p_sid, p_qsl, p_acc, p_init, p_tok, p_seq, i_t, i_c,
    L, R, N, C, slots, null_slot, stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    MODE: tl.constexpr, K: tl.constexpr, D: tl.constexpr, SQL: tl.constexpr, HAS_STATE: tl.constexpr,
    HAS_SID: tl.constexpr, INIT: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BC: tl.constexpr, BT: tl.constexpr,
    UNROLL: tl.constexpr, HAS_SEQ_IDX: tl.constexpr, FIXUP: tl.constexpr, EVEN_C: tl.constexpr,
):  # fmt: skip
    """Program ``(i_t, i_c)``'s ``BT`` rows x ``BC`` channels in spec (MODE 1) or prefill (MODE 2) mode.

    ``p_hist``: each slot's history (``HEAD`` positions into its window). UNROLL > 1: runs of UNROLL rows over a
    register window (:func:`conv_runs`). Else a ``[BT, BC]`` tile of rows: the program's own (every tile), or in
    FIXUP a tile the lean kernel left (``slots.fixup_tile``), each row's request found by its own search, every
    tap masked by its request, state and sequence. ``p_acc`` is read in spec mode alone, ``p_seq`` with
    HAS_SEQ_IDX alone (either may be None otherwise).
    """
    SL: tl.constexpr = (K - 1) * D
    o_c = (i_c * BC + tl.arange(0, BC))[None, :]
    if UNROLL > 1:
        conv_runs(
            p_x, p_w, p_b, p_res, p_outer, p_out, p_hist, p_sid, p_qsl, p_acc, p_init, p_tok, p_seq, i_t, o_c,
            channel_mask(o_c, C, EVEN_C), L, R, N, slots, null_slot, stride_x, stride_res, stride_outer, stride_out,
            stride_w_c, stride_w_k, stride_s_slot, stride_s_c, stride_s_w, stride_sid,
            MODE, K, D, SQL, HAS_STATE, HAS_SID, INIT, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
            BT, UNROLL, HAS_SEQ_IDX,
        )  # fmt: skip
    else:
        t0 = i_t * BT
        own = i_t >= 0
        near = i_t * 0 - 1
        if FIXUP:
            # without a state the lean kernel also took the tiles that start a request (slots.lean_tile's STARTS)
            t0, own, near = fixup_tile(i_t, L, R, p_qsl, SL, BT, not HAS_STATE)
        if own:
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
            seq, out_ok = row_seq(p_seq, o_t, out_ok, L, HAS_SEQ_IDX)
            p_slot = p_hist + sid.to(tl.int64) * stride_s_slot
            conv_rows(
                p_x, p_w, p_b, p_res, p_outer, p_out, p_slot[:, None], p_tok, p_seq, o_t[:, None], o_c, m_c,
                q_start[:, None], out_ok[:, None], read_state[:, None], slot_off[:, None], seq[:, None],
                needs_state(o_t - q_start, read_state, SL), L, N, stride_x, stride_res, stride_outer, stride_out,
                stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_STATE, HAS_TOKEN_MAP, HAS_RESIDUAL,
                HAS_OUTER, HAS_BIAS, ACT, HAS_SEQ_IDX,
            )  # fmt: skip
