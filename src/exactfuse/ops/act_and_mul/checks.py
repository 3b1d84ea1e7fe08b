"""Argument checks of the gated activations (the registry's ``check=``); errors name the argument. The
layers and ``gelu_and_mul_sparse`` reuse the gated-input and ``approximate`` checks."""

from __future__ import annotations

import torch

from exactfuse.ops.act_and_mul.native import FLOAT_DTYPES, GELU_APPROXIMATIONS
from exactfuse.utils import sizes_equal


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
    for a check per argument and per dimension, timeit on a 2-core CPU)."""
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


def check_silu_and_mul(x: torch.Tensor) -> None:
    check_gated_input("silu_and_mul", x)


def check_gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> None:
    check_gated_input("gelu_and_mul", x)
    check_approximate("gelu_and_mul", approximate)


def check_silu_mul(gate: torch.Tensor, up: torch.Tensor) -> None:
    check_gate_up("silu_mul", gate, up)


def check_gelu_mul(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> None:
    check_gate_up("gelu_mul", gate, up)
    check_approximate("gelu_mul", approximate)


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


def check_silu_backward(grad: torch.Tensor, x: torch.Tensor) -> None:
    check_gated_input("silu_and_mul_backward", x)
    check_backward("silu_and_mul_backward", grad, x, (*x.shape[:-1], x.shape[-1] // 2))


def check_gelu_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> None:
    check_gated_input("gelu_and_mul_backward", x)
    check_approximate("gelu_and_mul_backward", approximate)
    check_backward("gelu_and_mul_backward", grad, x, (*x.shape[:-1], x.shape[-1] // 2))


def check_silu_mul_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> None:
    check_gate_up("silu_mul_backward", gate, up)
    check_backward("silu_mul_backward", grad, gate, gate.shape)


def check_gelu_mul_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "none"):
    check_gate_up("gelu_mul_backward", gate, up)
    check_approximate("gelu_mul_backward", approximate)
    check_backward("gelu_mul_backward", grad, gate, gate.shape)
