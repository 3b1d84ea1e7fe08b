"""The conv family's decode kernel: one row a request (``short_conv`` decode, ``causal_conv1d_update`` on
``[B, C]``), each row shifting its own slot's window (nothing else reads that slot): the window held in
registers (``decode.decode_window``: a ``[BW, BC]`` tile, one ``[BC]`` vector a position, or one flat run), or
each tap loaded (``rows.conv_rows``) and the window written by ``slots.window_values``. Speculative rows are
``spec.conv_spec_kernel``'s.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.decode import decode_window, tap_weights
from exactfuse.ops.conv.rounding import bias_values
from exactfuse.ops.conv.rows import conv_rows
from exactfuse.ops.conv.slots import channel_mask, request_slot, store_window, window_values


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_decode_kernel(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_state, p_sid, p_init, p_tok,
    L, R, N, C, slots, null_slot,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    K: tl.constexpr, D: tl.constexpr,
    HAS_STATE: tl.constexpr, HAS_SID: tl.constexpr, INIT: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    BC: tl.constexpr, BW: tl.constexpr, BT: tl.constexpr, HEAD: tl.constexpr,
    WINDOW_TILE: tl.constexpr, S_ALIGN: tl.constexpr, W_ALIGN: tl.constexpr, CHANNELS_FIRST: tl.constexpr,
    FLAT_WINDOW: tl.constexpr, EVEN_C: tl.constexpr, SCALAR_WINDOW: tl.constexpr, OWNED: tl.constexpr,
):  # fmt: skip
    """``BT`` rows x ``BC`` channels of the conv output of decode, each row a request that shifts its own
    slot's window.

    Pointers and strides as in ``prefill.conv_prefill_kernel``, p_state read and written. constexpr: K, D
    (dilation), INIT (0 never, 1 tensor, 2 always), the HAS_* flags, ACT (the SiLU's formula id, -1 none), BC
    (channels per program), BW (``next_power_of_2(HEAD + SL)``), BT (rows per program, one after another, the
    program's weights and bias read once), HEAD (Dao's wide window with the history at its end: each slot's
    history starts ``HEAD`` positions into its window at p_state, and those positions shift with it,
    ``(window ‖ row)[1:]``; 0 otherwise), WINDOW_TILE (with a state: the window held in registers,
    ``decode.decode_window``), S_ALIGN and W_ALIGN (powers of two dividing ``stride_s_c`` and ``stride_w_c``, for
    WINDOW_TILE's vector accesses), CHANNELS_FIRST (a one-axis grid, program ``r * cdiv(C, BC) + c`` taking row
    block ``r``'s channel block ``c``, so that neighbouring programs read neighbouring bytes; else rows on axis 0
    and channel blocks on axis 1), FLAT_WINDOW (a state whose slots are dense ``[C, HEAD + SL]`` blocks and
    ``BC`` dividing ``C``: each program's windows read and written as one flat run, ``decode.decode_window``'s
    FLAT), EVEN_C (``BC`` divides ``C``: no channel masks), SCALAR_WINDOW (the launcher's ``_scalar_window``:
    ``[slot, C, W]`` storage whose channel stride no power of two above 1 divides, a short window): the
    register window one ``[BC]`` vector a position, ``decode_window``'s SCALAR; OWNED (the launcher's
    ``decode.window_owned``): the register window stored without a barrier, ``decode_window``'s OWNED.
    L, R, N, slots and null_slot are runtime values, not specialized: one compile serves every batch.
    """
    SL: tl.constexpr = (K - 1) * D
    if CHANNELS_FIRST:  # one flat axis: consecutive programs take one row's channel blocks
        i_t = tl.program_id(0) // tl.cdiv(C, BC)
        i_c = tl.program_id(0) % tl.cdiv(C, BC)
    else:
        i_t = tl.program_id(0)
        i_c = tl.program_id(1)
    o_c = i_c * BC + tl.arange(0, BC)
    m_c = channel_mask(o_c, C, EVEN_C)
    WINDOW: tl.constexpr = HAS_STATE and (WINDOW_TILE or FLAT_WINDOW)
    if WINDOW:  # the weights and the bias once for the program's rows
        weights = tap_weights(p_w, o_c, m_c, stride_w_c, stride_w_k, K, BC, W_ALIGN)
        b_bias = bias_values(p_b, o_c, m_c, 0, HAS_BIAS)
    for i_r in tl.static_range(BT):
        i_row = i_t * BT + i_r
        # MODE 0 (rows.MODE_CODES: decode), one row a request: no accepted-token counts
        sid, state_ok, read_state, slot_off = request_slot(
            i_row, R, p_sid, None, p_init, slots, null_slot, stride_sid, 0, 1, HAS_STATE, HAS_SID, INIT
        )
        out_ok = i_row < L
        if HAS_STATE:
            out_ok = out_ok & state_ok
        # the whole window shifts by the one row: HEAD + SL positions from the slot's start
        p_window = p_state + sid.to(tl.int64) * stride_s_slot
        if WINDOW:
            decode_window(
                p_x, p_w, weights, b_bias, p_res, p_outer, p_out, p_window, p_tok, i_row, i_c * BC, o_c, m_c,
                out_ok, state_ok, read_state, L, N, stride_x, stride_res, stride_outer, stride_out, stride_s_c,
                stride_s_w, K, D, HEAD, BC, BW, S_ALIGN, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
                FLAT_WINDOW, SCALAR_WINDOW, OWNED,
            )  # fmt: skip
        else:
            conv_rows(
                p_x, p_w, p_b, p_res, p_outer, p_out, p_window + HEAD * stride_s_w, p_tok, None, i_row, o_c, m_c,
                i_row, out_ok, read_state, slot_off, i_row * 0, read_state, L, N, stride_x, stride_res,
                stride_outer, stride_out, stride_w_c, stride_w_k, stride_s_c, stride_s_w, K, D, HAS_STATE,
                HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT, False,
            )  # fmt: skip
            if HAS_STATE:
                b_window, m_window = window_values(
                    p_window, p_x, p_tok, o_c, m_c, i_row, 1, 0, HEAD + SL, state_ok, read_state, L, N,
                    stride_x, stride_s_c, stride_s_w, HEAD + SL, HEAD + SL, BW, HAS_TOKEN_MAP,
                )  # fmt: skip
                store_window(p_window, o_c, m_c, b_window, m_window, stride_s_c, stride_s_w, BW)
