"""The conv family's prefill row kernel (``causal_conv1d``, ``short_conv`` and ``causal_conv1d_update`` chunks):
packed variable-length requests, a ``[BT, BC]`` tile of rows a program.

Beside ``lean.conv_lean_kernel`` (the tiles with no request boundary near them, without a token map or
``seq_idx``), whose launch this kernel's FIXUP launch follows on the tiles it leaves; without the lean kernel
this one takes every tile. ``state.conv_state_kernel`` writes the new windows after it, once every row has read
the old ones. The rows' arithmetic is in ``rows.py`` (the spec's roundings in ``rounding.py``, the request and
slot helpers in ``slots.py``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.rows import conv_block


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_prefill_kernel(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_state, p_sid, p_qsl, p_init, p_tok, p_seq,
    L, R, N, C, slots, null_slot,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k,
    stride_s_slot, stride_s_c, stride_s_w, stride_sid,
    K: tl.constexpr, D: tl.constexpr, HAS_STATE: tl.constexpr, HAS_SID: tl.constexpr, INIT: tl.constexpr,
    HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, BC: tl.constexpr, BT: tl.constexpr, UNROLL: tl.constexpr, HAS_SEQ_IDX: tl.constexpr,
    FIXUP: tl.constexpr, HEAD: tl.constexpr, EVEN_C: tl.constexpr,
):  # fmt: skip
    """``BT`` logical rows x ``BC`` channels of the conv output of prefill; program ``(i_t, i_c)`` on a 2-D grid.

    p_x: ``[N, C]`` rows ``stride_x`` apart, unit channel stride. p_w: ``[C, K]`` (strides ``stride_w_c,
    stride_w_k``), x's dtype or fp32; p_b: ``[C]``, p_w's dtype (HAS_BIAS). p_res / p_outer: ``[N, C]`` rows
    ``stride_res`` / ``stride_outer`` apart, unit channel stride (HAS_RESIDUAL / HAS_OUTER); p_res is read and
    written. p_out: ``[L, C]`` rows ``stride_out`` apart (without a residual). p_state: logical ``[slots, C, W]``
    with strides ``stride_s_slot, stride_s_c, stride_s_w`` (HAS_STATE), read only. p_sid: ``[R]`` int32
    ``stride_sid`` apart (HAS_SID; else request ``r`` uses slot ``r``). p_qsl: ``[R + 1]`` int32. p_init: ``[>= R]``
    bool (INIT 1). p_tok: ``[L]`` int32/int64 logical -> physical rows (HAS_TOKEN_MAP). p_seq: ``[L]`` int32, each
    logical row's sequence (HAS_SEQ_IDX: Dao's ``seq_idx``; taps across a change are zero, rows < 0 have no
    output; never with a state). constexpr: K, D (dilation), INIT (0 never, 1 tensor, 2 always), the HAS_* flags,
    ACT (the SiLU's formula id, -1 none), BC (channels per program), BT (rows per program), UNROLL (1 loads each
    tap's rows, more takes runs of UNROLL rows from a register window, ``rows.conv_runs``; a power of two dividing
    BT), FIXUP (the grid is ``slots.fixup_tile``'s: each program takes a tile the lean kernel left, or none),
    HEAD (Dao's wide window with the history at its end: each slot's history starts ``HEAD`` positions into its
    window; 0 otherwise), EVEN_C (``BC`` divides ``C``: no channel masks).
    L, R, N, slots and null_slot are runtime values, not specialized: one compile serves every batch.
    """
    # MODE 2 (rows.MODE_CODES: prefill), SQL 1; p_acc (spec only) none
    conv_block(
        p_x, p_w, p_b, p_res, p_outer, p_out, p_state + HEAD * stride_s_w, p_sid, p_qsl, None, p_init, p_tok, p_seq,
        tl.program_id(0), tl.program_id(1), L, R, N, C, slots, null_slot, stride_x, stride_res, stride_outer,
        stride_out, stride_w_c, stride_w_k, stride_s_slot, stride_s_c, stride_s_w, stride_sid,
        2, K, D, 1, HAS_STATE, HAS_SID, INIT, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS,
        ACT, BC, BT, UNROLL, HAS_SEQ_IDX, FIXUP, EVEN_C,
    )  # fmt: skip
