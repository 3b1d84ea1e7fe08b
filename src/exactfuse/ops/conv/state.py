"""The conv family's state write-back kernel: in spec and prefill mode, launched after the row kernel
(``spec.conv_spec_kernel`` or ``prefill.conv_prefill_kernel``, and ``lean.conv_lean_kernel``) so that every
row has read the old state, one program per (request, channel block) writes the slot's new window. Decode
shifts each window in the decode kernel itself (each request is one row).
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.slots import request_slot, store_window, window_values


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

    Pointers and strides as in ``prefill.conv_prefill_kernel``. Prefill: the window becomes the last ``SL``
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
