"""W4A16 fused-kernel tile x split-K rule sweep on the GPU (bf16 or ``--dtype fp16``, group 128, symmetric).

Weights rotate over enough copies to exceed the 60 MB L2. For each M bucket it
times candidate tiles (BM, BN, BK, warps, stages) and split-K rules (how many
programs per SM the rule aims at, ``programs_per_sm``; ``-nocap``: without the
workspace-traffic cap). Each config's output passes the op's contract before it
is timed. Prints per shape the best config, % of the memory roofline and
speedup over cuBLAS dense; per bucket the geomean of every config and the
shipped one. JSON to the output folder (``sweep_io.out_dir``).

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_tiles.py       # about 2 minutes on an H200
    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_tiles.py --bucket decode \
        --tiles 16,128,128,4,3 16,128,128,8,3 --rules p4 p8          # one bucket, other candidates
    ... --fields FIELD ...                                          # TileConfig booleans on every candidate

Results it backs (docs/heuristics.md): benchmarks/results/h200/sweeps/w4a16_tile_buckets.*,
w4a16_decode_tiles_8warps.*, w4a16_m32_tiles_8warps.*, w4a16_m64_m128_tiles.*, w4a16_gemv_tiles*.*,
w4a16_gemv_vs_decode_*.*. The ``*_maxnreg`` files were made with a register-cap field that is no
longer in ``TileConfig``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit_json

from exactfuse.bench.results import geomean
from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.w4a16 import CONTRACT, dense_weight, w4a16_gemm
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import BUCKETS as SHIPPED_BUCKETS
from exactfuse.ops.w4a16.heuristics import TileConfig, choose_split
from exactfuse.testing.cases.w4a16 import _bytes, _random_prepared
from exactfuse.utils import next_power_of_2

SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672))
BUCKETS = {  # name: (Ms, tiles (BM, BN, BK, warps, stages)), the shipped tile first
    # BM = 0: the CUDA-core kernel (gemv.py) with BM = next_pow2(M); the decode bucket's tl.dot tile beside it
    # (edit the bucket's Ms to time M = 4). "shipped" is the M = 2 bucket's tile and rule; M = 1 has its own
    # bucket, gemv1: (0, 64, 256, 2, 1) p16w
    "gemv": (
        (1, 2),
        [
            *((0, 64, 128, 2, 1), (16, 64, 128, 4, 4), (0, 128, 128, 4, 1), (0, 256, 64, 4, 1)),
            *((0, 64, 64, 2, 1), (0, 128, 64, 4, 1)),
        ],
    ),
    "decode": (
        (1, 16),
        [(16, 64, 128, 4, 4), (16, 128, 128, 4, 3), (16, 64, 128, 4, 3), (16, 128, 64, 4, 4), (16, 64, 64, 4, 4)],
    ),
    "m32": ((32,), [(32, 64, 128, 4, 4), (32, 64, 128, 4, 3), (32, 128, 128, 4, 3), (32, 64, 64, 4, 4)]),
    "m64": ((64,), [(64, 64, 64, 4, 4), (64, 64, 64, 8, 4), (64, 64, 128, 4, 4), (64, 128, 64, 4, 4)]),
    "m128": ((128,), [(128, 64, 64, 4, 3), (128, 64, 64, 8, 3), (128, 128, 64, 8, 3), (64, 64, 64, 4, 4)]),
}
RULES_BY_BUCKET = {  # the rules each bucket is swept with, the shipped one among them
    "gemv": ("p4w", "p8w", "p16w"),
    "decode": ("p4", "p3w", "p4w", "p6w"),
    "m32": ("p2", "p4", "p8"),
    "m64": ("p2", "p8-nocap"),
    "m128": ("p4-nocap", "p8-nocap"),
}
SHIPPED_RULE = {
    "gemv": "p8w",
    "decode": "p4w",
    "m32": "p2",
    "m64": "p8-nocap",
    "m128": "p4-nocap",
}  # heuristics.BUCKETS
ROTATE_BYTES = 256 << 20  # weights rotate over enough copies to exceed the 60 MB L2
# name: (programs_per_sm, traffic_cap, one_wave)
RULES = {
    "p2": (2, True, False),
    "p4": (4, True, False),
    "p8": (8, True, False),
    "p16": (16, True, False),
    "p8-nocap": (8, False, False),
    "p4-nocap": (4, False, False),
    "p2w": (2, True, True),
    "p3w": (3, True, True),
    "p4w": (4, True, True),
    "p6w": (6, True, True),
    "p8w": (8, True, True),
    "p16w": (16, True, True),
}


FIELDS: dict[str, bool] = {}  # --fields: set on every candidate configuration
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE = [torch.bfloat16]  # --dtype

# the harness's timer: median of CUDA-graph replays, cyclic GC off during capture
TIMER = cudagraph_timer(rep_ms=30)


def bench_rotating(fn_for, copies) -> float:
    """Median µs per call of ``fn_for(i)`` over ``copies`` inputs, one CUDA graph replaying all of them."""

    def body():
        for i in range(copies):
            fn_for(i)

    body()
    return TIMER(body) * 1e3 / copies


def device_info() -> tuple[torch.device, int, float]:
    """``(device, SM count, measured copy bandwidth)``, printed."""
    dev = torch.device("cuda")
    sms = w4.num_sms(dev)
    bw = measure_copy_bandwidth(dev)
    print(f"{torch.cuda.get_device_name()}  copy bandwidth {bw / 1e12:.2f} TB/s  SMs {sms}", flush=True)
    return dev, sms, bw


def rotating_weights(K: int, N: int, dtype: torch.dtype, dev: torch.device):
    """``(prepared weights, their dense copies, count)``: enough copies of a [K, N] weight to exceed the L2."""
    w0 = _random_prepared(K, N, dtype, dev)
    copies = max(1, min(16, math.ceil(ROTATE_BYTES / (w0.qweight.numel() * 4))))
    ws = [w0] + [_random_prepared(K, N, dtype, dev) for _ in range(copies - 1)]
    return ws, [dense_weight(w.qweight, w.scales, None, None, 128, dtype) for w in ws], copies


def parse_args() -> None:
    """``--bucket`` keeps one bucket, ``--tiles`` (BM,BN,BK,warps,stages; the shipped tile first) and
    ``--rules`` replace its candidates."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", choices=list(BUCKETS))
    parser.add_argument("--tiles", nargs="+", type=lambda t: tuple(int(v) for v in t.split(",")))
    parser.add_argument("--rules", nargs="+", choices=list(RULES))
    parser.add_argument("--fields", nargs="+", default=[], help="TileConfig booleans set on every candidate")
    parser.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    args = parser.parse_args()
    DTYPE[0] = DTYPES[args.dtype]
    FIELDS.update(dict.fromkeys(args.fields, True))
    if args.bucket:
        for other in [b for b in BUCKETS if b != args.bucket]:
            del BUCKETS[other]
        ms, tiles = BUCKETS[args.bucket]
        BUCKETS[args.bucket] = (ms, args.tiles or tiles)
        if args.rules:
            RULES_BY_BUCKET[args.bucket] = tuple(args.rules)


