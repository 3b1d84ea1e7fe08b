"""The lean prefill kernel of the conv family (``launch.launch_conv`` launches it before the prefill kernel's
FIXUP launch): the ``[BT, BC]`` tiles with no request boundary near them, in one register layout, rows in runs over
a register window; and how it reads the weights in that layout (:func:`tile_weights`)."""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.decode import tap_weights
from exactfuse.ops.conv.rounding import bias_values, conv_value, store_conv, tap
from exactfuse.ops.conv.slots import channel_mask, find_request, lean_tile, mask_and, request_slot


@triton.jit
def tile_weights(
    p_w, o_c, m_c, rows, stride_w_c, stride_w_k, K: tl.constexpr, W_ALIGN: tl.constexpr, WORD: tl.constexpr
):
    """The ``K`` taps' weights of channels ``o_c`` (a ``[1, BC]`` row) in fp32 for a tile of ``o_c + rows``'s shape
    (``rows`` a ``[BR, 1]`` column), a tuple.

    WORD (the launcher's check: 16-bit weights whose channel's ``K`` = WORD taps are one aligned 32- or 64-bit
    word, ``stride_w_c`` = K, ``stride_w_k`` = 1): each channel's taps loaded as that word in the tile's shape,
    so the load takes the tile's register layout, and taken from it by shifts and masks (bit moves; a bf16
    value's fp32 bits are its own shifted up 16). Otherwise :func:`tap_weights`'s ``[BC, KW]`` load, in
    ``[1, BC]`` rows, whose values the compiler moves to the tile's layout (the weights, not the tile)."""
    weights = ()
    if WORD > 0:
        tl.static_assert(K == WORD)
        WORD_TYPE: tl.constexpr = tl.int64 if WORD == 4 else tl.int32
        word = tl.load(p_w.to(tl.pointer_type(WORD_TYPE)) + o_c + rows * 0, mask=mask_and(m_c, rows * 0 == 0))
        halves = (word.to(tl.int32),)
        if WORD == 4:
            halves += ((word >> 32).to(tl.int32),)
        for k in tl.static_range(K):
            half = halves[k // 2]
            if p_w.dtype.element_ty == tl.bfloat16:
                bits = (half << 16) if k % 2 == 0 else (half & -65536)
                weights += (bits.to(tl.float32, bitcast=True),)
            else:
                bits = half if k % 2 == 0 else (half >> 16)
                weights += (bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),)
    else:
        BC: tl.constexpr = o_c.numel
        columns = tap_weights(p_w, tl.reshape(o_c, (BC,)), tl.reshape(m_c, (BC,)), stride_w_c, stride_w_k, K, BC,
                              W_ALIGN)  # fmt: skip
        for k in tl.static_range(K):
            weights += (columns[k][None, :],)
    return weights


