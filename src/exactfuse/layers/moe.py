"""MoE expert activation layer: ``gateup[M, 2N] -> [M, N]``."""

from __future__ import annotations

import torch
from torch import nn

from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul


class MoeSiluAndMul(nn.Module):
    """``silu(gate) * up [* row_weights[:, None]]`` in fp32 with one rounding.

    ``interleaved`` fixes the layout of ``gateup``'s rows: ``False`` for
    ``[g_0..g_{N-1} | u_0..u_{N-1}]``, ``True`` for ``[g_0, u_0, g_1, u_1, ...]``.
    ``out_dtype`` (default ``None``: the input dtype) is the output dtype.
    ``forward(gateup[M, 2N], row_weights[M] | None = None) -> [M, N]``; row
    weights may be fp32 or the input dtype and are applied in fp32.
    """

    def __init__(self, interleaved: bool, out_dtype: torch.dtype | None = None):
        super().__init__()
        if not isinstance(interleaved, bool):
            raise TypeError(f"MoeSiluAndMul: interleaved must be a bool, got {type(interleaved).__name__}")
        self.interleaved = interleaved
        self.out_dtype = out_dtype

    def forward(self, gateup: torch.Tensor, row_weights: torch.Tensor | None = None) -> torch.Tensor:
        return moe_silu_and_mul(gateup, row_weights, self.interleaved, self.out_dtype)

    def extra_repr(self) -> str:
        extra = f"interleaved={self.interleaved}"
        return extra if self.out_dtype is None else f"{extra}, out_dtype={self.out_dtype}"
