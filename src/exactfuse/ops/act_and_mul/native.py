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

from exactfuse.utils import sizes_equal

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
GELU_APPROXIMATIONS = ("none", "tanh")


def check_gated_input(op: str, x: torch.Tensor) -> None:
    """Validate ``x: [..., 2d]`` for a gated activation; errors name ``x``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise ValueError(f"{op}: x must have at least 1 dimension [..., 2*d], got a 0-d tensor")
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"{op}: x's last dimension must be even (2*d), got {x.shape[-1]} (shape {list(x.shape)})")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: x must be float16, bfloat16 or float32, got {x.dtype}")


def check_gate_up(op: str, gate: torch.Tensor, up: torch.Tensor) -> None:
    """Validate ``gate, up: [..., d]`` (one shape, dtype and device); errors name the argument. The
    well-formed eager call takes the first test of each kind (it runs on every call: 1.2 against 2.4 µs
    for a check per argument and per dimension, CPU machine, timeit)."""
    tensors = isinstance(gate, torch.Tensor) and isinstance(up, torch.Tensor)
    if not (tensors and gate.dim() and up.dim() and gate.dtype in FLOAT_DTYPES and up.dtype in FLOAT_DTYPES):
        _gate_up_kind_error(op, gate, up)
    # symbolic sizes (a Dynamo frame, or a fake kernel, which runs outside one): run-time assertions of
    # the trace, not guards; an eager call holds plain tensors and takes the one comparison
    if type(gate) is not torch.Tensor or type(up) is not torch.Tensor or torch.compiler.is_compiling():
        same = up.dim() == gate.dim() and all(sizes_equal(a, b) for a, b in zip(up.shape, gate.shape, strict=True))
    else:
        same = up.shape == gate.shape
    if not same:
        raise ValueError(f"{op}: up must have gate's shape {list(gate.shape)}, got {list(up.shape)}")
    if up.dtype != gate.dtype:
        raise TypeError(f"{op}: up must have gate's dtype {gate.dtype}, got {up.dtype}")
    if up.device != gate.device:
        raise ValueError(f"{op}: up must be on gate's device {gate.device}, got {up.device}")


def _gate_up_kind_error(op: str, gate, up) -> None:
    for name, t in (("gate", gate), ("up", up)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 1:
            raise ValueError(f"{op}: {name} must have at least 1 dimension [..., d], got a 0-d tensor")
        if t.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{op}: {name} must be float16, bfloat16 or float32, got {t.dtype}")


def check_approximate(op: str, approximate: str) -> None:
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")


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


def check_backward(op: str, grad: torch.Tensor, like: torch.Tensor, shape) -> None:
    """Validate the output's gradient ``grad``: a tensor of ``shape`` with ``like``'s dtype and device."""
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"{op}: grad must be a torch.Tensor, got {type(grad).__name__}")
    if grad.dim() != len(shape) or not all(sizes_equal(a, b) for a, b in zip(grad.shape, shape, strict=True)):
        raise ValueError(f"{op}: grad must have the output's shape {list(shape)}, got {list(grad.shape)}")
    if grad.dtype != like.dtype:
        raise TypeError(f"{op}: grad must have the input's dtype {like.dtype}, got {grad.dtype}")
    if grad.device != like.device:
        raise ValueError(f"{op}: grad must be on the input's device {like.device}, got {grad.device}")


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
