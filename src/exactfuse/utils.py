"""Small helpers shared by launchers and the CLI: dtype names, output allocation with optional NaN poisoning,
size tests that stay correct under tracing."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

import torch

DTYPE_NAMES: dict[torch.dtype, str] = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
DTYPES_BY_NAME: dict[str, torch.dtype] = {name: dtype for dtype, name in DTYPE_NAMES.items()}

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


@functools.cache
def compute_capability(device: torch.device) -> tuple[int, int]:
    """``(major, minor)`` of a CUDA ``device`` (cached: the driver query is microseconds a call)."""
    return torch.cuda.get_device_capability(device)


def is_symbolic(n) -> bool:
    """Whether ``n`` is a symbolic size (a ``torch.SymInt`` of a trace) rather than a concrete ``int``.

    Launchers of compiler-visible ops test this instead of comparing a symbolic size with a number:
    a comparison would add a guard, and engines that drop guards would run whatever branch the trace took.
    """
    return isinstance(n, torch.SymInt)


def needs_int64(rows, row_elements) -> bool:
    """Whether element offsets of ``rows`` rows ``row_elements`` apart can reach 2**31.

    Always ``True`` when either is symbolic: one traced launch must be correct for every size.
    """
    if is_symbolic(rows) or is_symbolic(row_elements):
        return True
    return rows * row_elements >= 2**31


def size_at_least(a, b) -> bool:
    """``a >= b`` for two sizes, as :func:`sizes_equal` (a run-time assertion of the trace when either is
    symbolic)."""
    if is_symbolic(a) or is_symbolic(b):
        torch._check(a >= b, lambda: f"size {a} must be at least {b}")
        return True
    return a >= b


def sizes_equal(a, b) -> bool:
    """``a == b`` for two sizes. When either is symbolic the equality becomes a run-time assertion of the
    trace (``torch._check``), not a guard or a data-dependent branch, and this returns ``True``."""
    if is_symbolic(a) or is_symbolic(b):
        torch._check(a == b, lambda: f"sizes {a} and {b} must be equal")
        return True
    return a == b
