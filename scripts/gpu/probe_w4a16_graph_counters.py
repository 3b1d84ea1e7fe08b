"""What a CUDA-graph capture costs the W4A16 split-K fixup when its stream has no arrival counters.

Usage: PYTHONPATH=src python3 scripts/gpu/probe_w4a16_graph_counters.py

``arrival.arrival_counters`` gives a capture on a stream without cached counters a zeroed buffer of its
own per call (a memset node in the graph before every fixup launch). torch.cuda.graph captures on its
own side stream, so the first eager launch that makes counters also makes them for that stream
(``arrival._prepare_capture_stream``). Per (K, N, M) on the fixup buckets (gemv1, decode), bf16, weights
rotated past the L2: µs per call (median of CUDA-graph replays, as the bench times) with that
preparation switched off (a buffer per launch in the graph), as shipped, and with the second-launch
reduction instead of the fixup (the split unchanged), each output checked bitwise against the eager
one first. Also whether
``cudaStreamGetCaptureInfo`` is reachable through ctypes (a capture id would let one capture share a
buffer). Result: benchmarks/results/h200/sweeps/w4a16_graph_counters.txt.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import bench_rotating, rotating_weights

from exactfuse.ops import arrival
from exactfuse.ops.w4a16 import heuristics as wh
from exactfuse.ops.w4a16 import triton as w4

CASES = ((4096, 4096, 1), (8192, 8192, 1), (4096, 4096, 16), (8192, 8192, 16), (14336, 4096, 4))


def capture_id_probe() -> str:
    """Whether the loaded CUDA runtime answers cudaStreamGetCaptureInfo for a capturing stream."""
    with open("/proc/self/maps") as f:
        libs = sorted({p for p in f.read().split() if "libcudart.so" in p})
    if not libs:
        return "no libcudart in this process's maps"
    fn = getattr(ctypes.CDLL(libs[0]), "cudaStreamGetCaptureInfo", None)
    if fn is None:
        return f"{libs[0]}: no cudaStreamGetCaptureInfo symbol"
    status, ident = ctypes.c_int(-1), ctypes.c_ulonglong(0)
    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        err = fn(ctypes.c_void_p(s.cuda_stream), ctypes.byref(status), ctypes.byref(ident), None, None, None, None)
        torch.zeros(1, device="cuda")
    return (
        f"{os.path.basename(libs[0])}: cudaStreamGetCaptureInfo -> err {err}, status {status.value}, id {ident.value}"
    )


def case_line(K: int, N: int, M: int, dev: torch.device, sms: int, capture_stream: torch.cuda.Stream) -> str:
    weights, _, copies = rotating_weights(K, N, torch.bfloat16, dev)
    a = torch.randn((M, K), dtype=torch.bfloat16, device=dev)
    cfg = wh.select_config(M, N, K, 128, sms)
    two_pass = dataclasses.replace(cfg, fixup=False)

    def call(i, config=cfg):
        w = weights[i]
        return w4.launch_w4a16_gemm(a, w.qweight, w.scales, w.zeros, None, None, 128, config=config)

    eager = call(0)
    assert torch.equal(call(0, two_pass), eager), (K, N, M, "the second-launch reduction differs from the fixup")
    key = (dev, capture_stream.cuda_stream)
    prepare = arrival._prepare_capture_stream
    arrival._COUNTERS.clear()
    arrival._prepare_capture_stream = lambda device, n: None  # as before the capture stream got counters
    try:
        times = [bench_rotating(call, copies)]
    finally:
        arrival._prepare_capture_stream = prepare
    assert key not in arrival._COUNTERS, "the capture stream got counters with their preparation off"
    arrival._COUNTERS.clear()
    times.append(bench_rotating(call, copies))  # the shipped path: the first eager launch prepares them
    assert key in arrival._COUNTERS, "the first eager launch made no counters for the capture stream"
    times.append(bench_rotating(lambda i: call(i, two_pass), copies))
    cells = " | ".join(f"{t:.2f}" for t in times)
    return f"{K} | {N} | {M} | {cfg.name} split {cfg.split_k} | {cells} | {times[0] / times[1]:.3f}"


def main() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())  # with its index: the counters' key is a tensor's device
    sms = w4.num_sms(dev)
    torch.cuda.graph(torch.cuda.CUDAGraph())  # creates torch.cuda.graph's shared capture stream
    capture_stream = torch.cuda.graph.default_capture_stream
    lines = [f"{torch.cuda.get_device_name()}; bf16 group 128; µs per call, median of CUDA-graph replays",
             "K | N | M | config | no counters on the capture stream | counters prepared for it (shipped) | "
             "second-launch reduction | first / second"]  # fmt: skip
    for K, N, M in CASES:
        lines.append(case_line(K, N, M, dev, sms, capture_stream))
        print(lines[-1], flush=True)
    lines.append(capture_id_probe())
    emit("w4a16_graph_counters.txt", lines)


if __name__ == "__main__":
    main()
