"""Native specs of the gated activations: plain PyTorch, as eager computes it.

``x`` is ``[..., 2d]``: the gate is ``x[..., :d]``, the up projection
``x[..., d:]``. Each function rounds where eager PyTorch rounds: the activation
is computed in fp32 (PyTorch's opmath for fp16/bf16) and rounded to the input
dtype, then multiplied by ``up`` and rounded again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
