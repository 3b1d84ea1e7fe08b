"""Sweep (BD, tile, num_warps) of the gated-activation kernel on the GPU.

For each shape: the time of every config (CUDA-graph replay, median, inputs
rotated so the working set exceeds L2), the best config, and how far the
shipped heuristic (``heuristics.act_and_mul_config``) is from it. Last: each config's
geomean slowdown vs the per-shape best.

    PYTHONPATH=src python3 scripts/gpu/sweep_act_and_mul.py

Result: benchmarks/results/h200/sweeps/act_and_mul_blocks.txt (and its _summary.txt).
"""

import os

import torch
import triton
from sweep_io import out_dir

from exactfuse.bench.results import geomean
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.act_and_mul import heuristics
from exactfuse.ops.act_and_mul import triton as act

# d = 768 and 13824 are not multiples of 1024: BD = 256 / 512 tile them without masked lanes; the rest span
# T = 1..32768 and d = 31..14336.
SHAPES = [
    (1, 768),
    (16, 768),
    (16, 4096),
    (16, 14336),
    (4096, 768),
    (32768, 768),
    (4096, 13824),
    (4096, 4096),
    (32768, 14336),
    (32768, 31),
]
CONFIGS = [
    (bd, tile, w)
    for bd in (256, 512, 1024, 2048)
    for tile in (1024, 2048, 4096)
    for w in (4, 8)
    if tile >= bd and tile // (32 * w) >= 4
]


# the harness's timer: median of CUDA-graph replays, cyclic GC off during capture
TIMER = cudagraph_timer(rep_ms=20)


def run(x, y, T, D, bd, tile, w):
    bt = max(1, tile // bd)
    grid = (triton.cdiv(T, bt), triton.cdiv(D, bd))
    act.act_and_mul_kernel[grid](
        x,
        x,
        y,
        T,
        D,
        x.stride(0),
        x.stride(0),
        D,
        FORMULA=0,
        BT=bt,
        BD=bd,
        INT64_INDEX=False,
        JOINED=True,
        num_warps=w,
    )


def time_config(T, d, cfg, sets):
    def fn():
        for x, y in sets:
            run(x, y, T, d, *cfg)

    return TIMER(fn) * 1e3 / len(sets)


def main():
    rows, table = [], {}
    for T, d in SHAPES:
        nbytes = T * d * 2 * 3
        k = max(1, min(16, (200 << 20) // max(nbytes, 1)))
        sets = [
            (
                torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16),
                torch.empty(T, d, device="cuda", dtype=torch.bfloat16),
            )
            for _ in range(k)
        ]
        times = {}
        for bd, tile, w in CONFIGS:
            cfg = (min(bd, triton.next_power_of_2(d)), tile, w)
            if cfg not in times:
                times[cfg] = time_config(T, d, cfg, sets)
        best = min(times, key=times.get)
        bt, bd, w = heuristics.act_and_mul_config(d)
        ours = (bd, bt * bd, w)
        ours_t = times.get(ours) or time_config(T, d, ours, sets)
        table[(T, d)] = times
        rows.append((T, d, best, times[best], ours, ours_t, nbytes / times[best] / 1e6))
        ranked = sorted(times.items(), key=lambda kv: kv[1])[:4]
        print(f"T{T} d{d}: " + ", ".join(f"{c}={us:.2f}" for c, us in ranked), flush=True)
    print(f"{'T':>6} {'d':>6} {'best (BD,tile,w)':>20} {'us':>8} {'heuristic':>20} {'us':>8} {'x':>6} {'GB/s@best':>9}")
    for T, d, best, bt_, ours, ot, bw in rows:
        print(f"{T:>6} {d:>6} {best!s:>20} {bt_:8.2f} {ours!s:>20} {ot:8.2f} {ot / bt_:6.3f} {bw:9.0f}")
    print("\nconfig geomean slowdown vs per-shape best (shapes where timed):")
    scores = []
    for bd, tile, w in CONFIGS:
        cfg = (bd, tile, w)
        ratios = [t[cfg] / min(t.values()) for t in table.values() if cfg in t]
        if len(ratios) == len(table):
            scores.append((geomean(ratios), max(ratios), cfg))
    for g, worst, cfg in sorted(scores)[:12]:
        print(f"  {cfg!s:>20}  geomean {g:.3f}  worst {worst:.3f}")
    out = out_dir()
    if out:
        with open(os.path.join(out, "sweep_act_and_mul.txt"), "w") as f:
            for (T, d), t in table.items():
                for cfg, us in sorted(t.items(), key=lambda kv: kv[1]):
                    f.write(f"{T} {d} {cfg} {us:.3f}\n")


if __name__ == "__main__":
    main()
