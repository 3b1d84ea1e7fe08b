"""W4A16 launch paths on the GPU: the fused kernel's bucket configuration and the dense path (Triton
dequantization + cuBLAS), per M, beside cuBLAS on a dense weight.

bf16, group 128, symmetric; weights rotate over enough copies to exceed the 60 MB L2; each path's
output passes the op's contract (the dense path must be bitwise native) before it is timed; median
of CUDA-graph replays (the harness's timer). Prints per (K, N, M) the µs of each path, and per M the
geomean over the five benchmark shapes: the numbers behind the M above which the dense path runs
(``heuristics.DENSE_ABOVE_M``; benchmarks/results/h200/sweeps/w4a16_fused_vs_dense.*). The older
w4a16_paths_kmajor_dense.* there also has a K-major PTX tile (``kmajor`` column) that is no longer in the
kernel; its "shipped" column is a fused configuration with prefill tiles above M = 128.

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_paths.py      # about 3 minutes on an H200
    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_paths.py 128 192 256   # only these M
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit_json
from sweep_w4a16_tiles import bench_rotating, device_info, rotating_weights

from exactfuse.bench.results import geomean
from exactfuse.ops.w4a16 import CONTRACT, w4a16_gemm
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import dense_config, fused_config
from exactfuse.testing.cases.w4a16 import _bytes

SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672))
MS = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
DENSE_FROM_M = 64  # the dense path is timed from this M up


def main() -> None:
    start = time.time()
    ms = tuple(int(m) for m in sys.argv[1:]) or MS
    dtype = torch.bfloat16
    dev, sms, bw = device_info()
    rows = []
    for K, N in SHAPES:
        ws, dense, copies = rotating_weights(K, N, dtype, dev)
        w0 = ws[0]
        for M in ms:
            a = torch.randn((M, K), dtype=dtype, device=dev)
            args0 = (a, w0.qweight, w0.scales, None, None, None, 128)
            native = w4a16_gemm.native(*args0)
            fused = fused_config(M, N, K, num_sms=sms)
            paths = {"fused": fused}
            if M >= DENSE_FROM_M:
                paths["dense"] = dense_config()
            row = dict(K=K, N=N, M=M, fused_config=dataclasses.asdict(fused), roof_us=_bytes(*args0) / bw * 1e6)
            row["cublas"] = bench_rotating(lambda i, a=a, dense=dense: torch.matmul(a, dense[i]), copies)
            for name, cfg in paths.items():
                try:
                    out = w4.launch_w4a16_gemm(*args0, config=cfg)
                    check = CONTRACT.check(out, native, args=args0)
                    assert check.passed, check.detail
                    assert name != "dense" or torch.equal(out, native), "dense path not bitwise native"
                except Exception as exc:  # report and time the other paths
                    print(f"K{K} N{N} M{M} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    row[f"{name}_failed"] = str(exc)[:300]
                    continue
                row[name] = bench_rotating(
                    lambda i, a=a, cfg=cfg, ws=ws: w4.launch_w4a16_gemm(
                        a, ws[i].qweight, ws[i].scales, None, None, None, 128, config=cfg
                    ),
                    copies,
                )
            rows.append(row)
            cells = "  ".join(f"{p} {row[p]:.1f}" for p in ("cublas", *paths) if p in row)
            print(f"K{K} N{N} M{M} ({fused.name}): {cells} µs; roofline {row['roof_us']:.1f}", flush=True)
        ws = dense = None
        torch.cuda.empty_cache()
    print("\nper M, geomean µs over the five shapes (and vs cuBLAS dense):")
    for M in ms:
        sel = [r for r in rows if r["M"] == M]
        cells = []
        for p in ("cublas", "fused", "dense"):
            if all(p in r for r in sel):
                g = geomean(r[p] for r in sel)
                cells.append(f"{p} {g:.1f} ({geomean(r['cublas'] / r[p] for r in sel):.2f}x)")
        print(f"  M {M:>5}: " + "  ".join(cells))
    print(f"{time.time() - start:.0f} s")
    emit_json("sweep_w4a16_paths.json", dict(copy_bw=bw, rows=rows))


if __name__ == "__main__":
    main()
