"""Sweep sparse_paged_attention's launch choice on the GPU: token tile, split count, warps.

Usage: PYTHONPATH=src python scripts/gpu/sweep_sparse_attention.py [--rows 1,16,64,256,1024,4096]

For each bench-grid shape (W = 2048, context 32k, page 1024, bf16 cache; (Hq, Hkv) in {(24, 2),
(64, 4)}, D in {128, 256}) it times every (block_n, num_splits, num_warps) with block_n in {32, 64},
warps in {4, 8} and splits a power of two up to 64 (not more programs than 16 waves of 4 per SM),
checks each against the float64 reference under the contract's rule, and prints per shape the best
configuration, the heuristic's, their ratio and the heuristic's % of the roofline (distinct cache
bytes + q, gate, out at the measured copy rate). Times: median of CUDA-graph replays (the bench's
timer). Result: benchmarks/results/h200/sweeps/sparse_attention_config.txt.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from sweep_io import emit

from exactfuse.bench.results import geomean
from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.sparse_paged_attention import _sparse_paged_attention, heuristics, inputs, native
from exactfuse.ops.sparse_paged_attention import triton as at
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.testing import make_generator
from exactfuse.utils import num_sms

TIMER = cudagraph_timer(rep_ms=4)
HEADER = "shape | best (block_n, splits, warps) us | heuristic us | heuristic / best | heuristic % roofline"


def time_us(args: tuple, config: AttentionConfig) -> float:
    return TIMER(lambda: at.launch_sparse_paged_attention(*args, config=config)) * 1e3


def sweep_shape(args: tuple, rows: int, Hkv: int, W: int, sms: int, lines: list[str]) -> dict:
    """Every candidate's µs on one case (after its contract check)."""
    expected = torch.empty_like(args[0])
    _sparse_paged_attention.native(expected, *args[1:])
    ref = native.reference64(*args)
    scale = float(torch.linalg.vector_norm(ref))
    bound = 2 * float(torch.linalg.vector_norm(expected.double() - ref)) / scale  # CONTRACT's rule, on the device
    times = {}
    for block_n, warps, splits in itertools.product((32, 64), (4, 8), (1, 2, 4, 8, 16, 32, 64)):
        if splits > -(-W // block_n) or (splits > 1 and rows * Hkv * splits > 16 * 4 * sms):
            continue
        config = AttentionConfig(block_n, splits, warps)
        at.launch_sparse_paged_attention(*args, config=config)
        err = float(torch.linalg.vector_norm(args[0].double() - ref)) / scale
        if not err <= bound:
            lines.append(f"  {config}: FAILS, rel err {err:.3g} > {bound:.3g}")
            continue
        times[config] = time_us(args, config)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,16,64,256,1024,4096")
    parser.add_argument("--width", type=int, default=2048)
    opts = parser.parse_args()
    dev = torch.device("cuda")
    sms = num_sms(dev)
    copy = measure_copy_bandwidth(dev)
    lines = [f"{torch.cuda.get_device_name()}: {sms} SMs, copy {copy / 1e9:,.0f} GB/s; W = {opts.width}, bf16 cache"]
    lines.append(HEADER)
    ratios = []
    gen = make_generator(0)
    W = opts.width
    for (Hq, Hkv), D, rows in itertools.product(inputs.GRID_HEADS, (128, 256), map(int, opts.rows.split(","))):
        case = inputs._grid_case(dev, torch.bfloat16, rows, Hq, Hkv, D, W, torch.bfloat16, gen)
        args = case.args
        times = sweep_shape(args, rows, Hkv, W, sms, lines)
        mine = heuristics.attention_config(rows, Hkv, D, W, sms)
        if mine not in times:
            times[mine] = time_us(args, mine)
        best = min(times, key=times.get)
        roof = _sparse_paged_attention.bytes_fn(*args) / copy * 1e6
        ratios.append(times[mine] / times[best])
        lines.append(
            f"{case.id} | ({best.block_n}, {best.num_splits}, {best.num_warps}) {times[best]:.1f} | "
            f"({mine.block_n}, {mine.num_splits}, {mine.num_warps}) {times[mine]:.1f} | {ratios[-1]:.2f} | "
            f"{100 * roof / times[mine]:.0f}%"
        )
        lines.append("   " + " ".join(f"{c.block_n}/{c.num_splits}/{c.num_warps}:{t:.0f}" for c, t in sorted(
            times.items(), key=lambda kv: kv[1])[:8]))  # fmt: skip
        print(lines[-2], flush=True)
        del case, args
        torch.cuda.empty_cache()
    lines.append(f"heuristic / best: geomean {geomean(ratios):.3f}, max {max(ratios):.2f}")
    emit("sparse_attention_config.txt", lines)


if __name__ == "__main__":
    main()
