"""Gemma3n's sparse gated GELU as a layer: ``[..., 2d] -> [..., d]``."""

from __future__ import annotations

import math

import torch
from torch import nn

from exactfuse.ops.act_and_mul.checks import check_approximate
from exactfuse.ops.gelu_and_mul_sparse import gelu_and_mul_sparse
from exactfuse.ops.gelu_and_mul_sparse.native import normal_quantile

MULTIPLIERS = ("exact", "hf")


class GeluAndMulSparse(nn.Module):
    """``gelu(relu(gate - (mean + std * m)), approximate) * up`` with ``m = Normal(0, 1).icdf(sparsity)``.

    ``multiplier`` says which ``m`` the layer passes, since the two reference
    implementations differ:

    - ``"exact"`` (vLLM): the fp32 ``icdf`` as a Python float, used as is.
    - ``"hf"`` (Hugging Face transformers' Gemma3n): the same value rounded to
      the activation dtype first (``std_multiplier.type(inputs.dtype)``), so
      fp16/bf16 cutoffs use a multiplier with 11/8 significant bits.

    Statistics are per row of the local gate: under tensor parallelism they are
    shard-local, as in vLLM.
    """

    def __init__(self, activation_sparsity: float, approximate: str = "tanh", multiplier: str = "exact"):
        super().__init__()
        check_approximate("GeluAndMulSparse", approximate)
        if multiplier not in MULTIPLIERS:
            raise ValueError(f"GeluAndMulSparse: multiplier must be 'exact' or 'hf', got {multiplier!r}")
        sparsity = float(activation_sparsity)
        if not 0.0 < sparsity < 1.0 or math.isnan(sparsity):
            raise ValueError(
                f"GeluAndMulSparse: activation_sparsity must be in (0, 1), got {activation_sparsity!r}; "
                "for a dense activation (sparsity 0.0) use GeluAndMul"
            )
        self.activation_sparsity = sparsity
        self.approximate = approximate
        self.multiplier = multiplier
        self.std_multiplier = normal_quantile(sparsity)
        # Per activation dtype, computed once: forward stays a dict lookup (no tensor op).
        self._rounded = {
            dtype: float(torch.tensor(self.std_multiplier, dtype=dtype))
            for dtype in (torch.float16, torch.bfloat16, torch.float32)
        }

    def multiplier_for(self, dtype: torch.dtype) -> float:
        """The ``std_multiplier`` passed to the op for activations of ``dtype``."""
        if self.multiplier == "hf":
            return self._rounded.get(dtype, self.std_multiplier)
        return self.std_multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_and_mul_sparse(x, self.multiplier_for(x.dtype), self.approximate)

    def extra_repr(self) -> str:
        return (
            f"activation_sparsity={self.activation_sparsity}, approximate={self.approximate!r}, "
            f"multiplier={self.multiplier!r} (std_multiplier={self.std_multiplier:.7g})"
        )