@triton.jit(do_not_specialize=["L", "R", "N", "slots", "null_slot"])
def conv_lean_kernel(
    p_x, p_w, p_b, p_res, p_outer, p_out, p_sid, p_qsl, p_init,
    L, R, N, C, slots, null_slot,
    stride_x, stride_res, stride_outer, stride_out, stride_w_c, stride_w_k, stride_sid,
    K: tl.constexpr, D: tl.constexpr, HAS_STATE: tl.constexpr, HAS_SID: tl.constexpr, INIT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    BC: tl.constexpr, BT: tl.constexpr, EVEN_C: tl.constexpr, UNROLL: tl.constexpr, W_ALIGN: tl.constexpr,
    W_WORD: tl.constexpr, EVERY_TILE: tl.constexpr,
):  # fmt: skip
    """Prefill (no token map, no ``seq_idx``): a ``[BT, BC]`` tile of rows x channels whose rows and taps are
    all in one request past its first ``SL`` rows (or all outside every request), ``slots.lean_tile``; without a
    state (no history is ever read) also a tile that starts a request and ends in it, its taps before the
    request's first row zeroed (:func:`_from_start`). No tap reaches a state, so the tile is loads of ``x`` and
    the tap sum, the loads issued before the request search they do not depend on; the other tiles are left to
    ``prefill.conv_prefill_kernel``'s FIXUP launch, or with EVERY_TILE (no state, runs of rows: the launcher's
    :func:`~exactfuse.ops.conv.launch.lean_takes_every_tile`) to :func:`_boundary_runs` here, in one launch.

    The tile's rows are ``BT / UNROLL`` runs of ``UNROLL`` consecutive rows: the ``UNROLL + SL`` input rows a
    run's taps touch are loaded and widened to fp32 once, each a ``[BT / UNROLL, BC]`` tile (at ``UNROLL`` 1,
    ``K`` shifted loads of the tile's rows). The bias is read as a tile of that shape (its repeated rows hit the
    L1), and so are the weights where each channel's taps are one word (W_WORD, :func:`tile_weights`), so
    that the window's register layout is the program's and no tile moves between threads. The sums are
    ``rows.tap_sum``'s sequence of roundings, so every output is the prefill kernel's bits. Arguments as
    ``prefill.conv_prefill_kernel``'s (W_WORD: the launcher's check for :func:`tile_weights`)."""
    SL: tl.constexpr = (K - 1) * D
    t0 = tl.program_id(0) * BT
    start = (t0 + tl.arange(0, BT // UNROLL) * UNROLL)[:, None]  # each run's first row
    o_c = (tl.program_id(1) * BC + tl.arange(0, BC))[None, :]
    m_c = channel_mask(o_c, C, EVEN_C)
    # a tile the lean kernel may take has every tap row in [0, L) (lean_tile); the others load nothing
    m_x = mask_and(m_c, (t0 >= SL) & (t0 + BT <= L))
    p_rows = p_x + start.to(tl.int64) * stride_x + o_c
    window = ()  # input rows start - SL ... start + UNROLL - 1 (a row no tap reads is never loaded: dead code)
    for i in tl.static_range(UNROLL + SL):
        window += (tl.load(p_rows + (i - SL) * tl.cast(stride_x, tl.int64), mask=m_x, other=0.0),)
    # the weights and the bias too are read before the search: loads issued after its branch would wait for it
    weights = tile_weights(p_w, o_c, m_c, start, stride_w_c, stride_w_k, K, W_ALIGN, W_WORD)
    b_bias = bias_values(p_b, o_c, m_c, start, HAS_BIAS)
    STARTS: tl.constexpr = not HAS_STATE
    lean, inside, r, at_start = lean_tile(t0, L, R, p_qsl, SL, BT, STARTS)
    if lean:
        out_ok = inside
        if HAS_STATE:  # a request with no slot (padding) has no output; prefill mode (2), no spec rows (1)
            state_ok = request_slot(
                r, R, p_sid, p_sid, p_init, slots, null_slot, stride_sid, 2, 1, HAS_STATE, HAS_SID, INIT
            )[1]
            out_ok = out_ok & state_ok
        # every row of the tile is in [0, L): rows' bases, then a uniform step a row
        row = start.to(tl.int64)
        p_res_rows = p_res + row * stride_res
        p_outer_rows = p_outer + row * stride_outer
        p_out_rows = p_out + row * stride_out
        if STARTS:  # a request's first tile: the taps before its first row read zeros, as the spec's padding
            window = _from_start(window, start, tl.where(at_start, t0, t0 - SL), SL)
        if out_ok:  # a scalar: the rows outside every request (or without a slot) take the branch below
            _lean_runs(
                window, weights, b_bias, p_x, p_w, p_res_rows, p_outer_rows, p_out_rows, o_c, m_c, stride_res,
                stride_outer, stride_out, K, D, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT, UNROLL, False,
            )  # fmt: skip
        else:
            _lean_runs(
                window, weights, b_bias, p_x, p_w, p_res_rows, p_outer_rows, p_out_rows, o_c, m_c, stride_res,
                stride_outer, stride_out, K, D, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT, UNROLL, True,
            )  # fmt: skip
    elif EVERY_TILE:  # else the prefill kernel's FIXUP launch takes the tile
        tl.static_assert(not HAS_STATE)
        _boundary_runs(
            weights, b_bias, p_x, p_w, p_res, p_outer, p_out, p_qsl, start, o_c, m_c, L, R, stride_x, stride_res,
            stride_outer, stride_out, K, D, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT, UNROLL,
        )  # fmt: skip


@triton.jit
def _boundary_runs(
    weights, b_bias, p_x, p_w, p_res, p_outer, p_out, p_qsl, start, o_c, m_c, L, R, stride_x, stride_res,
    stride_outer, stride_out, K: tl.constexpr, D: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, UNROLL: tl.constexpr,
):  # fmt: skip
    """Without a state, a tile :func:`lean_tile` leaves (a request boundary inside it or near it, the first
    tiles, the last one past ``L``), in the same runs: each row's request is searched (``slots.find_request``)
    and each tap loads its input row where that row lies in ``[0, L)`` and in the request, zero before the
    request's first row as the spec's history of zeros; a row outside every request stores the zero conv, rows
    from ``L`` on store nothing. The taps load one at a time, not as a window (these tiles are few; a window
    beside the search took the 16 x 128 tile from 72 to 120 registers offline). The sums are the lean runs'
    sequence of roundings, so every output is the prefill kernel's bits, and no fixup launch follows."""
    SL: tl.constexpr = (K - 1) * D
    FP16_TAPS: tl.constexpr = (p_w.dtype.element_ty == tl.float16) & (p_x.dtype.element_ty == tl.float16)
    q_end = tl.load(p_qsl + R)
    for i_r in range(UNROLL):  # a loop, not unrolled: these rarer tiles keep the lean runs' registers
        o_t = start + i_r
        q_start = tl.load(p_qsl + find_request(o_t, R, p_qsl))
        acc = tl.zeros_like(start * o_c).to(tl.float32)
        for k in tl.static_range(K):
            row = o_t + (D * k - SL)
            m_x = mask_and(m_c, (row >= q_start) & (row >= 0) & (row < L))
            b_x = tl.load(p_x + row.to(tl.int64) * stride_x + o_c, mask=m_x, other=0.0)
            acc = tap(acc, weights[k], b_x.to(tl.float32), FP16_TAPS)
        conv = conv_value(acc, b_bias, p_x, p_w, HAS_BIAS, ACT)
        conv = tl.where((q_start <= o_t) & (o_t < q_end), conv, tl.zeros_like(conv))
        row = o_t.to(tl.int64)
        store_conv(
            conv, p_res + row * stride_res, p_outer + row * stride_outer, p_out + row * stride_out, o_c,
            mask_and(m_c, o_t < L), HAS_RESIDUAL, HAS_OUTER,
        )  # fmt: skip


@triton.jit
def _from_start(window, start, floor, SL: tl.constexpr):
    """``window`` (input rows ``start + i - SL`` in entry ``i``) with the rows before ``floor`` zeroed: a tile that
    starts a request (``floor`` its first row; else ``t0 - SL``, which zeroes nothing) reads no row of the
    request before it (the loads were issued before the search). A select on the entries before the tile's
    rows in every tile: offline (Triton 3.6, 16 x 128, bf16) 696 SASS instructions and 72 registers against 640
    and 72 without starts; as a branch around a second copy of the runs, 1152 and 92."""
    zeroed = ()
    for i in tl.static_range(len(window)):
        if i < SL:
            zeroed += (tl.where(start + (i - SL) >= floor, window[i], 0.0),)
        else:
            zeroed += (window[i],)
    return zeroed


@triton.jit
def _lean_runs(
    window, weights, b_bias, p_x, p_w, p_res_rows, p_outer_rows, p_out_rows, o_c, m_c, stride_res, stride_outer,
    stride_out, K: tl.constexpr, D: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, UNROLL: tl.constexpr, ZERO: tl.constexpr,
):  # fmt: skip
    """The lean kernel's outputs, row ``i_r`` of every run at a time: the taps from ``window``, the epilogue, the
    store at the rows' bases plus ``i_r`` rows. ZERO (rows outside every request, or of a request without a
    slot): the conv output is zero, and only the residual update or the store of zeros remains."""
    FP16_TAPS: tl.constexpr = (p_w.dtype.element_ty == tl.float16) & (p_x.dtype.element_ty == tl.float16)
    for i_r in tl.static_range(UNROLL):
        if ZERO:
            conv = tl.zeros_like(b_bias).to(p_x.dtype.element_ty)
        else:
            acc = tl.zeros_like(b_bias)
            for k in tl.static_range(K):
                acc = tap(acc, weights[k], window[i_r + D * k].to(tl.float32), FP16_TAPS)
            conv = conv_value(acc, b_bias, p_x, p_w, HAS_BIAS, ACT)
        store_conv(
            conv, p_res_rows + i_r * tl.cast(stride_res, tl.int64),
            p_outer_rows + i_r * tl.cast(stride_outer, tl.int64), p_out_rows + i_r * tl.cast(stride_out, tl.int64),
            o_c, m_c, HAS_RESIDUAL, HAS_OUTER,
        )  # fmt: skip
