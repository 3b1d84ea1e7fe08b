"""W4A16's fused kernel (its bucket's configuration) against the dense path (Triton dequantization, then
cuBLAS; from M = 64) and cuBLAS on a dense weight, per (K, N, M) and geomean per M over the five bench shapes
(bf16, weights rotated past the L2), each output checked first (the dense path bitwise native's): the M above
which the dense path runs, ``heuristics.DENSE_ABOVE_M`` (sweeps/w4a16_fused_vs_dense.*)."""

import dataclasses
import sys

import torch
from common import device_line, emit, geomean, time_us
from sweep_w4a16_tiles import SHAPES, checked, timed, weights

from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.ops.w4a16.heuristics import dense_config, fused_config
from exactfuse.testing.cases.w4a16 import _bytes


def main() -> None:
    ms = [int(m) for m in sys.argv[1:]] or [1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    line, sms, bw = device_line()
    lines, rows = [line], []
    for K, N in SHAPES:
        ws, dense = weights(K, N, torch.bfloat16)
        for M in ms:
            a = torch.randn((M, K), dtype=torch.bfloat16, device="cuda")
            fused = fused_config(M, N, K, num_sms=sms)
            paths = {"fused": fused, **({"dense": dense_config()} if M >= 64 else {})}
            row = dict(K=K, N=N, M=M, fused_config=dataclasses.asdict(fused))
            row["roof_us"] = _bytes(a, ws[0].qweight, ws[0].scales, None, None, None, 128) / bw * 1e6
            row["cublas"] = time_us(lambda a=a, dense=dense: [torch.matmul(a, d) for d in dense], len(dense))
            native = w4a16_gemm.native(a, ws[0].qweight, ws[0].scales, None, None, None, 128)
            for name, cfg in paths.items():
                try:
                    out = checked(a, ws[0], cfg)
                    assert name != "dense" or torch.equal(out, native), "dense path not bitwise native"
                except Exception as exc:  # report it and time the other paths
                    row[f"{name}_failed"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    continue
                row[name] = timed(a, ws, cfg)
            rows.append(row)
            cells = "  ".join(f"{p} {row[p]:.1f}" for p in ("cublas", *paths) if p in row)
            lines.append(f"K{K} N{N} M{M} ({fused.name}): {cells} µs; roofline {row['roof_us']:.1f}")
            lines += [f"  {k}: {v}" for k, v in row.items() if k.endswith("_failed")]
            print(lines[-1], flush=True)
        ws = dense = None
        torch.cuda.empty_cache()
    lines.append("\nper M, geomean µs over the five shapes (and vs cuBLAS dense):")
    for M in ms:
        sel = [r for r in rows if r["M"] == M]
        cells = [f"{p} {geomean(r[p] for r in sel):.1f} ({geomean(r['cublas'] / r[p] for r in sel):.2f}x)"
                 for p in ("cublas", "fused", "dense") if all(p in r for r in sel)]  # fmt: skip
        lines.append(f"  M {M:>5}: " + "  ".join(cells))
    emit("sweep_w4a16_paths.txt", lines, dict(copy_bw=bw, rows=rows))


if __name__ == "__main__":
    main()
