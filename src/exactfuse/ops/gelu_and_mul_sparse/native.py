"""Native spec of ``gelu_and_mul_sparse`` (Gemma3n's sparse GELU): plain eager PyTorch.

``x`` is ``[..., 2d]``: the gate is ``x[..., :d]``, the up projection
``x[..., d:]``. Per row of the gate, a Gaussian top-k threshold keeps the
values above ``mean + std * std_multiplier`` (``std_multiplier`` is the normal
quantile of the target sparsity), shifted down by that cutoff; then
``gelu(shifted) * up``.

The function below *is* the spec, written as the literal eager sequence; the
Triton kernel reproduces its rounding. For fp16/bf16 on CUDA each line rounds
to the activation dtype:

1. ``mean``: ATen sums in fp32 and multiplies by ``float(rows) / numel``, rounds.
2. ``std(unbiased=False)``: fp32 Welford, ``sqrt(m2 / n)`` (IEEE div and sqrt), rounds.
3. ``std * std_multiplier``: fp32 product with the multiplier as fp32, rounds.
4. ``mean + (std * m)``: fp32 sum, rounds.
5. ``gate - cutoff``: fp32 difference, rounds.
6. ``relu``: ``clamp_min(., 0)``, NaN kept; exact.
7. ``gelu``: fp32 formula (ATen's), rounds.
8. ``* up``: fp32 product, rounds.

Under tensor parallelism the statistics are shard-local, as in vLLM: each rank
thresholds its own slice of the gate.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

OP_NAME = "gelu_and_mul_sparse"


def gelu_and_mul_sparse(x: torch.Tensor, std_multiplier: float, approximate: str) -> torch.Tensor:
    """Gaussian-thresholded ``gelu(relu(gate - cutoff), approximate) * up``: ``[..., 2d] -> [..., d]``.

    ``x``: fp16, bf16 or fp32 ``[..., 2d]``. ``std_multiplier``: the cutoff in
    standard deviations above the row mean of the gate (``Normal(0, 1).icdf(sparsity)``).
    ``approximate``: ``"none"`` (erf GELU) or ``"tanh"``. Returns ``[..., d]``, dtype of ``x``.
    """
    d = x.shape[-1] // 2
    gate, up = x[..., :d], x[..., d:]
    mean = gate.mean(dim=-1, keepdim=True)
    std = gate.std(dim=-1, keepdim=True, unbiased=False)
    return thresholded(gate, up, mean, std, std_multiplier, approximate)


def thresholded(
    gate: torch.Tensor, up: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, std_multiplier: float, approximate: str
) -> torch.Tensor:
    """Steps 3-8 of the spec given the row statistics ``mean``, ``std`` (``[..., 1]``, the gate's dtype):
    also what the tensor-parallel op (``exactfuse.distributed``) applies with the whole row's statistics."""
    cutoff = mean + std * std_multiplier
    gate = F.relu(gate - cutoff)
    return F.gelu(gate, approximate=approximate) * up


def normal_quantile(sparsity: float) -> float:
    """``Normal(0, 1).icdf(sparsity)`` evaluated in fp32, as a Python float (what vLLM passes)."""
    target = torch.tensor(sparsity, dtype=torch.float32)
    return float(torch.distributions.Normal(0.0, 1.0).icdf(target))


# Gemma3n's activation sparsity and its multiplier: the tests', bench's and warmup's default
GEMMA3N_SPARSITY = 0.95
STD_MULTIPLIER = normal_quantile(GEMMA3N_SPARSITY)  # 1.6448536
