"""Which W4A16 kernel variant is fastest per M bucket on the GPU (bf16, group 128, symmetric).

Variants (``TileConfig`` fields, see exactfuse.ops.w4a16.heuristics):
- dequant "float" (nibble -> int32 -> fp32 -> bf16, the shipped path) or "magic"
  (16-bit exponent trick, arithmetic in bf16, no conversion instructions);
- nibble_major: tile rows in nibble-major order (plain reshape) with gathered
  activation columns, against the interleaved reshape;
- kernel "gemv" (CUDA-core FMAs with deferred reduction, M <= BM) against the
  tl.dot kernel, at M <= 16.

Weights rotate over enough copies that the working set exceeds L2 (a 4096 x
4096 4-bit weight is 8 MB and would otherwise be served from the 60 MB L2).
Every variant's output is checked against the native op before timing
(relative Frobenius error within 2x native's against float64). Prints one line
per (K, N, M) with each variant's µs, cuBLAS dense, and % of the memory
roofline (bytes / copy bandwidth measured here by the harness's function), then
the best variant per M bucket. JSON to $OUT/sweep_w4a16_variants.json.

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_variants.py     # about 3 minutes on an H200
"""

from __future__ import annotations

import json
import math
import os
import time

import torch
import triton

from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.ops.w4a16 import CONTRACT, _bytes, _random_prepared, dense_weight, w4a16_gemm
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import TileConfig, choose_split

SHAPES = ((4096, 4096), (4096, 14336), (8192, 8192), (14336, 4096))
MS = (1, 4, 16, 64, 128, 2048)
ROTATE_BYTES = 256 << 20


def variants(M: int) -> dict[str, tuple]:
    """name -> (kernel, BM, BN, BK, warps, stages, dequant, nibble_major)."""
    out = {}
    if M <= 16:
        for dq in ("float", "magic"):
            out[f"mma-{dq}"] = ("mma", 16, 64, 128, 4, 4, dq, False)
        out["mma-magic-nib"] = ("mma", 16, 64, 128, 4, 4, "magic", True)
        out["mma-magic-nib-n128"] = ("mma", 16, 128, 128, 4, 4, "magic", True)
        bm = triton.next_power_of_2(M)
        bk = {1: 128, 2: 128, 4: 64}.get(bm, 32)  # [BM, BK/8, BN] fp32 partial sums: <= 64 per thread
        for dq in ("float", "magic"):
            out[f"gemv-{dq}-n128"] = ("gemv", bm, 128, bk, 4, 3, dq, False)
        if M <= 4:
            out["gemv-magic-n256-k64"] = ("gemv", bm, 256, 64, 4, 3, "magic", False)
            out["gemv-magic-n128-k64-w2"] = ("gemv", bm, 128, 64, 2, 3, "magic", False)
    elif M <= 128:
        bm = 32 if M <= 32 else 64
        for dq in ("float", "magic"):
            out[f"mma-{dq}"] = ("mma", bm, 64, 64, 4, 4, dq, False)
        out["mma-magic-nib"] = ("mma", bm, 64, 64, 4, 4, "magic", True)
        out["mma-magic-nib-n128"] = ("mma", bm, 128, 64, 4, 4, "magic", True)
        out["mma-magic-nib-k128"] = ("mma", bm, 64, 128, 4, 4, "magic", True)
    else:
        for dq in ("float", "magic"):
            out[f"mma-{dq}"] = ("mma", 128, 128, 64, 8, 3, dq, False)
        out["mma-magic-nib"] = ("mma", 128, 128, 64, 8, 3, "magic", True)
        out["mma-magic-nib-n256"] = ("mma", 128, 256, 64, 8, 3, "magic", True)
        out["mma-magic-nib-m256"] = ("mma", 256, 128, 64, 8, 3, "magic", True)
        out["mma-magic-nib-s4w4"] = ("mma", 128, 128, 64, 4, 4, "magic", True)
    return out


