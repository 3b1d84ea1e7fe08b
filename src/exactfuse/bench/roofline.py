"""The roofline of this run: copy bandwidth and bf16 matmul rate, measured here.

A row's minimum time is ``max(bytes / copy_bandwidth, flops / matmul_rate)``
with ``bytes`` and ``flops`` from the op's declared cost; its % of roofline is
that minimum over the measured time. Both rates are measured in the same run,
on the same GPU, so the percentage does not depend on a datasheet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from exactfuse.bench.timing import event_median_ms

COPY_BYTES = 1 << 30  # a 1 GiB device-to-device copy: 2 GiB read + written
MATMUL_N = 8192


@dataclass
class Roofline:
    """Measured rates: ``copy_bytes_per_s`` counts bytes read plus bytes written."""

    copy_bytes_per_s: float
    matmul_flops_per_s: float | None = None

    def min_time_s(self, bytes_moved: int | None, flops: int | None) -> float | None:
        """Lower bound on a call's time, or None when the op declares no cost."""
        if bytes_moved is None and flops is None:
            return None
        bound = (bytes_moved or 0) / self.copy_bytes_per_s
        if flops and self.matmul_flops_per_s:
            bound = max(bound, flops / self.matmul_flops_per_s)
        return bound

    def percent(self, bytes_moved: int | None, flops: int | None, time_s: float | None) -> float | None:
        """100 * minimum time / measured time."""
        bound = self.min_time_s(bytes_moved, flops)
        if bound is None or not time_s:
            return None
        return 100.0 * bound / time_s

    def as_dict(self) -> dict:
        out = asdict(self)
        out["copy_gb_per_s"] = self.copy_bytes_per_s / 1e9
        out["matmul_tflops"] = self.matmul_flops_per_s / 1e12 if self.matmul_flops_per_s else None
        return out


def measure_copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """Bytes per second of a large device-to-device copy (read + written), median of ``repeats``."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.random_(0, 255)
    dst = torch.empty_like(src)
    ms = event_median_ms(lambda: dst.copy_(src), repeats=repeats)
    return 2 * nbytes / (ms * 1e-3)


def measure_matmul_rate(device: torch.device, n: int = MATMUL_N, repeats: int = 5) -> float:
    """Flops per second of an ``n x n x n`` bf16 matmul on random data, median of ``repeats``."""
    a = torch.randn((n, n), dtype=torch.bfloat16, device=device)
    b = torch.randn((n, n), dtype=torch.bfloat16, device=device)
    ms = event_median_ms(lambda: a @ b, repeats=repeats)
    return 2 * n**3 / (ms * 1e-3)


def measure_roofline(device: torch.device, *, matmul: bool) -> Roofline:
    """Measure the copy bandwidth and, when ``matmul``, the bf16 matmul rate."""
    roof = Roofline(measure_copy_bandwidth(device), measure_matmul_rate(device) if matmul else None)
    torch.cuda.empty_cache()
    return roof
