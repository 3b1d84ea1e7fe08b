"""Sweep moe_silu_and_mul launch settings on the GPU and check its bench targets (about 3 minutes).

Usage: PYTHONPATH=src python scripts/gpu/sweep_moe.py [--full | --grid-order]

``--grid-order`` only times the shipped configuration with its grid order flipped
(``MoeConfig.row_grid``: flat and column-fastest against ``(row blocks, column tiles)``), side by
side over the sweep's shapes, each output checked bitwise against the shipped launch first; result
benchmarks/results/h200/sweeps/moe_grid_order.txt.

What it decides (printed at the end as "DECISIONS"):
1. The outputs per program (``BM * BN``: 1024, 2048 or 4096) and the warp
   count (4 or 8) of ``heuristics.moe_config``: the pair with the best geomean
   time over M in {384, 4096, 49152} x N in {768, 1536, 3072} x both
   layouts x (no weights, fp32 weights), bf16, and its gain over the current one.
2. ``MoeConfig.evict_first``: "evict_first" on the gateup loads vs no hint, same shapes;
   ``MoeConfig.store_run``: the interleaved store with the contiguity hint
   (8-byte stores, no shared memory) vs without (16-byte stores after a
   shared-memory layout conversion), interleaved shapes only.
3. Checks: the kernel against native on CUDA (max ulp; 0 means bitwise: the
   contract only asks for Ulp(1)), and both layouts bitwise equal.
4. The bench targets for the current heuristic over the full bench grid
   (M in {1, 6, 96, 384, 4096, 49152} x N in {768, 1024, 1536, 3072} x layouts x
   weights): % of the copy-bandwidth roofline at M >= 4096 (target >= 90%) and
   the geomean speedup over torch.compile of the native spec (target >= 1.5x;
   static shapes; at N = 1024 only to save compile time, all N with --full;
   ``exactfuse bench`` is the reference measurement).
Times are medians of CUDA-graph replays; shapes whose working set is below twice
the L2 rotate through several buffer sets so the inputs come from DRAM.
Per-shape rows go to ``sweep_moe.json`` in the output folder when one is set
(``sweep_io.out_dir``). Result:
benchmarks/results/h200/sweeps/moe_config.txt and moe_config.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import time

import torch
import triton
from sweep_io import emit, out_dir

from exactfuse.bench.results import geomean
from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import DEFAULT_L2_BYTES, cudagraph_timer, recompile_limits, rotation_count
from exactfuse.ops.moe_silu_and_mul import heuristics as mh
from exactfuse.ops.moe_silu_and_mul import native as moe_native
from exactfuse.ops.moe_silu_and_mul import triton as mt
from exactfuse.registry import ulp_distance

SWEEP_M, SWEEP_N = (384, 4096, 49152), (768, 1536, 3072)
GRID_M, GRID_N = (1, 6, 96, 384, 4096, 49152), (768, 1024, 1536, 3072)
TARGETS, WARPS = (1024, 2048, 4096), (4, 8)
L2_BYTES = DEFAULT_L2_BYTES


# the harness's timer: median of CUDA-graph replays, cyclic GC off during capture
TIMER = cudagraph_timer(rep_ms=10)


def make_sets(M: int, N: int, weights: bool, interleaved: bool) -> list[tuple]:
    """Enough (gateup, weights) sets to cover 2x the L2, each set ~ one call's bytes."""
    one = M * 2 * N * 2 + M * N * 2
    k = rotation_count(one, L2_BYTES)  # the harness's rule
    return [
        (
            torch.randn(M, 2 * N, dtype=torch.bfloat16, device="cuda"),
            torch.rand(M, device="cuda") if weights else None,
            interleaved,
        )
        for _ in range(k)
    ]


def time_us(fn, sets) -> float:
    """Median µs per call of ``fn(*set)``, CUDA-graph replay over the rotating sets."""
    for s in sets:
        fn(*s)  # compile outside the capture
    torch.cuda.synchronize()
    return TIMER(lambda: [fn(*s) for s in sets]) * 1e3 / len(sets)


