"""The decode step with the slot's window in registers (``ConvConfig.window_tile``, ``flat_window``):
:func:`decode_window`, called by ``kernels.conv_rows_kernel`` in decode mode, and the taps' weights as one
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
def decode_window(
    p_x, p_w, weights, b_bias, p_res, p_outer, p_out, p_window, p_tok, i_t, c0, o_c, m_c, out_ok, state_ok,
    read_state, L, N, stride_x, stride_res, stride_outer, stride_out, stride_s_c, stride_s_w,
    K: tl.constexpr, D: tl.constexpr, HEAD: tl.constexpr, BC: tl.constexpr, BW: tl.constexpr, S_ALIGN: tl.constexpr,
    HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, FLAT: tl.constexpr, SCALAR: tl.constexpr,
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
    The same values and roundings as ``kernels._conv_rows`` followed by ``slots.window_values`` /
    ``store_window``. ``weights`` (:func:`tap_weights`) and ``b_bias`` (``rounding.bias_values``) are the
    caller's, read once for the rows a program takes.

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
    stride_s_c = aligned(stride_s_c, S_ALIGN)
    if FLAT:
        o_f = tl.arange(0, BC * BW)
        p_old = p_window + c0.to(tl.int64) * NW + o_f
        m_old = o_f < BC * NW
        old = tl.load(p_old, mask=mask_and(m_old, read_state), other=0.0)
    elif SCALAR:  # each position a [BC] vector: one layout, the channels across the threads
        p_old = p_window + o_c * stride_s_c
        cols = ()
        for i in tl.static_range(BW):
            if i < NW:
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
    b_x = tl.load(p_x + o_row.to(tl.int64) * stride_x + o_c, mask=mask_and(m_c, m_x), other=0.0)
    acc = tl.zeros_like(o_c).to(tl.float32)
    for k in tl.static_range(K):  # position HEAD + D k of old window ‖ row; the last tap is the row
        if HEAD + D * k < NW:
            if FLAT:  # noqa: SIM108 (a constexpr branch: cols exists only without FLAT)
                value = tl.gather(old, (o_c - c0) * NW + (HEAD + D * k), 0)
            else:
                value = cols[HEAD + D * k]
            acc = tap(acc, weights[k], value.to(tl.float32), FP16_TAPS)
        else:
            acc = tap(acc, weights[k], b_x.to(tl.float32), FP16_TAPS)
    finish(
        acc, b_bias, p_x, p_w, p_res, p_outer, p_out, p_tok, i_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer,
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
                shifted += (b_x.to(p_window.dtype.element_ty),)
            else:
                shifted += (cols[i],)
    tl.debug_barrier()  # every thread's loads of the window precede any store into it
    if FLAT:
        tl.store(p_old, new, mask=mask_and(m_old, state_ok))
    elif SCALAR:
        for i in tl.static_range(NW):
            tl.store(p_old + i * stride_s_w, shifted[i], mask=mask_and(m_c, state_ok))
    else:
        tl.store(p_old, tl.trans(window_tile(shifted, BC, BW)), mask=mask_and(m_old, state_ok))
