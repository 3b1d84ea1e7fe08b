"""Native spec of ``causal_conv1d_fn_backward``: the gradients of the stateless causal conv
(``native.causal_conv1d_fn``) with respect to ``x``, ``weight``, ``bias`` and the initial states, as
written-out formulas (docs/short_conv.md, Gradients), and their float64 references (the op's
``Float64Relative`` contract). Plain PyTorch with static shapes, so it also runs under fake tensors and
``torch.compile``."""

from __future__ import annotations

import torch

from exactfuse.ops.conv import calls
from exactfuse.ops.conv.native import request_of
from exactfuse.ops.conv.windows import gather_or


def causal_conv1d_fn_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(d x, d weight, d bias, d initial_states)`` of :func:`causal_conv1d_fn` for the output's gradient
    ``grad [T, C]``, each in its input's dtype (``d bias`` and ``d initial_states`` an empty fp32 ``[0]``
    without the input: an op returns tensors).

    The gradients of the spec written out in fp32: the conv recomputed as the forward sums it; ``dconv =
    silu_backward(grad, conv)`` (ATen's) at the conv the SiLU read, in x's dtype for 16-bit weights (the
    conv rounded, the result rounded, as eager autograd gives it) and in fp32 for fp32 weights; zero on rows
    without an output. Then ``dx[s] = Σ_k w[k] dconv[s + SL - D k]`` over the rows of ``s``'s sequence (and
    ``seq_idx``), ``k`` ascending, rounded once; ``d weight[:, k] = Σ_t dconv[t] tap_k[t]`` and ``d bias =
    Σ_t dconv[t]`` in fp32, rounded once. With initial states the taps in the history read them, and
    ``d initial_states[r, :, j] = Σ_k w[k] dconv[start_r + j - D k]`` over the rows of sequence ``r``, ``k``
    ascending. Eager autograd of the forward spec differs only in rounding each tap's contribution to ``dx``
    to x's dtype before it sums them, and in its sum order."""
    return _fn_grads(grad, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states, False)


def conv_fn_grads64(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The float64 references of :func:`causal_conv1d_fn_backward`'s outputs (``Float64Relative``): the
    same formula in float64 from the same inputs, nothing rounded (the SiLU's derivative
    ``s (1 + c (1 - s))``, ``s = sigmoid(c)``)."""
    return _fn_grads(grad, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states, True)


def _fn_grads(grad, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states, reference):
    """:func:`causal_conv1d_fn_backward` (fp32 with the spec's roundings) or its float64 reference."""
    T, C = x.shape
    K = weight.shape[1]
    SL = (K - 1) * dilation
    device = x.device
    acc_dtype = torch.float64 if reference else torch.float32
    qsl = (query_start_loc if query_start_loc is not None else calls.one_sequence(x)).long()
    R = qsl.shape[0] - 1
    t = torch.arange(T, device=device)
    r = request_of(qsl, t)
    q_start, q_end = gather_or(qsl, r, 0), gather_or(qsl, r + 1, 0)
    out_ok = (q_start <= t) & (t < qsl[R])
    seq = seq_idx.long() if seq_idx is not None else torch.zeros_like(t)
    out_ok = out_ok & (seq >= 0)
    last = torch.sym_max(T - 1, 0)  # no guard on an unbacked T
    xs, ws = x.to(acc_dtype), weight.to(acc_dtype)
    j_t = t - q_start

    def tap(k: int) -> torch.Tensor:  # rows t's tap k: an input row, a history position, or zero
        src = t + dilation * k - SL
        ok = out_ok & (src >= q_start) & (gather_or(seq, src, -1) == seq)
        value = torch.where(ok[:, None], xs[src.clamp(0, last)], 0.0)
        if initial_states is None:
            return value
        h = j_t + dilation * k
        past = initial_states.to(acc_dtype)[r, :, h.clamp(0, max(SL - 1, 0))]
        return torch.where((out_ok & (h < SL))[:, None], past, value)

    conv = torch.zeros(T, C, dtype=acc_dtype, device=device)
    for k in range(K):
        conv = conv + ws[:, k] * tap(k)
    if bias is not None:
        conv = conv + bias.to(acc_dtype)
    g = torch.where(out_ok[:, None], grad.to(acc_dtype), 0.0)
    if activation == "silu" and reference:
        s = torch.sigmoid(conv)
        g = g * s * (1 + conv * (1 - s))
    elif activation == "silu" and weight.dtype == torch.float32:
        g = torch.ops.aten.silu_backward(g, conv)
    elif activation == "silu":
        g = torch.ops.aten.silu_backward(g.to(x.dtype), conv.to(x.dtype)).float()
    dconv = torch.where(out_ok[:, None], g, 0.0)
    dx = torch.zeros(T, C, dtype=acc_dtype, device=device)
    d_weight = torch.zeros(C, K, dtype=acc_dtype, device=device)
    for k in range(K):
        dest = t + (K - 1 - k) * dilation  # the row whose tap k is row t
        ok = out_ok & (dest < q_end) & (gather_or(seq, dest, -1) == seq)
        dx = dx + ws[:, k] * torch.where(ok[:, None], dconv[dest.clamp(0, last)], 0.0)
        d_weight[:, k] = (dconv * tap(k)).sum(0)
    d_init = initial_state_grads(dconv, ws, qsl, dilation) if initial_states is not None else None
    if reference:
        d_bias = dconv.sum(0) if bias is not None else dconv.new_zeros((0,))
        return dx, d_weight, d_bias, d_init if d_init is not None else dconv.new_zeros((0,))
    empty = x.new_empty((0,), dtype=torch.float32)
    d_bias = dconv.sum(0).to(bias.dtype) if bias is not None else empty
    d_init = d_init.to(initial_states.dtype) if d_init is not None else empty
    return dx.to(x.dtype), d_weight.to(weight.dtype), d_bias, d_init


def initial_state_grads(dconv: torch.Tensor, weight: torch.Tensor, qsl: torch.Tensor, dilation: int) -> torch.Tensor:
    """``d initial_states [R, C, SL]`` from ``dconv [T, C]`` (zero on rows without an output): history
    position ``j`` of sequence ``r`` is tap ``k`` of row ``start_r + j - D k`` when that row is in the
    sequence; ``Σ_k w[k] dconv[row]``, ``k`` ascending, in ``dconv``'s dtype (the spec's fp32, the reference's
    float64)."""
    T, C = dconv.shape
    K = weight.shape[1]
    SL = (K - 1) * dilation
    qsl = qsl.long()
    R = qsl.shape[0] - 1
    j = torch.arange(SL, device=dconv.device)
    out = dconv.new_zeros((R, SL, C))
    for k in range(K):
        row = qsl[:R, None] + j[None, :] - dilation * k  # [R, SL]
        ok = (row >= qsl[:R, None]) & (row < qsl[1:, None])
        value = torch.where(ok[..., None], dconv[row.clamp(0, torch.sym_max(T - 1, 0))], 0.0)
        out = out + weight[:, k].to(dconv.dtype) * value
    return out.transpose(1, 2)
