"""Arrival counters for kernels whose last program to arrive finishes a split in the same launch (W4A16's
split-K fixup, sparse_paged_attention's in-launch merge): zeroed int32 buffers, one per device and
stream, that every launch leaves zero."""

from __future__ import annotations

import threading

import torch

# Per (device, stream): every launch leaves
# them zero, so one buffer serves all launches on a stream. A grown buffer does not replace the old
# one, which a captured CUDA graph may still point at: all stay alive.
_COUNTERS: dict[tuple[torch.device, int], list[torch.Tensor]] = {}


def arrival_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Zeroed int32 counters, at least ``tiles`` of them, for launches on the current stream of ``device``
    (a tensor's device: it carries its index)."""
    # The raw handle, as Triton's launcher reads it: 0.13 against 3.0 µs of host time per call for
    # torch.cuda.current_stream(device).cuda_stream, which builds a Stream object (an H200,
    # benchmarks/results/h200/sweeps/w4a16_stream_lookup.txt).
    stream = torch._C._cuda_getCurrentRawStream(device.index) if device.type == "cuda" else 0
    buffers = _COUNTERS.get((device, stream))
    if buffers is None or buffers[-1].numel() < tiles:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Capture on a stream without counters: the graph's own buffer, zeroed in the graph and kept
            # alive by it, not cached (a cached capture-pool tensor would outlive the graph's outputs,
            # which torch.compile's CUDA-graph trees refuse).
            return torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
        buffers = _COUNTERS.setdefault((device, stream), [])
        buffers.append(_zeros_outside_graph_pools(max(tiles, 4096), device))
        if device.type == "cuda":
            _prepare_capture_stream(device, buffers[-1].numel())
    return buffers[-1]


def _prepare_capture_stream(device: torch.device, n: int) -> None:
    """Counters for the stream ``torch.cuda.graph`` captures on by default, made outside any capture.

    A capture on a stream without counters gets a buffer of its own per launch, zeroed in the graph:
    a memset before every split launch of every replay (1.04-1.14x the time at M <= 16,
    sweeps/w4a16_graph_counters.txt). Code warmed up on one stream and captured with
    ``torch.cuda.graph(g)`` runs on that shared capture stream, so it gets counters here, when the first
    eager launch makes any. torch creates the stream lazily as a class attribute; it is made here the
    same way when it does not exist yet and ``device`` is the current device."""
    capture = torch.cuda.graph.default_capture_stream
    if capture is None:
        if device.index != torch.cuda.current_device():
            return
        capture = torch.cuda.graph.default_capture_stream = torch.cuda.Stream(device)
    if capture.device != device:
        return
    buffers = _COUNTERS.setdefault((device, capture.cuda_stream), [])
    if not buffers or buffers[-1].numel() < n:
        buffers.append(_zeros_outside_graph_pools(n, device))


def _zeros_outside_graph_pools(n: int, device: torch.device) -> torch.Tensor:
    """Zeroed int32 ``[n]`` from the default memory pool, also while torch.compile's CUDA-graph trees route
    this thread's allocations to a graph's pool (their warm-up runs): allocated by another thread (on
    the device's default stream), then ordered before the current stream's next work. Once per stream."""
    if device.type != "cuda":
        return torch.zeros(n, dtype=torch.int32, device=device)
    made: list[torch.Tensor] = []
    worker = threading.Thread(target=lambda: made.append(torch.zeros(n, dtype=torch.int32, device=device)))
    worker.start()
    worker.join()
    torch.cuda.current_stream(device).wait_stream(torch.cuda.default_stream(device))
    return made[0]
