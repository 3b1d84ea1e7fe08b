"""The W4A16 dense path's floor against cuBLAS at M >= 1024, from the committed bench results.

Usage: python3 scripts/w4a16_dense_floor.py [benchmarks/results/h200/w4a16_gemm.csv] [--bandwidth 4.19e12]

Above M = 128 the op dequantizes the weights (reads ``K * N / 2`` bytes of packed words and the scales,
writes the ``2 * K * N``-byte dense weight) and calls cuBLAS on them. However fast the dequantization,
it moves those bytes, so at the copy bandwidth (4.19 TB/s on the H200,
benchmarks/results/h200/sweeps/w4a16_paths_kmajor_dense.txt) the path can reach at most
``cublas / (cublas + bytes / bandwidth)`` of cuBLAS on the dense weight. Per bench row: the measured
ratio beside that bound. Result: benchmarks/results/h200/sweeps/w4a16_dense_floor.txt.
"""

from __future__ import annotations

import argparse
import csv
import math
import re


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("csv", nargs="?", default="benchmarks/results/h200/w4a16_gemm.csv")
    parser.add_argument("--bandwidth", type=float, default=4.19e12, help="copy bandwidth, bytes/s")
    args = parser.parse_args()
    with open(args.csv) as f:
        rows = list(csv.DictReader(f))
    times = {(r["dtype"], r["shape"], r["provider"]): float(r["time_us"]) for r in rows if r["time_us"]}
    print(f"copy bandwidth {args.bandwidth / 1e12:.2f} TB/s; µs; ratio = cublas-dense / exactfuse")
    print("dtype | shape | exactfuse | cublas-dense | ratio | dequantization floor | bound | ratio / bound")
    fractions = []
    for (dtype, shape, provider), ours in sorted(times.items()):
        m = re.match(r"M(\d+)-K(\d+)-N(\d+)$", shape)
        if provider != "triton" or not m or int(m.group(1)) < 1024:
            continue
        K, N = int(m.group(2)), int(m.group(3))
        cublas = times[dtype, shape, "cublas-dense"]
        floor = (K * N // 2 + 2 * K * N + 2 * (K // 128) * N) / args.bandwidth * 1e6
        bound = cublas / (cublas + floor)
        fractions.append(cublas / ours / bound)
        print(f"{dtype} | {shape} | {ours:.1f} | {cublas:.1f} | {cublas / ours:.3f} | {floor:.1f} | {bound:.3f} | "
              f"{fractions[-1]:.3f}")  # fmt: skip
    geo = math.exp(sum(map(math.log, fractions)) / len(fractions))
    print(f"ratio / bound: geomean {geo:.3f}, min {min(fractions):.3f}, max {max(fractions):.3f}")


if __name__ == "__main__":
    main()
