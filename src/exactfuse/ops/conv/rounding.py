"""The roundings every conv kernel shares with the spec (``native.py``): each tap's product and sum
(:func:`tap`), and the output's bias, rounding, SiLU and residual update or store (:func:`finish`)."""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.conv.slots import mask_and
from exactfuse.ops.math import activation, fma_rn, mul_rn


@triton.jit
def tap(acc, w, x, EXACT: tl.constexpr):
    """``acc + w * x`` (fp32) as the spec rounds it, the product and then the sum; one ``fma_rn`` where EXACT
    (both factors fp16 values, whose product fp32 holds exactly, so the FMA's one rounding is the sum's)."""
    if EXACT:
        return fma_rn(w, x, acc)
    return acc + mul_rn(w, x)


@triton.jit
def bias_values(p_b, o_c, m_c, rows, HAS_BIAS: tl.constexpr):
    """Channels ``o_c``'s bias in fp32 (zeros without HAS_BIAS), in the shape of ``o_c + rows``: read as a tile
    of the accumulator's shape (its repeated rows hit the L1), so that the tile keeps one register layout
    where a ``[1, BC]`` vector would take another and move the tile between threads to meet it."""
    b = tl.zeros_like(o_c + rows).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(p_b + o_c + rows * 0, mask=mask_and(m_c, rows * 0 == 0)).to(tl.float32)
    return b


@triton.jit
def conv_value(acc, b_bias, p_x, p_w, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """The tap sum ``acc`` (fp32) plus the bias (HAS_BIAS, :func:`bias_values`), rounded and activated as the
    spec does, in x's dtype. fp32 weights (p_w's dtype, part of the specialization): the SiLU reads the
    unrounded fp32 conv; else the conv rounded to x's dtype."""
    if HAS_BIAS:
        acc = acc + b_bias
    if p_w.dtype.element_ty == tl.float32:
        conv = acc
        if ACT >= 0:
            conv = activation(conv, ACT)
        conv = conv.to(p_x.dtype.element_ty)
    else:
        conv = acc.to(p_x.dtype.element_ty)
        if ACT >= 0:
            conv = activation(conv.to(tl.float32), ACT).to(p_x.dtype.element_ty)
    return conv


@triton.jit
def store_conv(conv, p_res, p_outer, p_out, o_c, m_out, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr):
    """``conv`` added to the residual row ``p_res`` (and then the outer residual ``p_outer``), each sum rounded to
    the residual's dtype, and stored there (HAS_RESIDUAL); else stored at ``p_out``. The pointers are the
    rows' bases, ``o_c`` the channels, ``m_out`` the mask of both."""
    if HAS_RESIDUAL:
        b_r = tl.load(p_res + o_c, mask=m_out)
        b_y = (b_r.to(tl.float32) + conv.to(tl.float32)).to(p_res.dtype.element_ty)
        if HAS_OUTER:
            b_o = tl.load(p_outer + o_c, mask=m_out)
            b_y = (b_o.to(tl.float32) + b_y.to(tl.float32)).to(p_res.dtype.element_ty)
        tl.store(p_res + o_c, b_y, mask=m_out)
    else:
        tl.store(p_out + o_c, conv, mask=m_out)


@triton.jit
def finish(
    acc, b_bias, p_x, p_w, p_res, p_outer, p_out, p_tok, o_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer,
    stride_out, HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
):  # fmt: skip
    """The tap sum ``acc`` (fp32) of rows ``o_t``: the bias ``b_bias`` (:func:`bias_values`, read once by the
    caller), rounding, SiLU (:func:`conv_value`), zero where not ``out_ok``, then the residual update or the
    store (:func:`store_conv`) at rows ``o_t`` (through the token map where HAS_TOKEN_MAP)."""
    conv = conv_value(acc, b_bias, p_x, p_w, HAS_BIAS, ACT)
    conv_out = tl.where(out_ok, conv, tl.zeros_like(conv))
    row_ok = (o_t >= 0) & (o_t < L)
    if HAS_RESIDUAL:
        o_out = tl.load(p_tok + o_t, mask=row_ok, other=-1) if HAS_TOKEN_MAP else o_t
        m_out = mask_and(m_c, row_ok & (o_out >= 0) & (o_out < N))
        o_out = o_out.to(tl.int64)
        store_conv(conv_out, p_res + o_out * stride_res, p_outer + o_out * stride_outer, p_out, o_c, m_out,
                   HAS_RESIDUAL, HAS_OUTER)  # fmt: skip
    else:
        store_conv(conv_out, p_res, p_outer, p_out + o_t.to(tl.int64) * stride_out, o_c, mask_and(m_c, row_ok),
                   HAS_RESIDUAL, HAS_OUTER)  # fmt: skip
