"""Native specs of the gated activations: plain PyTorch, as eager computes it.

``silu_and_mul`` / ``gelu_and_mul`` take ``x [..., 2d]``: the gate is ``x[..., :d]``, the up
projection ``x[..., d:]`` (one fused gate+up projection's output). ``silu_mul`` / ``gelu_mul`` take
the two as separate ``[..., d]`` tensors (two projections' outputs, as Hugging Face MLPs compute them),
with no join copy. Each function rounds where eager PyTorch rounds: the activation is computed in fp32
(PyTorch's opmath for fp16/bf16) and rounded to the input dtype, then multiplied by ``up`` and rounded
again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
GELU_APPROXIMATIONS = ("none", "tanh")


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]``: ``[..., 2d] -> [..., d]``, fp16/bf16/fp32."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(x[..., :d], approximate) * x[..., d:]``: ``[..., 2d] -> [..., d]``.

    ``approximate`` is ``"none"`` (erf form) or ``"tanh"``.
    """
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``: two ``[..., d]`` tensors -> ``[..., d]``, fp16/bf16/fp32."""
    return F.silu(gate) * up


def gelu_mul(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(gate, approximate) * up``: two ``[..., d]`` tensors -> ``[..., d]``.

    ``approximate`` is ``"none"`` (erf form) or ``"tanh"``.
    """
    return F.gelu(gate, approximate=approximate) * up


# Backward specs: the gradients eager autograd computes for the functions above, op by op in its order
# (``mul``'s backward multiplies by the other factor; ``silu_backward`` / ``gelu_backward`` are the ATen
# kernels autograd calls), without recomputing the forward product. Each is an op of its own
# (``silu_and_mul_backward``, ...), whose Triton provider reproduces it.


def _gate_up_grads(grad, gate, up, activation, activation_backward):
    return activation_backward(grad * up, gate), grad * activation(gate)


def _joined(d_gate: torch.Tensor, d_up: torch.Tensor) -> torch.Tensor:
    """``dx`` from the two halves' gradients as autograd forms it: each half's gradient placed in zeros of
    ``x``'s shape and the two summed, so a ``-0`` gradient becomes ``+0`` (``-0 + 0 = +0``); the sum
    changes nothing else."""
    return torch.cat((d_gate, d_up), dim=-1) + 0.0


def silu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``d silu_and_mul / d x``: ``dx [..., 2d]`` for the output's gradient ``grad [..., d]``."""
    d = x.shape[-1] // 2
    return _joined(*silu_mul_backward(grad, x[..., :d], x[..., d:]))


def gelu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``d gelu_and_mul / d x``: ``dx [..., 2d]`` for the output's gradient ``grad [..., d]``."""
    d = x.shape[-1] // 2
    return _joined(*gelu_mul_backward(grad, x[..., :d], x[..., d:], approximate))


def silu_mul_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d gate, d up)`` of ``silu(gate) * up`` for the output's gradient ``grad``."""
    return _gate_up_grads(grad, gate, up, F.silu, torch.ops.aten.silu_backward)


def gelu_mul_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "none"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d gate, d up)`` of ``gelu(gate, approximate) * up`` for the output's gradient ``grad``."""
    return _gate_up_grads(
        grad,
        gate,
        up,
        lambda g: F.gelu(g, approximate=approximate),
        lambda dy, g: torch.ops.aten.gelu_backward(dy, g, approximate=approximate),
    )