def shipped(x: torch.Tensor, interleaved: bool) -> mh.MoeConfig:
    """The heuristic's configuration for ``x: [M, 2N]``."""
    return mh.moe_config(x.shape[1] // 2, x.element_size(), interleaved)


def run_triton(x, w, interleaved):
    return mt.launch_moe_silu_and_mul(x, w, interleaved, None)


def launcher(target: int, warps: int, flip_evict: bool = False, flip_store: bool = False):
    """The launch with ``target`` outputs per program and ``warps``, optionally one hint flipped."""

    def run(x, w, interleaved):
        config = shipped(x, interleaved)
        config = dataclasses.replace(config, BM=max(1, target // config.BN), num_warps=warps)
        if flip_evict:
            config = dataclasses.replace(config, evict_first=not config.evict_first)
        if flip_store:
            config = dataclasses.replace(config, store_run=0 if config.store_run else 16 // (2 * x.element_size()))
        return mt.launch_moe_silu_and_mul(x, w, interleaved, None, config=config)

    return run


SPLIT_1024 = mh.moe_config(1024, 2, False)  # bf16, N = 1024: a program's outputs and warps
EVICT_FIRST = SPLIT_1024.evict_first
STORE_HINT = mh.moe_config(1024, 2, True).store_run != 0


def grid_order() -> list[str]:
    """Shipped grid order against the other one at the shipped configuration, per sweep shape."""
    lines = ["shape | shipped µs | grid flipped µs | shipped / flipped"]
    ratios = []
    for M, N, inter, weights in itertools.product(SWEEP_M, SWEEP_N, (False, True), (False, True)):
        sets = make_sets(M, N, weights, inter)
        x, w, _ = sets[0]
        config = shipped(x, inter)
        other = dataclasses.replace(config, row_grid=not config.row_grid)

        def run(x, w, interleaved, config=other):
            return mt.launch_moe_silu_and_mul(x, w, interleaved, None, config=config)

        assert torch.equal(run(x, w, inter), run_triton(x, w, inter)), (M, N, inter, weights)
        mine, theirs = time_us(run_triton, sets), time_us(run, sets)
        ratios.append(mine / theirs)
        shape = f"M{M}-N{N}-{'inter' if inter else 'split'}-{'w32' if weights else 'none'}"
        lines.append(f"{shape} | {mine:.1f} | {theirs:.1f} | {ratios[-1]:.3f}")
        print(lines[-1], flush=True)
        del sets
    lines.append(
        f"shipped (row_grid={mh.moe_config(1024, 2, False).row_grid}) / flipped: geomean {geomean(ratios):.3f}, "
        f"min {min(ratios):.3f}, max {max(ratios):.3f}"
    )
    return lines


def sweep(rows: list[dict]) -> dict:
    current = (SPLIT_1024.BM * SPLIT_1024.BN, SPLIT_1024.num_warps)
    other = not EVICT_FIRST  # the eviction setting not in use
    times: dict = {}
    for M, N, inter, weights in itertools.product(SWEEP_M, SWEEP_N, (False, True), (False, True)):
        sets = make_sets(M, N, weights, inter)
        shape = f"M{M}-N{N}-{'inter' if inter else 'split'}-{'w32' if weights else 'none'}"
        row = {"shape": shape}
        for target, warps in itertools.product(TARGETS, WARPS):
            row[f"t{target}-w{warps}"] = times.setdefault((target, warps), {})[shape] = time_us(
                launcher(target, warps), sets
            )
        row["evict_first_flipped"] = times.setdefault("other_hint", {})[shape] = time_us(
            launcher(*current, flip_evict=True), sets
        )
        if inter:
            row["store_hint_flipped"] = times.setdefault("store", {})[shape] = time_us(
                launcher(*current, flip_store=True), sets
            )
        rows.append(row)
        del sets
    base = times[current]
    print(f"\n{'config':>12} {'geomean vs current':>20}")
    gains = {}
    for key in itertools.product(TARGETS, WARPS):
        gains[key] = geomean(base[s] / times[key][s] for s in base)
        print(f"{f't{key[0]}-w{key[1]}':>12} {gains[key]:>19.3f}x")
    hint_gain = geomean(base[s] / times["other_hint"][s] for s in base)
    print(f"{'evict_first ' + str(other):>12} {hint_gain:>19.3f}x  (vs {EVICT_FIRST})")
    store_gain = geomean(base[s] / times["store"][s] for s in times["store"])
    print(f"{'store hint ' + ('off' if STORE_HINT else 'on'):>12} {store_gain:>19.3f}x  (interleaved)")
    best = max(gains, key=gains.get)
    return {
        "current": current,
        "best": best,
        "best_gain": gains[best],
        "hint_other": other,
        "hint_gain": hint_gain,
        "store_hint_flipped_gain": store_gain,
    }


def check_numerics() -> dict:
    """Max ulp of the kernel vs native per dtype (0: bitwise), and whether both layouts agree bitwise."""
    worst, layouts_equal = {}, True
    for M, N in ((7, 384), (33, 960), (384, 1024), (4096, 3072)):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            g = torch.randn(M, N, dtype=dtype, device="cuda") * 3
            u = torch.randn(M, N, dtype=dtype, device="cuda")
            w = torch.rand(M, device="cuda")
            split, inter = torch.cat([g, u], 1), torch.stack([g, u], 2).reshape(M, 2 * N)
            for weights in (None, w):
                a = run_triton(split, weights, False)
                b = run_triton(inter, weights, True)
                layouts_equal &= torch.equal(a, b)
                ref = moe_native.moe_silu_and_mul(split, weights, False)
                ulp = max(int(ulp_distance(a, ref).max()), int(ulp_distance(b, ref).max()))
                key = str(dtype).removeprefix("torch.")
                worst[key] = max(worst.get(key, 0), ulp)
    print(f"\nmax ulp vs native: {worst} (0: bitwise; contract Ulp(1)); layouts bitwise equal: {layouts_equal}")
    return {"max_ulp_vs_native": worst, "layouts_bitwise_equal": layouts_equal}


def targets(rows: list[dict], bandwidth: float, full: bool) -> dict:
    compiled = torch.compile(moe_native.moe_silu_and_mul, dynamic=False)
    roof, speedups = [], []
    print(f"\n{'shape':>26} {'triton µs':>10} {'% roof':>7} {'compile µs':>11} {'speedup':>8}")
    for M, N, inter, weights in itertools.product(GRID_M, GRID_N, (False, True), (False, True)):
        sets = make_sets(M, N, weights, inter)
        shape = f"M{M}-N{N}-{'inter' if inter else 'split'}-{'w32' if weights else 'none'}"
        us = time_us(run_triton, sets)
        pct = 100 * (M * 2 * N * 2 + (M * 4 if weights else 0) + M * N * 2) / bandwidth / (us * 1e-6)
        if M >= 4096:
            roof.append(pct)
        row = {"shape": shape, "triton_us": us, "pct_roofline": pct}
        if full or N == 1024:
            row["compile_us"] = time_us(compiled, sets)
            speedups.append(row["compile_us"] / us)
        print(
            f"{shape:>26} {us:>10.2f} {pct:>6.1f}% {row.get('compile_us', float('nan')):>11.2f} "
            f"{row.get('compile_us', float('nan')) / us:>7.2f}x"
        )
        rows.append(row)
        del sets
    summary = {
        "min_pct_roofline_M_ge_4096": min(roof),
        "geomean_speedup_vs_compile": geomean(speedups) if speedups else float("nan"),
    }
    print(
        f"\n% roofline at M >= 4096: min {min(roof):.1f}% (target >= 90%); "
        f"geomean speedup vs torch.compile: {summary['geomean_speedup_vs_compile']:.2f}x over "
        f"{len(speedups)} shapes (target >= 1.5x)"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="torch.compile baseline at every N (slower)")
    parser.add_argument(
        "--no-targets", action="store_true", help="skip step 4 (`exactfuse bench` measures the targets too)"
    )
    parser.add_argument("--grid-order", action="store_true", help="only the grid order, flipped against shipped")
    args = parser.parse_args()
    start = time.time()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    if args.grid_order:
        emit(
            "moe_grid_order.txt", [f"{torch.cuda.get_device_name()}; bf16, median of CUDA-graph replays", *grid_order()]
        )
        return
    bandwidth = measure_copy_bandwidth(torch.device("cuda"))
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write)")
    rows: list[dict] = []
    result = {"numerics": check_numerics(), "sweep": sweep(rows)}
    s = result["sweep"]
    print("\nDECISIONS")
    print(
        f"  heuristic: best (outputs per program, warps) = {s['best']}, {s['best_gain']:.3f}x geomean over the "
        f"current {s['current']}; change moe_config only if the gain is >= 1.03x"
    )
    print(
        f"  eviction: evict_first = {s['hint_other']} is {s['hint_gain']:.3f}x vs the current "
        f"{EVICT_FIRST}; flip it only if >= 1.02x"
    )
    print(
        f"  store hint: flipping the store hint (now {STORE_HINT}) is "
        f"{s['store_hint_flipped_gain']:.3f}x on interleaved shapes; flip only if >= 1.02x"
    )
    print(f"  numerics: {result['numerics']}", flush=True)
    if not args.no_targets:
        with recompile_limits():
            result["targets"] = targets(rows, bandwidth, args.full)
    print(f"done in {time.time() - start:.0f} s")
    if out := out_dir():
        with open(os.path.join(out, "sweep_moe.json"), "w") as f:
            json.dump({"result": result, "rows": rows, "bandwidth": bandwidth}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
