"""Sweep sparse_paged_attention's launch choice on the GPU: token tile, split count, warps.

Usage: PYTHONPATH=src python scripts/gpu/sweep_sparse_attention.py [--rows 1,16,64,256,1024,4096] [--kv e4m3]
       [--fixup] [--stages 2,3] [--v-bytes] [--prefetch-slots] [--out NAME.txt]

For each bench-grid shape (W = 2048, context 32k, page 1024, bf16 cache; (Hq, Hkv) in {(24, 2),
(64, 4)}, D in {128, 256}) it times every (block_n, num_splits, num_warps) with block_n in {32, 64},
warps in {4, 8} and splits a power of two up to 64 (not more programs than 16 waves of 4 per SM),
checks each against the float64 reference under the contract's rule, and prints per shape the best
configuration, the heuristic's, their ratio and the heuristic's % of the roofline (distinct cache
bytes + q, gate, out at the measured copy rate). Times: median of CUDA-graph replays (the bench's
timer). ``--fixup`` also times every split with the merge in the same launch (``AttentionConfig.fixup``,
marked ``f``); ``--stages 2,3`` also times other software-pipeline depths (marked ``s3``); ``--kv e4m3``
uses an fp8 cache; ``--v-bytes`` (fp8) also times every configuration with ``V`` read a byte at a time
instead of as 16-bit pairs (marked ``b``), side by side; ``--prefetch-slots`` times every configuration
both with and without the next tile's slots loaded ahead (``AttentionConfig.prefetch_slots``, marked ``p``).
Result: benchmarks/results/h200/sweeps/sparse_attention_config.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools

import torch
from sweep_io import emit

from exactfuse.bench.results import geomean
from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.sparse_paged_attention import _sparse_paged_attention, heuristics, native
from exactfuse.ops.sparse_paged_attention import triton as at
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.testing.cases import sparse_paged_attention as inputs
from exactfuse.utils import num_sms

TIMER = cudagraph_timer(rep_ms=4)
HEADER = "shape | best (block_n, splits, warps) us | heuristic us | heuristic / best | heuristic % roofline"


PAIRS_RULE = at._even


def kernel_variant(v_bytes: bool = False) -> None:
    """Make the launcher read an fp8 ``V`` a byte at a time (``v_bytes``, else by its own rule)."""
    at._even = (lambda t: False) if v_bytes else PAIRS_RULE


def time_us(args: tuple, config: AttentionConfig, v_bytes: bool = False) -> float:
    kernel_variant(v_bytes)
    try:
        return TIMER(lambda: at.launch_sparse_paged_attention(*args, config=config)) * 1e3
    finally:
        kernel_variant()


def label(key) -> str:
    c, v_bytes = key
    stages = f", s{c.num_stages}" if c.num_stages != AttentionConfig.num_stages else ""
    marks = (", f" if c.fixup else "") + stages + (", b" if v_bytes else "") + (", p" if c.prefetch_slots else "")
    return f"({c.block_n}, {c.num_splits}, {c.num_warps}{marks})"


def sweep_shape(
    args: tuple, rows: int, Hkv: int, W: int, sms: int, lines: list[str], fixups=(False,), stages=(2,), reads=(False,),
    prefetches=(False,),
) -> dict:  # fmt: skip
    """Every candidate's µs on one case (after its contract check), keyed by (config, V read by bytes)."""
    expected = torch.empty_like(args[0])
    _sparse_paged_attention.native(expected, *args[1:])
    ref = native.reference64(*args)
    scale = float(torch.linalg.vector_norm(ref))
    bound = 2 * float(torch.linalg.vector_norm(expected.double() - ref)) / scale  # CONTRACT's rule, on the device
    times = {}
    candidates = itertools.product((32, 64), (4, 8), (1, 2, 4, 8, 16, 32, 64), fixups, stages, reads, prefetches)
    for block_n, warps, splits, fixup, num_stages, v_bytes, prefetch in candidates:
        if splits > -(-W // block_n) or (splits > 1 and rows * Hkv * splits > 16 * 4 * sms) or (fixup and splits == 1):
            continue
        config = AttentionConfig(block_n, splits, warps, num_stages, fixup, prefetch)
        kernel_variant(v_bytes)
        at.launch_sparse_paged_attention(*args, config=config)
        kernel_variant()
        err = float(torch.linalg.vector_norm(args[0].double() - ref)) / scale
        if not err <= bound:
            lines.append(f"  {label((config, v_bytes))}: FAILS, rel err {err:.3g} > {bound:.3g}")
            continue
        times[config, v_bytes] = time_us(args, config, v_bytes)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,16,64,256,1024,4096")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--kv", choices=["bf16", "e4m3"], default="bf16")
    parser.add_argument("--fixup", action="store_true", help="also the merge in the same launch")
    parser.add_argument("--stages", default="2", help="software-pipeline stages to time (e.g. 2,3,4), marked s3 ...")
    parser.add_argument("--v-bytes", action="store_true", help="fp8: also V read a byte at a time, marked b")
    parser.add_argument(
        "--prefetch-slots", action="store_true", help="also the next tile's slots loaded ahead, marked p"
    )
    parser.add_argument("--out", default="sparse_attention_config.txt")
    opts = parser.parse_args()
    kv = torch.float8_e4m3fn if opts.kv == "e4m3" else torch.bfloat16
    dev = torch.device("cuda")
    sms = num_sms(dev)
    copy = measure_copy_bandwidth(dev)
    lines = [
        f"{torch.cuda.get_device_name()}: {sms} SMs, copy {copy / 1e9:,.0f} GB/s; W = {opts.width}, {opts.kv} cache"
    ]
    lines.append(HEADER)
    ratios, variant_ratios = [], {}
    W = opts.width
    shapes = itertools.product(inputs.GRID_HEADS, (128, 256), map(int, opts.rows.split(",")))
    for seed, ((Hq, Hkv), D, rows) in enumerate(shapes):
        case = inputs._grid_case(dev, torch.bfloat16, seed, rows, Hq, Hkv, D, W, kv)
        args = case.args
        stages = tuple(int(n) for n in opts.stages.split(","))
        fixups = (False, True) if opts.fixup else (False,)
        reads = (False, True) if opts.v_bytes else (False,)
        prefetches = (False, True) if opts.prefetch_slots else (False,)
        times = sweep_shape(args, rows, Hkv, W, sms, lines, fixups, stages, reads, prefetches)
        mine = heuristics.attention_config(rows, Hkv, D, W, sms, args[2].element_size()), False
        if mine not in times:
            times[mine] = time_us(args, mine[0])
        best = min(times, key=times.get)
        roof = _sparse_paged_attention.bytes_fn(*args) / copy * 1e6
        ratios.append(times[mine] / times[best])
        summary = (
            f"{case.id} | {label(best)} {times[best]:.1f} | {label(mine)} {times[mine]:.1f} | {ratios[-1]:.2f} | "
            f"{100 * roof / times[mine]:.0f}%"
        )
        lines.append(summary)
        lines.append(
            "   " + " ".join(f"{label(c)}:{t:.1f}" for c, t in sorted(times.items(), key=lambda kv: kv[1])[:8])
        )
        flipped = dataclasses.replace(mine[0], prefetch_slots=not mine[0].prefetch_slots)
        variants = ((opts.v_bytes, (mine[0], True), "V by bytes"), (opts.prefetch_slots, (flipped, False),
                    "slots prefetched" if flipped.prefetch_slots else "slots not prefetched"))  # fmt: skip
        for on, other_key, name in variants:
            if on:
                other = times.get(other_key) or time_us(args, *other_key)
                lines.append(f"   heuristic, rule / {name}: {times[mine]:.1f} / {other:.1f} us")
                variant_ratios.setdefault(name, []).append(times[mine] / other)
        print(summary, flush=True)
        del case, args
        torch.cuda.empty_cache()
    lines.append(f"heuristic / best: geomean {geomean(ratios):.3f}, max {max(ratios):.2f}")
    for name, r in variant_ratios.items():
        lines.append(f"rule / {name} at the heuristic: geomean {geomean(r):.3f}, min {min(r):.3f}, max {max(r):.3f}")
    emit(opts.out, lines)


if __name__ == "__main__":
    main()