def main() -> None:
    parse_args()
    start = time.time()
    dtype = DTYPE[0]
    dev, sms, bw = device_info()
    rows = []
    for K, N in SHAPES:
        ws, dense, copies = rotating_weights(K, N, dtype, dev)
        w0 = ws[0]
        for bucket, (ms, tiles) in BUCKETS.items():
            for M in ms:
                a = torch.randn((M, K), dtype=dtype, device=dev)
                args0 = (a, w0.qweight, w0.scales, None, None, None, 128)
                native = w4a16_gemm.native(*args0)
                t_cublas = bench_rotating(lambda i, a=a, dense=dense: torch.matmul(a, dense[i]), copies)
                roof = _bytes(*args0) / bw * 1e6
                seen: dict[TileConfig, float] = {}
                for tile in tiles:
                    for rule, (pps, cap, wave) in [(r, RULES[r]) for r in RULES_BY_BUCKET.get(bucket, RULES)]:
                        BM, BN, BK, warps, stages = tile
                        gemv = BM == 0
                        BM = next_power_of_2(M) if gemv else BM
                        split, kps = choose_split(M, N, K, BM, BN, BK, sms, pps, 64, cap, wave)
                        fixup = next(b[-1] for b in SHIPPED_BUCKETS if b[1] == bucket)  # the bucket's split-K sum
                        name = bucket if gemv or bucket != "gemv" else "decode"
                        cfg = TileConfig(name, BM, BN, BK, warps, stages, split, kps, fixup=fixup, gemv=gemv, **FIELDS)
                        if cfg not in seen:
                            out = w4.launch_w4a16_gemm(*args0, config=cfg)
                            check = CONTRACT.check(out, native, args=args0)
                            assert check.passed, (cfg, check.detail)
                            seen[cfg] = bench_rotating(
                                lambda i, a=a, cfg=cfg, ws=ws: w4.launch_w4a16_gemm(
                                    a, ws[i].qweight, ws[i].scales, None, None, None, 128, config=cfg
                                ),
                                copies,
                            )
                        rows.append(
                            dict(
                                K=K,
                                N=N,
                                M=M,
                                bucket=bucket,
                                tile=list(tile),
                                rule=rule,
                                split=split,
                                us=seen[cfg],
                                cublas=t_cublas,
                                roof_us=roof,
                            )
                        )
                best = min((r for r in rows if (r["K"], r["N"], r["M"]) == (K, N, M)), key=lambda r: r["us"])
                print(
                    f"K{K} N{N} M{M}: best {tuple(best['tile'])} {best['rule']} S{best['split']} {best['us']:.1f} µs "
                    f"({100 * roof / best['us']:.0f}% roof, {t_cublas / best['us']:.2f}x cuBLAS {t_cublas:.1f})",
                    flush=True,
                )
        ws = dense = None
        torch.cuda.empty_cache()
    print("\ngeomean µs per (tile, rule), best 6 per bucket:")
    for bucket in BUCKETS:
        scores: dict[str, list[float]] = {}
        for r in rows:
            if r["bucket"] == bucket:
                scores.setdefault(f"{tuple(r['tile'])} {r['rule']}", []).append(r["us"])
        geo = {k: geomean(v) for k, v in scores.items()}
        ranked = sorted(geo.items(), key=lambda x: x[1])
        print(f"  {bucket}: " + "  ".join(f"{k}={v:.1f}" for k, v in ranked[:6]))
        shipped = f"{tuple(BUCKETS[bucket][1][0])} {SHIPPED_RULE[bucket]}"
        print(f"    shipped {shipped}: {geo.get(shipped, math.nan):.1f}")
    print(f"{time.time() - start:.0f} s")
    suffix = f"_{next(iter(BUCKETS))}" if len(BUCKETS) == 1 else ""  # --bucket: one file per bucket
    suffix += "_fp16" if dtype == torch.float16 else ""
    emit_json(f"sweep_w4a16_tiles{suffix}.json", dict(copy_bw=bw, dtype=str(dtype), fields=FIELDS, rows=rows))


if __name__ == "__main__":
    main()
