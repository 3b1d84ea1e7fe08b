"""Native spec of ``moe_silu_and_mul``: the MoE expert activation ``silu(gate) * up * w``.

``gateup`` is ``[M, 2N]``, one row per (token, expert) pair, in one of two layouts:

- split (``interleaved=False``): ``[g_0 .. g_{N-1} | u_0 .. u_{N-1}]``;
- interleaved (``interleaved=True``): ``[g_0, u_0, g_1, u_1, ...]``, i.e. the row
  viewed as ``[N, 2]`` holds the gate in column 0 and the up projection in column 1.

The whole computation is fp32 with one rounding, at the end, to ``out_dtype``
(default: ``gateup.dtype``): ``g * sigmoid(g) * u``, evaluated left to right,
then ``* w[m]`` per row when ``row_weights`` is given. Unlike ``silu_and_mul``
(which rounds ``silu(g)`` to the activation dtype as eager ``F.silu(g) * u``
does), nothing is rounded in between: this is the order the MoE kernels it
replaces compute in.

``torch.sigmoid`` on CUDA evaluates ``1 / (1 + expf(-g))`` in fp32 with an IEEE
division (ATen ``sigmoid_kernel_cuda``); the Triton kernel writes the same
expression with libdevice ``exp`` and ``div_rn``.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def moe_silu_and_mul(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``silu(gate) * up [* row_weights[:, None]]``: ``[M, 2N] -> [M, N]``, one rounding.

    gateup: ``[M, 2N]`` fp16/bf16/fp32, split or interleaved (see the module
    docstring). row_weights: ``[M]`` fp32 or ``gateup.dtype`` (upcast to fp32),
    e.g. the router's top-k weight of each row, or ``None``. out_dtype: the
    output dtype, ``None`` for ``gateup.dtype``. Returns a contiguous ``[M, N]``.
    """
    x = gateup.float()
    N = x.shape[1] // 2
    if interleaved:
        gate, up = x[:, 0::2], x[:, 1::2]  # the row as [N, 2]: column 0, column 1
    else:
        gate, up = x[:, :N], x[:, N:]
    y = gate * torch.sigmoid(gate) * up
    if row_weights is not None:
        y = y * row_weights.float()[:, None]
    return y.to(out_dtype or gateup.dtype).contiguous()


def moe_silu_and_mul_backward(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d gateup, d row_weights)`` of :func:`moe_silu_and_mul` for the output's gradient ``grad [M, N]``
    (``out_dtype`` or gateup's dtype): the gradients eager autograd computes for it, op by op in its order.

    In fp32: ``dy = grad.float()``; with row weights ``d row_weights = sum_n(dy * y1)`` (``y1 = (g s) u``,
    the product before the weight; ``mul``'s backward, then the broadcast's sum over the columns) and
    ``dy = dy * w``; then ``mul``'s backward through ``(g s) u``: ``da = dy u``, ``d up = dy (g s)``;
    ``d gate = da s + sigmoid_backward(da g, s)`` (the two uses of the gate summed; ATen's
    ``sigmoid_backward(a, s) = (a (1 - s)) s``). ``d gateup`` joins the halves as autograd does, each
    half's gradient placed in zeros of gateup's shape and the two summed (so ``-0`` becomes ``+0``), and is
    cast to gateup's dtype; ``d row_weights`` to row_weights' dtype. Without row weights the second output
    is an empty fp32 ``[0]`` (an op returns tensors only).
    """
    x = gateup.float()
    N = x.shape[1] // 2
    gate, up = (x[:, 0::2], x[:, 1::2]) if interleaved else (x[:, :N], x[:, N:])
    s = torch.sigmoid(gate)
    a = gate * s
    dy = grad.float()
    d_weights = x.new_empty((0,))
    if row_weights is not None:
        d_weights = (dy * (a * up)).sum(1, keepdim=True).squeeze(1).to(row_weights.dtype)
        dy = dy * row_weights.float()[:, None]
    da = dy * up
    d_gate = da * s + torch.ops.aten.sigmoid_backward(da * gate, s)
    d_up = dy * a
    d_x = torch.stack((d_gate, d_up), dim=2).flatten(1) if interleaved else torch.cat((d_gate, d_up), dim=1)
    # autograd places each half's gradient in zeros of x's shape and sums the two: -0 becomes +0
    return (d_x + 0.0).to(gateup.dtype), d_weights


def row_weights_grad64(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The float64 reference of ``d row_weights`` (``Float64Relative``): the spec's fp32 products
    ``dy * y1``, summed over the columns in float64, so that a provider's error against it is its sum
    order's (and its rounding to the output dtype), not the products'. A sum beyond the output dtype's
    range is the infinity the rounding gives. Empty without row weights."""
    if row_weights is None:
        return gateup.new_empty((0,), dtype=torch.float64)
    x = gateup.float()
    N = x.shape[1] // 2
    gate, up = (x[:, 0::2], x[:, 1::2]) if interleaved else (x[:, :N], x[:, N:])
    total = (grad.float() * (gate * torch.sigmoid(gate) * up)).double().sum(1)
    rounded = total.to(row_weights.dtype).double()
    return torch.where(rounded.isinf() & total.isfinite(), rounded, total)
