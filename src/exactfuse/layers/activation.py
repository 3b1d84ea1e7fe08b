"""Gated-activation layers: ``[..., 2d] -> [..., d]``."""

from __future__ import annotations

import torch
from torch import nn

from exactfuse.ops.act_and_mul import checks, gelu_and_mul, silu_and_mul


class SiluAndMul(nn.Module):
    """``silu(x[..., :d]) * x[..., d:]``, bitwise equal to eager PyTorch on CUDA."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)


class GeluAndMul(nn.Module):
    """``gelu(x[..., :d], approximate) * x[..., d:]``, bitwise equal to eager PyTorch on CUDA."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        checks.check_approximate("GeluAndMul", approximate)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_and_mul(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"
