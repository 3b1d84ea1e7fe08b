"""The decode step with the slot's window in registers (``ConvConfig.window_tile``, ``flat_window``):
:func:`decode_window`, called by ``update.conv_decode_kernel``, and the taps' weights as one
tile load (:func:`tap_weights`)."""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.rounding import finish, tap
from exactfuse.ops.conv.slots import mask_and, window_columns, window_tile


@triton.jit
def aligned(stride, ALIGN: tl.constexpr):
    """``stride``, a positive multiple of ``ALIGN`` (a power of two), with that alignment visible to the compiler:
    an unsigned shift down and back (a signed division would add its rounding fix-up). At ``ALIGN`` 1 the stride
    as given, which may be the constant 1 Triton specializes, and so is an integer the caller specialized
    (torch.compile's kernel analysis makes every integer argument a constant in some torch versions)."""
    if ALIGN > 1 and isinstance(stride, tl.tensor):
        UNSIGNED: tl.constexpr = tl.uint64 if stride.dtype == tl.int64 else tl.uint32
        stride = (stride.to(UNSIGNED) // ALIGN * ALIGN).to(stride.dtype)
    return stride


@triton.jit
def tap_weights(p_w, o_c, m_c, stride_w_c, stride_w_k, K: tl.constexpr, BC: tl.constexpr, W_ALIGN: tl.constexpr):
    """The ``K`` taps' weights of channels ``o_c`` in fp32, a tuple: one ``[BC, KW]`` tile load (each channel's
    ``K`` weights one vector access where ``stride_w_c`` is a multiple of ``W_ALIGN`` elements), its columns
    taken by :func:`slots.window_columns`. ``K <= 32``: the register window's ``BW <= 16`` bounds it."""
    KW: tl.constexpr = 1 if K <= 1 else (2 if K <= 2 else (4 if K <= 4 else (8 if K <= 8 else (16 if K <= 16 else 32))))
    tl.static_assert(K <= KW)
    stride_w_c = aligned(stride_w_c, W_ALIGN)
    o_k = tl.arange(0, KW)
    p_tile = p_w + o_c[:, None] * stride_w_c + o_k[None, :] * stride_w_k
    columns = window_columns(tl.load(p_tile, mask=m_c[:, None] & (o_k < K)[None, :], other=0.0), BC, KW)
    weights = ()
    for k in tl.static_range(K):
        weights += (columns[k].to(tl.float32),)
    return weights


@triton.jit
def flat_rows(p_run, p_xc, m_x, read_state, NW: tl.constexpr, BC: tl.constexpr):
    """A program's run of ``BC`` windows of ``NW`` positions (``BC · NW`` contiguous elements) with each window
    shifted by one and the row ``p_xc`` (channels ``c0 ...``, valid where ``m_x``) entering its last position:
    the run's pointers, their mask and the new values. The run is read as ``[RP, V]`` rows, ``RP`` the row
    count rounded up to a power of two (the rows past the run masked, whole rows, so every access stays a
    whole row). A row is 16 bytes, or ``next_power_of_2(NW)`` elements where that is less: then ``RP`` is at
    least ``BC``, so a program of a channel a thread gives each thread whole rows (fewer rows than threads
    would spread a row over several threads and move the parts through shared memory). Element ``i`` of row
    ``r`` (run index ``f = V r + i``) takes ``f + 1`` (its row's next element, or the next row's first, loaded
    as a ``[RP]`` vector), or, at a window's last position (``f % NW == NW - 1``), the row's value for channel
    ``f // NW``; a row meets at most ``T`` such positions. Every value moves unchanged (NaN payloads and
    signed zeros included); the old run reads as zeros unless ``read_state``."""
    VMAX: tl.constexpr = 128 // p_run.dtype.element_ty.primitive_bitwidth  # 16 bytes
    P: tl.constexpr = triton.next_power_of_2(NW)
    V: tl.constexpr = VMAX if VMAX <= P else P  # RP = BC P / V rows: at least BC, a row a channel's thread
    TOTAL: tl.constexpr = BC * NW
    RP: tl.constexpr = triton.next_power_of_2(TOTAL // V)
    T: tl.constexpr = (V - 1) // NW + 1
    tl.static_assert(TOTAL % V == 0, "FLAT needs BC to be a multiple of the 16-byte vector's elements")
    o_r = tl.arange(0, RP)
    o_i = tl.arange(0, V)
    p_rows = p_run + o_r[:, None] * V + o_i[None, :]
    m_rows = (o_r < TOTAL // V)[:, None] & (o_i < V)[None, :]
    old = tl.load(p_rows, mask=mask_and(m_rows, read_state), other=0.0)
    after = (o_r + 1) * V
    following = tl.load(p_run + after, mask=mask_and(after < TOTAL, read_state), other=0.0)
    first = o_r * V % NW  # the position of each row's first element in its window
    window = o_r * V // NW
    entering = ()
    for t in tl.static_range(T):  # the row's t-th window end is window + t's last position
        x_t = tl.load(p_xc + window + t, mask=mask_and(window + t < BC, m_x), other=0.0)
        entering += (x_t.to(old.dtype),)
    cols = window_columns(old, RP, V)
    new = ()
    for i in tl.static_range(V):
        value = cols[i + 1] if i + 1 < V else following
        for t in tl.static_range(T):  # element i ends window + t where first is t NW + NW - 1 - i
            if t * NW + NW - 1 - i >= 0 and t * NW + NW - 1 - i < NW:
                value = tl.where(first == t * NW + NW - 1 - i, entering[t], value)
        new += (value,)
    return p_rows, m_rows, window_tile(new, RP, V)


@triton.jit
def decode_window(
    p_x, p_w, weights, b_bias, p_res, p_outer, p_out, p_window, p_tok, i_t, c0, o_c, m_c, out_ok, state_ok,
    read_state, L, N, stride_x, stride_res, stride_outer, stride_out, stride_s_c, stride_s_w,
    K: tl.constexpr, D: tl.constexpr, HEAD: tl.constexpr, BC: tl.constexpr, BW: tl.constexpr, S_ALIGN: tl.constexpr,
    HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, FLAT: tl.constexpr, SCALAR: tl.constexpr, OWNED: tl.constexpr,
):  # fmt: skip
    """Decode row ``i_t`` with its slot's window held in registers: the ``HEAD + SL`` old positions loaded once
    as a ``[BW, BC]`` tile and viewed as ``[BC, BW]`` (each channel's window one vector access where the state's
    channel stride is a multiple of ``S_ALIGN`` elements, a power of two the launcher read off the stride),
    the taps taken from its columns and the row, and the window shifted by one in registers and stored back.

    SCALAR (the launcher's ``_scalar_window``: ``[slot, C, W]`` storage whose channel stride no power of two
    above 1 divides, so a channel's window is no vector access, over at most ``heuristics.SCALAR_WINDOW_MAX``
    positions, where the scattered 2-byte accesses cost less than the tile's moves): each position loaded and
    stored as a ``[BC]`` vector of its own, one channel a thread. A ``[BW, BC]`` tile of scalar accesses has no
    axis the compiler must put across the threads, and Triton 3.6 puts the window's there (then moves the
    columns through shared memory).
    The same values and roundings as ``rows.conv_rows`` followed by ``slots.window_values`` /
    ``store_window``. ``weights`` (:func:`tap_weights`) and ``b_bias`` (``rounding.bias_values``) are the
    caller's, read once for the rows a program takes.

    FLAT (the launcher's check: a dense ``[C, HEAD + SL]`` block per slot, channels ``c0 ... c0 + BC`` all
    below ``C``, ``BC`` a multiple of the 16-byte vector's elements): the block's ``BC (HEAD + SL)`` elements
    are one contiguous run, shifted in rows of 16 bytes whatever the window's length (:func:`flat_rows`); the
    taps are ``[BC]`` loads of their positions, one channel a thread, of the lines the run's rows read too (one
    of the two reaches DRAM). No value crosses threads, so no layout conversion.

    The new window is stored after a CTA barrier, so that no thread overwrites a position another has yet to
    read, unless OWNED (the launcher's :func:`window_owned`: not FLAT, and at least as many channels as the
    program has threads): then the tile (or each position's vector) holds every element in one thread only,
    and the store takes the load's pointers in the load's layout, so each thread overwrites only what it read
    itself (tests/ops/test_conv_decode_owned.py reads both off the compiled IR). The barrier held every warp of
    a program until the slowest one's loads returned."""
    SL: tl.constexpr = (K - 1) * D
    NW: tl.constexpr = HEAD + SL
    FP16_TAPS: tl.constexpr = (
        (p_w.dtype.element_ty == tl.float16)
        & (p_x.dtype.element_ty == tl.float16)
        & (p_window.dtype.element_ty == tl.float16)
    )
    stride_s_c = aligned(stride_s_c, S_ALIGN)
    if SCALAR or FLAT:  # each position a [BC] vector: one layout, the channels across the threads
        p_old = p_window + o_c * stride_s_c
        cols = ()
        for i in tl.static_range(BW):
            if i < NW and (not FLAT or (i >= HEAD and (i - HEAD) % D == 0)):  # FLAT: the taps' positions only
                cols += (tl.load(p_old + i * stride_s_w, mask=mask_and(m_c, read_state), other=0.0),)
            else:  # padding to BW: never read, never stored
                cols += (tl.zeros_like(o_c).to(p_window.dtype.element_ty),)
    else:
        o_w = tl.arange(0, BW)
        p_old = p_window + o_w[:, None] * stride_s_w + o_c[None, :] * stride_s_c
        m_old = m_c[None, :] & (o_w < NW)[:, None]
        cols = window_columns(tl.trans(tl.load(p_old, mask=mask_and(m_old, read_state), other=0.0)), BC, BW)
    o_row = i_t
    m_x = state_ok & (o_row >= 0) & (o_row < L)
    if HAS_TOKEN_MAP:
        o_row = tl.load(p_tok + o_row, mask=m_x, other=0)
        m_x = m_x & (o_row >= 0) & (o_row < N)
    p_x_row = p_x + o_row.to(tl.int64) * stride_x
    b_x = tl.load(p_x_row + o_c, mask=mask_and(m_c, m_x), other=0.0)
    if FLAT:  # every row of the run loaded (and shifted) before the barrier; stored after it
        p_rows, m_rows, new = flat_rows(p_window + c0.to(tl.int64) * NW, p_x_row + c0, m_x, read_state, NW, BC)
    acc = tl.zeros_like(o_c).to(tl.float32)
    for k in tl.static_range(K):  # position HEAD + D k of old window ‖ row; the last tap is the row
        if HEAD + D * k < NW:
            acc = tap(acc, weights[k], cols[HEAD + D * k].to(tl.float32), FP16_TAPS)
        else:
            acc = tap(acc, weights[k], b_x.to(tl.float32), FP16_TAPS)
    finish(
        acc, b_bias, p_x, p_w, p_res, p_outer, p_out, p_tok, i_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer,
        stride_out, HAS_TOKEN_MAP, HAS_RESIDUAL, HAS_OUTER, HAS_BIAS, ACT,
    )  # fmt: skip
    if not FLAT:
        shifted = ()
        for i in tl.static_range(BW):  # position i takes i + 1; the row enters at NW - 1; positions >= NW stay
            if i + 1 < NW:
                shifted += (cols[i + 1],)
            elif i + 1 == NW:
                shifted += (b_x.to(p_window.dtype.element_ty),)
            else:
                shifted += (cols[i],)
    if FLAT or not OWNED:
        tl.debug_barrier()  # every thread's loads of the window precede any store into it
    if FLAT:
        tl.store(p_rows, new, mask=mask_and(m_rows, state_ok))
    elif SCALAR:
        for i in tl.static_range(NW):
            tl.store(p_old + i * stride_s_w, shifted[i], mask=mask_and(m_c, state_ok))
    else:
        tl.store(p_old, tl.trans(window_tile(shifted, BC, BW)), mask=mask_and(m_old, state_ok))


def window_owned(flat: bool, BC: int, num_warps: int) -> bool:
    """Whether the decode kernel's register window may be stored without a CTA barrier (``OWNED``): not the flat
    run (whose elements each take the next one, another thread's), and at least a channel a thread, so that
    Triton's blocked layout of the ``[BW, BC]`` tile (or of each position's ``[BC]`` vector) holds no element in
    two threads; the load and the store share one pointer tensor, so each thread overwrites only the positions
    it read. tests/ops/test_conv_decode_owned.py reads both facts off the compiled IR."""
    return not flat and 32 * num_warps <= BC
