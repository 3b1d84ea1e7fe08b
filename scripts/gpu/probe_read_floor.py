"""The read floor of W4A16 at M = 1: how close any kernel that reads its bytes comes to the memory roofline.

For each benchmark (K, N) shape, the bytes the bench's roofline counts at M = 1 (packed weights, bf16
scales, activations and output) are read by streaming-read Triton kernels (16-byte loads, UNROLL
independent loads per thread, one int32 out per program; the fastest of several block sizes counts),
timed as the W4A16 sweeps time their kernels (one CUDA graph over copies rotated past the L2). An empty
kernel timed the same way gives the launch floor. Where the read floor is above roofline / 0.7, no kernel
that reads those bytes meets #5's "M <= 16: 70% of the roofline" target at that shape.

    PYTHONPATH=src python3 scripts/gpu/probe_read_floor.py   # about 30 s

Result: benchmarks/results/h200/sweeps/w4a16_read_floor.txt.
"""

from __future__ import annotations

import math
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import ROTATE_BYTES, SHAPES, bench_rotating, device_info

# (words per load per program, loads in flight per thread, warps): 4 words (16 bytes) per thread and load
CONFIGS = [(w, u, w // 128) for w in (512, 1024, 2048) for u in (1, 2, 4, 8)]


@triton.jit
def read_kernel(p_in, p_out, n_words, WORDS: tl.constexpr, UNROLL: tl.constexpr):
    """Program i reads words ``i * WORDS * UNROLL ..`` in UNROLL independent loads and stores their sum."""
    base = tl.program_id(0) * WORDS * UNROLL
    acc = tl.zeros((WORDS,), tl.int32)
    for u in tl.static_range(UNROLL):
        o = base + u * WORDS + tl.arange(0, WORDS)
        acc += tl.load(p_in + o, mask=o < n_words, other=0)
    tl.store(p_out + tl.program_id(0), tl.sum(acc, 0))


@triton.jit
def empty_kernel(p_out):
    pass


def m1_bytes(K: int, N: int) -> int:
    """What the bench's roofline counts at M = 1, group 128, bf16: packed weights, scales, activations, output."""
    return K * N // 2 + (K // 128) * N * 2 + K * 2 + N * 2


def main() -> None:
    dev, _, bw = device_info()
    out = torch.empty(1 << 20, dtype=torch.int32, device=dev)
    empty = bench_rotating(lambda i: empty_kernel[(1,)](out), 16)
    lines = [f"copy bandwidth {bw / 1e12:.2f} TB/s; empty kernel {empty:.2f} µs per launch (CUDA graph)"]
    lines.append(f"{'K':>6} {'N':>6} {'MB':>6} {'roof µs':>8} {'read µs':>8} {'read/roof':>9} {'best':>14}")
    for K, N in SHAPES:
        nbytes = m1_bytes(K, N)
        n_words = nbytes // 4
        copies = max(2, min(16, math.ceil(ROTATE_BYTES / nbytes)))
        bufs = [torch.randint(0, 1 << 30, (n_words,), dtype=torch.int32, device=dev) for _ in range(copies)]
        times = {}
        for words, unroll, warps in CONFIGS:
            grid = (triton.cdiv(n_words, words * unroll),)
            assert grid[0] <= out.numel()
            read_kernel[grid](bufs[0], out, n_words, WORDS=words, UNROLL=unroll, num_warps=warps)
            assert (out[: grid[0]].sum() - bufs[0].sum()) % (1 << 32) == 0  # read every word (int32 sums wrap)
            times[(words, unroll, warps)] = bench_rotating(
                lambda i, g=grid, w=words, u=unroll, nw=warps, bufs=bufs, n=n_words: read_kernel[g](
                    bufs[i], out, n, WORDS=w, UNROLL=u, num_warps=nw
                ),
                copies,
            )
        best = min(times, key=times.get)
        roof = nbytes / bw * 1e6
        lines.append(
            f"{K:>6} {N:>6} {nbytes / 1e6:6.1f} {roof:8.2f} {times[best]:8.2f} "
            f"{100 * roof / times[best]:8.1f}% {best!s:>14}"
        )
        bufs = None
        torch.cuda.empty_cache()
    lines.append("read/roof: the roofline's time over the fastest read's (a GEMV reading these bytes can do no better)")
    emit("probe_read_floor.txt", lines)


if __name__ == "__main__":
    main()
