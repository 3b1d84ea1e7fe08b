"""W4A16 small-M sweep on the GPU: the CUDA-core gemv kernel against the tl.dot decode tile.

bf16, group 128, symmetric, weights rotated past L2; every output passes the op's contract
before it is timed.

Phase 1, M = 1 on (4096, 4096) and (4096, 14336): every gemv candidate (BN, BK, warps, stages,
split-K rule as programs per SM). Phase 2, the five benchmark (K, N) shapes at M in
``MS``: the best four candidates of phase 1, the best with every weight rounded to bf16
(``gemv_round_w``, the spec's rounding, to price it), and the shipped decode tile. Prints per
(K, N, M) the times, % of the memory roofline, and per M the geomeans.

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_gemv.py      # about 4 minutes on an H200
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_decode import SHAPES, bench_rotating, device_info, rotating_weights

from exactfuse.bench.results import geomean
from exactfuse.ops.w4a16 import CONTRACT, _bytes, w4a16_gemm
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import BUCKETS, Bucket, bucket_config

MS = (1, 2, 4, 8)
# (BN, BK, warps, stages, programs per SM)
CANDIDATES = list(itertools.product((64, 128, 256), (64, 128), (4, 8), (1, 2), (4, 8, 16)))
DECODE = next(b for b in BUCKETS if b.name == "decode")


def gemv_bucket(BN, BK, warps, stages, pps) -> Bucket:
    return Bucket(8, "gemv", 8, BN, BK, warps, stages, pps, True, True, gemv=True)


def timed(args0, ws, copies, cfg) -> float:
    """µs per call of ``cfg`` after its output passed the contract on ``args0``."""
    out = w4.launch_w4a16_gemm(*args0, config=cfg)
    check = CONTRACT.check(out, w4a16_gemm.native(*args0), args=args0)
    assert check.passed, (cfg, check.detail)
    a = args0[0]
    return bench_rotating(
        lambda i: w4.launch_w4a16_gemm(a, ws[i].qweight, ws[i].scales, None, None, None, 128, config=cfg), copies
    )


def main() -> None:
    dtype = torch.bfloat16
    dev, sms, bw = device_info()
    lines = []
    scores: dict[tuple, list[float]] = {}
    for K, N in SHAPES[:2]:
        ws, _, copies = rotating_weights(K, N, dtype, dev)
        a = torch.randn((1, K), dtype=dtype, device=dev)
        args0 = (a, ws[0].qweight, ws[0].scales, None, None, None, 128)
        for cand in CANDIDATES:
            cfg = bucket_config(gemv_bucket(*cand), 1, N, K, 128, sms)
            scores.setdefault(cand, []).append(timed(args0, ws, copies, cfg))
        ws = None
        torch.cuda.empty_cache()
    ranked = sorted(scores, key=lambda c: geomean(scores[c]))
    lines.append("phase 1, M = 1, geomean µs over (4096, 4096) and (4096, 14336), (BN, BK, warps, stages, pps):")
    lines += [f"  {c}: {geomean(scores[c]):.2f}  ({'  '.join(f'{t:.2f}' for t in scores[c])})" for c in ranked[:12]]
    lines.append(f"  worst {ranked[-1]}: {geomean(scores[ranked[-1]]):.2f}")
    emit("sweep_w4a16_gemv_phase1.txt", lines)

    top = ranked[:4]
    variants = {f"gemv{c}": gemv_bucket(*c) for c in top}
    lines2 = [f"{'K':>6} {'N':>6} {'M':>3} {'variant':<34} {'µs':>7} {'roof%':>6} {'split':>5}"]
    per_m: dict[tuple[int, str], list[float]] = {}
    for K, N in SHAPES:
        ws, _, copies = rotating_weights(K, N, dtype, dev)
        for M in MS:
            a = torch.randn((M, K), dtype=dtype, device=dev)
            args0 = (a, ws[0].qweight, ws[0].scales, None, None, None, 128)
            roof = _bytes(*args0) / bw * 1e6
            cfgs = {name: bucket_config(b, M, N, K, 128, sms) for name, b in variants.items()}
            best = cfgs[f"gemv{top[0]}"]
            cfgs["gemv-best round_w"] = dataclasses.replace(best, gemv_round_w=True)
            cfgs["decode (shipped tl.dot)"] = bucket_config(DECODE, M, N, K, 128, sms)
            for name, cfg in cfgs.items():
                t = timed(args0, ws, copies, cfg)
                per_m.setdefault((M, name), []).append(t)
                lines2.append(f"{K:>6} {N:>6} {M:>3} {name:<34} {t:7.2f} {100 * roof / t:6.1f} {cfg.split_k:>5}")
        ws = None
        torch.cuda.empty_cache()
    lines2.append("\ngeomean µs over the five shapes:")
    for M in MS:
        lines2.append(f"  M={M}: " + "  ".join(f"{name}={geomean(v):.2f}" for (m, name), v in per_m.items() if m == M))
    emit("sweep_w4a16_gemv.txt", lines2)


if __name__ == "__main__":
    main()
