"""Seeded input factories. Random values, never zeros; specials on request."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def randn(shape: Sequence[int], dtype: torch.dtype, device, gen: torch.Generator, scale: float = 1.0):
    """Standard normal values drawn on the CPU from ``gen`` (reproducible on any device)."""
    return (torch.randn(tuple(shape), generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)


def randn_with_specials(
    shape: Sequence[int], dtype: torch.dtype, device, gen: torch.Generator, *, specials: bool = True
) -> torch.Tensor:
    """Normal values; with ``specials``, about 1 in 12 elements NaN, +Inf, -Inf, +0, -0
    or a subnormal of ``dtype`` (either sign)."""
    x = torch.randn(tuple(shape), generator=gen, dtype=torch.float32) * 3
    if specials and x.numel():
        pick = torch.randint(0, 84, tuple(shape), generator=gen)
        subnormal = torch.finfo(dtype).smallest_normal / 8
        values = (float("nan"), float("inf"), float("-inf"), 0.0, -0.0, subnormal, -subnormal)
        for code, value in enumerate(values):
            x = torch.where(pick == code, torch.full_like(x, value), x)
    return x.to(dtype).to(device)


def make_generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)
