"""The dense path's dequantization tile on the GPU (W4A16 above M = 128): the kernel alone, then the whole path.

For the five benchmark (K, N) shapes (bf16, group 128, symmetric, weights rotated past the L2): each
``(BK, BN, warps)`` tile of ``w4a16_dequant_kernel`` writes the dense weight, checked bitwise against the
shipped tile's, and is timed (median of CUDA-graph replays); its bandwidth counts the packed words and
scales read and the dense weight written. Then at each M given (default 1024), side by side: the dense
path with the shipped tile and with the fastest tile (geomean over the shapes), each output bitwise equal to
native, against cuBLAS on a dense weight (benchmarks/results/h200/sweeps/w4a16_dequant_tiles.txt).

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_dequant.py [M ...]   # about 1 minute on an H200
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import SHAPES, bench_rotating, device_info, rotating_weights

from exactfuse.bench.results import geomean
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.ops.w4a16.dequant import dense_gemm, dequantize_dense
from exactfuse.ops.w4a16.heuristics import dense_config

SHIPPED = dense_config()
TILES = [  # (BK, BN, warps); the fourth is the shipped tile
    (64, 128, 4),
    (64, 256, 4),
    (128, 128, 4),
    (64, 128, 8),
    (128, 128, 8),
    (128, 256, 8),
    (256, 128, 8),
    (32, 256, 4),
    (64, 64, 4),
]


def main() -> None:
    ms = [int(m) for m in sys.argv[1:]] or [1024]
    dtype = torch.bfloat16
    dev, _, bw = device_info()
    lines = [f"{'K':>6} {'N':>6} {'tile':>16} {'µs':>8} {'TB/s':>6} {'% copy':>7}"]
    times: dict[tuple, list[float]] = {t: [] for t in TILES}
    weights = {}
    for K, N in SHAPES:
        ws, dense, copies = rotating_weights(K, N, dtype, dev)
        weights[(K, N)] = ws, dense, copies
        moved = ws[0].qweight.numel() * 4 + ws[0].scales.numel() * 2 + K * N * 2
        reference = dequantize_dense(ws[0].qweight, ws[0].scales, None, 128, SHIPPED)
        for tile in TILES:
            cfg = dataclasses.replace(SHIPPED, BK=tile[0], BN=tile[1], num_warps=tile[2])
            assert torch.equal(dequantize_dense(ws[0].qweight, ws[0].scales, None, 128, cfg), reference), tile
            us = bench_rotating(
                lambda i, cfg=cfg, ws=ws: dequantize_dense(ws[i].qweight, ws[i].scales, None, 128, cfg), copies
            )
            times[tile].append(us)
            tbs = moved / us / 1e6
            lines.append(f"{K:>6} {N:>6} {tile!s:>16} {us:8.2f} {tbs:6.2f} {100 * tbs / (bw / 1e12):6.1f}%")
        reference = None
    lines.append("\ngeomean µs per tile: " + "  ".join(f"{t}={geomean(v):.2f}" for t, v in times.items()))
    best = min(TILES, key=lambda t: geomean(times[t]))
    best_cfg = dataclasses.replace(SHIPPED, BK=best[0], BN=best[1], num_warps=best[2])
    shipped = (SHIPPED.BK, SHIPPED.BN, SHIPPED.num_warps)
    lines.append(f"fastest {best}: {geomean(times[best]) / geomean(times[shipped]):.3f}x the shipped tile's time")
    head = f"{'shipped':>8} {'fastest':>8} {'cuBLAS':>8} {'cuBLAS/shipped':>14} {'cuBLAS/fastest':>14}"
    lines.append(f"\n{'K':>6} {'N':>6} {'M':>5} {head}")
    for (K, N), (ws, dense, copies) in weights.items():
        for M in ms:
            a = torch.randn((M, K), dtype=dtype, device=dev)
            args0 = (a, ws[0].qweight, ws[0].scales, None, None, None, 128)
            native = w4a16_gemm.native(*args0)
            row = []
            for cfg in (SHIPPED, best_cfg):
                assert torch.equal(dense_gemm(*args0[:-1], 128, cfg), native), (K, N, M, cfg)
                row.append(
                    bench_rotating(
                        lambda i, a=a, cfg=cfg, ws=ws: dense_gemm(
                            a, ws[i].qweight, ws[i].scales, None, None, None, 128, cfg
                        ),
                        copies,
                    )
                )
            row.append(bench_rotating(lambda i, a=a, dense=dense: torch.matmul(a, dense[i]), copies))
            ratios = f"{row[2] / row[0]:14.3f} {row[2] / row[1]:14.3f}"
            lines.append(f"{K:>6} {N:>6} {M:>5} {row[0]:8.1f} {row[1]:8.1f} {row[2]:8.1f} {ratios}")
        weights[(K, N)] = None
        torch.cuda.empty_cache()
    emit("sweep_w4a16_dequant.txt", lines)


if __name__ == "__main__":
    main()
