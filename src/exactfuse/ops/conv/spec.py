"""The conv family's speculative row kernel (``num_accepted_tokens``: ``short_conv`` spec mode,
``causal_conv1d_update`` on ``[B, Lq, C]`` with it): the prefill kernel's row tile (``rows.conv_block``) over
``SQL`` rows a request, each request's history read from its accepted position. ``state.conv_state_kernel``
writes the new windows after it, once every row has read the old ones.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.rows import conv_block


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_spec_kernel(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_state, p_sid, p_qsl, p_acc, p_init, p_tok,
    L, R, N, C, slots, null_slot,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    K: tl.constexpr, D: tl.constexpr, SQL: tl.constexpr, HAS_STATE: tl.constexpr, HAS_SID: tl.constexpr,
    INIT: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BC: tl.constexpr, BT: tl.constexpr, UNROLL: tl.constexpr,
    HEAD: tl.constexpr, EVEN_C: tl.constexpr,
):  # fmt: skip
    """``BT`` rows x ``BC`` channels of the conv output of speculative rows; program ``(i_t, i_c)`` on a 2-D grid.

    Pointers, strides and constexprs as in ``prefill.conv_prefill_kernel``; p_qsl: ``[R + 1]`` int32, each
    request ``SQL`` rows; p_acc: ``[>= R]`` int32, each request's accepted tokens, which place its history in
    its window (the window holds ``HEAD + SL + SQL - 1`` positions).
    L, R, N, slots and null_slot are runtime values, not specialized: one compile serves every batch.
    """
    # MODE 1 (rows.MODE_CODES: spec); no seq_idx, no fixup grid
    conv_block(
        p_x, p_w, p_b, p_res, p_outer, p_out, p_state + HEAD * stride_s_w, p_sid, p_qsl, p_acc, p_init, p_tok,
        None, tl.program_id(0), tl.program_id(1), L, R, N, C, slots, null_slot, stride_x, stride_res, stride_outer,
        stride_out, stride_w_c, stride_w_k, stride_s_slot, stride_s_c, stride_s_w, stride_sid, 1, K, D, SQL,
        HAS_STATE, HAS_SID, INIT, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT, BC, BT, UNROLL, False,
        False, EVEN_C,
    )  # fmt: skip
