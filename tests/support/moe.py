"""Helpers shared by the moe_silu_and_mul test files: one (gate, up) input in both layouts."""

from __future__ import annotations

import pytest
import torch

from exactfuse.testing import make_generator, randn

LAYOUT = pytest.mark.parametrize("interleaved", [False, True], ids=["split", "inter"])


def pair(M: int, N: int, dtype, device="cpu", seed=0, weights=torch.float32):
    """The same logical (gate, up) rows in both layouts, and row weights (or None)."""
    gen = make_generator(seed)
    g, u = randn((M, N), dtype, device, gen, 3.0), randn((M, N), dtype, device, gen)
    split = torch.cat([g, u], dim=1)
    inter = torch.stack([g, u], dim=2).reshape(M, 2 * N)
    w = None if weights is None else (torch.rand((M,), generator=gen) + 0.1).to(weights).to(device)
    return split, inter, w
