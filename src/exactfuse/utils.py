"""Small helpers shared by launchers: output allocation with optional NaN poisoning."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

import torch

_POISON = [False]


@contextlib.contextmanager
def poison_outputs(enabled: bool = True) -> Iterator[None]:
    """Fill every output a launcher allocates with NaN (ints: -1) while active.

    Tests and ``exactfuse verify`` run providers inside this, so an element a
    kernel forgets to write fails the contract instead of passing by luck.
    """
    previous = _POISON[0]
    _POISON[0] = enabled
    try:
        yield
    finally:
        _POISON[0] = previous


def poisoning() -> bool:
    return _POISON[0]


def empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``, NaN-filled inside :func:`poison_outputs`."""
    out = torch.empty(shape, dtype=dtype, device=device)
    if _POISON[0]:
        out.fill_(float("nan") if out.is_floating_point() else -1)
    return out


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@functools.cache
def num_sms(device: torch.device) -> int:
    """SM count of ``device``; the H200's 132 off CUDA (the interpreter), so CPU tests see H200 choices."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132
