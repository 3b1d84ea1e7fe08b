"""Timing: CUDA-graph replay, L2-defeating input rotation, compile limits.

A *timer* is any ``fn(body) -> milliseconds for one call of body``. The
runner hands it a body that calls a provider once on each of ``k`` buffer
sets, and divides by ``k``; tests pass a fake timer and time nothing.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
from collections.abc import Callable, Iterator

import torch

Timer = Callable[[Callable[[], object]], float]

# Fallback when the device properties do not say (the H200's L2 per the brief).
DEFAULT_L2_BYTES = 60 * 1024 * 1024
# Rotation aims at twice the L2 so that each buffer set is evicted before it is read again.
L2_MULTIPLE = 2
MAX_BUFFERS = 32


def cudagraph_timer(rep_ms: float = 20.0) -> Timer:
    """Median over replays of one CUDA graph holding ~``rep_ms`` of unrolled calls.

    ``triton.testing.do_bench_cudagraph`` captures ``body`` repeated back to
    back, so launch overhead is out of the measurement; what remains is the GPU
    time of the kernels (and of any gap between them on the stream).
    """
    from triton.testing import do_bench_cudagraph

    def timer(body: Callable[[], object]) -> float:
        # A garbage-collected CompiledKernel unloads its module, which is illegal
        # during stream capture: keep the cyclic GC off while timing (newer Triton
        # releases do the same inside do_bench_cudagraph).
        enabled = gc.isenabled()
        gc.disable()
        try:
            # do_bench_cudagraph runs body on a new stream, which does not wait for the caller's: the work
            # queued before (a state saved to restore after timing, inputs just written) must finish first,
            # or body's in-place writes can land before that save reads (a peer's cache restored to a
            # state already stepped, seen under a busy GPU)
            torch.cuda.synchronize()
            return float(do_bench_cudagraph(body, rep=rep_ms, return_mode="median"))
        finally:
            if enabled:
                gc.enable()

    return timer


def rotation_count(working_set_bytes: int, l2_bytes: int, max_buffers: int = MAX_BUFFERS) -> int:
    """How many buffer sets to rotate through for a call touching ``working_set_bytes``.

    1 when one call already overflows the L2; otherwise enough sets to cover
    ``L2_MULTIPLE`` times the L2, capped at ``max_buffers`` (below
    ``L2_MULTIPLE * l2_bytes / max_buffers`` per call the rotation cannot
    evict everything: those tiny shapes are partly measured warm, and the
    result rows say how many buffers were used).
    """
    if working_set_bytes <= 0 or working_set_bytes >= l2_bytes or max_buffers <= 1:
        return 1
    return max(2, min(max_buffers, math.ceil(L2_MULTIPLE * l2_bytes / working_set_bytes)))


def l2_cache_bytes(device: torch.device | str | int | None = None) -> int:
    """The L2 size from the device properties, or :data:`DEFAULT_L2_BYTES`."""
    if not torch.cuda.is_available():
        return DEFAULT_L2_BYTES
    props = torch.cuda.get_device_properties(torch.device(device) if isinstance(device, str) else device)
    size = getattr(props, "L2_cache_size", 0) or 0
    return int(size) if size > 0 else DEFAULT_L2_BYTES


def event_median_ms(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 2) -> float:
    """Median of ``repeats`` CUDA-event timings of ``fn`` (for long, single calls)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


_LIMIT_NAMES = (
    ("recompile_limit", "cache_size_limit"),
    ("accumulated_recompile_limit", "accumulated_cache_size_limit"),
)


@contextlib.contextmanager
def recompile_limits(limit: int = 4096) -> Iterator[None]:
    """Raise dynamo's per-function and accumulated recompile limits while active.

    ``torch.compile(dynamic=False)`` compiles once per shape; past the default
    limit (8) dynamo would silently fall back to eager and the
    ``native-compiled`` column would time eager code. The attribute names
    changed across torch versions (``cache_size_limit`` ->
    ``recompile_limit``): the first that exists of each pair is raised.
    """
    import torch._dynamo.config as dynamo_config

    saved = []
    for names in _LIMIT_NAMES:
        name = next((n for n in names if hasattr(dynamo_config, n)), None)
        if name is not None:
            saved.append((name, getattr(dynamo_config, name)))
            setattr(dynamo_config, name, max(limit, getattr(dynamo_config, name)))
    try:
        yield
    finally:
        for name, value in saved:
            setattr(dynamo_config, name, value)
