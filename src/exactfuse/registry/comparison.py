"""Elementwise comparison of two outputs for the contracts (``contracts.py``): bit patterns, ulp distances,
absolute errors, and the largest value over chunks, evaluated where the tensors are."""

from __future__ import annotations

import math

import torch

_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
CHUNK = 1 << 22  # elements a check evaluates at a time: each float64 temporary 32 MiB at most


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map floats to int64 so that adjacent representable values differ by 1.

    +0 and -0 both map to 0; the order is monotonic in the float value.
    """
    if t.dtype not in _INT_VIEW:
        raise TypeError(f"ordered_bits: dtype must be fp32, fp16 or bf16, got {t.dtype}")
    bits = t.contiguous().view(_INT_VIEW[t.dtype]).to(torch.int64)
    width = torch.finfo(t.dtype).bits
    magnitude = bits & ((1 << (width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place of ``a.dtype`` (int64).

    Two NaNs are at distance 0; a NaN against a number is at distance 2**62.
    """
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance: dtypes differ ({a.dtype} vs {b.dtype})")
    dist = (ordered_bits(a) - ordered_bits(b)).abs()
    na, nb = torch.isnan(a), torch.isnan(b)
    dist = torch.where(na & nb, torch.zeros_like(dist), dist)
    return torch.where(na ^ nb, torch.full_like(dist, 1 << 62), dist)


def _unravel(flat: int | None, shape: torch.Size) -> tuple[int, ...] | None:
    if flat is None:
        return None
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))


class _Largest:
    """The largest value offered over chunks in order and its flat index (the first on ties; NaN, as
    ``torch.max`` takes it, above every number)."""

    def __init__(self):
        self.value: float | None = None
        self.index: int | None = None

    def offer(self, values: torch.Tensor, start: int) -> None:
        if values.numel() == 0:
            return
        i = int(values.argmax())
        v = float(values[i])
        if self.value is None or v > self.value or (math.isnan(v) and not math.isnan(self.value)):
            self.value, self.index = v, start + i


def _abs_err(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    a, e = actual.double(), expected.double()
    err = (a - e).abs()
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))  # inf == inf counts as exact
    return torch.where(same, torch.zeros_like(err), torch.nan_to_num(err, nan=float("inf")))


def _flat_pair(actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both outputs flat, detached, on ``expected``'s device."""
    e = expected.detach().reshape(-1)
    return actual.detach().to(e.device).reshape(-1), e


def bits_differ(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Elementwise: not the same bits (signed zeros differ), any NaN matching any NaN."""
    if a.dtype not in _INT_VIEW:
        return a != e
    view = _INT_VIEW[a.dtype]
    return (a.view(view) != e.view(view)) & ~(torch.isnan(a) & torch.isnan(e))


def _zero_mask_mismatches(a: torch.Tensor, e: torch.Tensor) -> int:
    """How many elements are zero in one output and not in the other (flat ``a``, ``e``)."""
    return sum(int(((a[i : i + CHUNK] == 0) != (e[i : i + CHUNK] == 0)).sum()) for i in range(0, a.numel(), CHUNK))
