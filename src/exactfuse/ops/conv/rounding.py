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
def finish(
    acc, p_x, p_w, p_b, p_res, p_outer, p_out, p_tok, o_t, o_c, m_c, out_ok, L, N, stride_res, stride_outer, stride_out,
    HAS_TOKEN_MAP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_OUTER: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
):  # fmt: skip
    """The tap sum ``acc`` (fp32) of rows ``o_t``: bias, rounding, SiLU, then the residual update or the store.
    fp32 weights (p_w's dtype, part of the specialization): the SiLU reads the unrounded fp32 conv."""
    if HAS_BIAS:
        acc = acc + tl.load(p_b + o_c, mask=m_c).to(tl.float32)
    if p_w.dtype.element_ty == tl.float32:
        conv = acc
        if ACT >= 0:
            conv = activation(conv, ACT)
        conv = conv.to(p_x.dtype.element_ty)
    else:
        conv = acc.to(p_x.dtype.element_ty)
        if ACT >= 0:
            conv = activation(conv.to(tl.float32), ACT).to(p_x.dtype.element_ty)
    conv_out = tl.where(out_ok, conv, tl.zeros_like(conv))
    row_ok = (o_t >= 0) & (o_t < L)

    if HAS_RESIDUAL:
        o_out = tl.load(p_tok + o_t, mask=row_ok, other=-1) if HAS_TOKEN_MAP else o_t
        m_out = mask_and(m_c, row_ok & (o_out >= 0) & (o_out < N))
        o_out = o_out.to(tl.int64)
        p_r = p_res + o_out * stride_res + o_c
        b_r = tl.load(p_r, mask=m_out)
        b_y = (b_r.to(tl.float32) + conv_out.to(tl.float32)).to(p_res.dtype.element_ty)
        if HAS_OUTER:
            b_o = tl.load(p_outer + o_out * stride_outer + o_c, mask=m_out)
            b_y = (b_o.to(tl.float32) + b_y.to(tl.float32)).to(p_res.dtype.element_ty)
        tl.store(p_r, b_y, mask=m_out)
    else:
        tl.store(p_out + o_t.to(tl.int64) * stride_out + o_c, conv_out, mask=mask_and(m_c, row_ok))