def make_config(spec, M, N, K) -> TileConfig:
    kernel, BM, BN, BK, warps, stages, dq, nib = spec
    split, kps = choose_split(
        M, N, K, BM, BN, BK, w4.num_sms(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    )
    return TileConfig(f"{kernel}", BM, BN, BK, warps, stages, split, kps, dq, nib, kernel)


def bench_rotating(fn_for, copies) -> float:
    """Median µs per call of ``fn_for(i)`` over ``copies`` inputs, one CUDA graph replaying all of them."""

    def body():
        for i in range(copies):
            fn_for(i)

    body()
    return triton.testing.do_bench_cudagraph(body, rep=30) * 1e3 / copies


def run_shape(K: int, N: int, bw: float, dev, dtype) -> list[dict]:
    w0 = _random_prepared(K, N, dtype, dev)
    copies = max(1, min(16, math.ceil(ROTATE_BYTES / (w0.qweight.numel() * 4))))
    ws = [w0] + [_random_prepared(K, N, dtype, dev) for _ in range(copies - 1)]
    dense = [dense_weight(w.qweight, w.scales, None, None, 128, dtype) for w in ws]
    rows = []
    for M in MS:
        a = torch.randn((M, K), dtype=dtype, device=dev)
        args0 = (a, w0.qweight, w0.scales, None, None, None, 128)
        native = w4a16_gemm.native(*args0)
        row = dict(K=K, N=N, M=M, roof_us=_bytes(*args0) / bw * 1e6)
        row["cublas"] = bench_rotating(lambda i, a=a: torch.matmul(a, dense[i]), copies)
        for name, spec in variants(M).items():
            cfg = make_config(spec, M, N, K)
            try:
                out = w4.launch_w4a16_gemm(*args0, config=cfg)
                check = CONTRACT.check(out, native, args=args0)
                if not check.passed:
                    row[name] = f"FAIL {check.detail}"
                    continue
                row[name] = bench_rotating(
                    lambda i, a=a, cfg=cfg: w4.launch_w4a16_gemm(
                        a, ws[i].qweight, ws[i].scales, None, None, None, 128, config=cfg
                    ),
                    copies,
                )
            except Exception as exc:  # a variant that does not compile is reported, not fatal
                row[name] = f"ERROR {type(exc).__name__}: {str(exc)[:120]}"
        rows.append(row)
        timed = {k: v for k, v in row.items() if k not in ("K", "N", "M", "roof_us") and isinstance(v, float)}
        best = min((k for k in timed if k != "cublas"), key=timed.get)
        cells = "  ".join(
            f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
            for k, v in row.items()
            if k not in ("K", "N", "M", "roof_us")
        )
        print(
            f"K{K} N{N} M{M}: best {best} {timed[best]:.2f} µs ({100 * row['roof_us'] / timed[best]:.0f}% roof, "
            f"{row['cublas'] / timed[best]:.2f}x cuBLAS) | {cells}",
            flush=True,
        )
    return rows


def main() -> None:
    start = time.time()
    dev, dtype = torch.device("cuda"), torch.bfloat16
    bw = measure_copy_bandwidth(dev)
    print(f"{torch.cuda.get_device_name()}  copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    rows = []
    for K, N in SHAPES:
        rows += run_shape(K, N, bw, dev, dtype)
        torch.cuda.empty_cache()
    print("\ngeomean µs per variant and M bucket:")
    for bucket in ((1, 4, 16), (64, 128), (2048,)):
        names = {k for r in rows if r["M"] in bucket for k, v in r.items() if isinstance(v, float) and k != "roof_us"}
        scores = {}
        for n in names:
            vals = [r[n] for r in rows if r["M"] in bucket and isinstance(r.get(n), float)]
            if len(vals) == sum(1 for r in rows if r["M"] in bucket):
                scores[n] = math.exp(sum(map(math.log, vals)) / len(vals))
        print(f"  M in {bucket}: " + "  ".join(f"{n}={v:.2f}" for n, v in sorted(scores.items(), key=lambda x: x[1])))
    print(f"{time.time() - start:.0f} s")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "sweep_w4a16_variants.json"), "w") as f:
            json.dump(dict(copy_bw=bw, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
