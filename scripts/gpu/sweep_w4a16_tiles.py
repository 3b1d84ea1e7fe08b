"""W4A16 fused-kernel tiles (BM, BN, BK, warps, stages; BM = 0: the GEMV) x split-K rules ``pN[w][-nocap]`` (N
programs an SM, ``w`` one wave, ``-nocap`` no traffic cap) per M bucket, bf16 or ``--dtype fp16``, each checked
against the contract first; per bucket the geomean of each and the shipped one's. ``--bucket`` keeps one, its
candidates from ``--tiles``/``--rules``; ``--fields``: ``TileConfig`` booleans on every candidate. Results:
sweeps/w4a16_tile_buckets.*, w4a16_*_tiles*.*, w4a16_gemv_vs_decode_*.*."""

import argparse
import math

import torch
from common import device_line, emit, geomean, rotated, time_us

from exactfuse.ops.w4a16 import CONTRACT, dense_weight, w4a16_gemm
from exactfuse.ops.w4a16 import launch as w4_launch
from exactfuse.ops.w4a16.heuristics import BUCKETS as SHIPPED
from exactfuse.ops.w4a16.heuristics import TileConfig, choose_split
from exactfuse.testing.cases.w4a16 import _bytes, _random_prepared
from exactfuse.utils import next_power_of_2

BUCKETS = {  # name: (Ms, tiles (BM, BN, BK, warps, stages), the shipped tile first; rules); gemv1 is M = 1's own
    "gemv": ((1, 2), [(0, 64, 128, 2, 1), (16, 64, 128, 4, 4), (0, 128, 128, 4, 1), (0, 256, 64, 4, 1),
                      (0, 64, 64, 2, 1), (0, 128, 64, 4, 1)], ("p4w", "p8w", "p16w")),
    "decode": ((1, 16), [(16, 64, 128, 4, 4), (16, 128, 128, 4, 3), (16, 64, 128, 4, 3), (16, 128, 64, 4, 4),
                         (16, 64, 64, 4, 4)], ("p4", "p3w", "p4w", "p6w")),
    "m32": ((32,), [(32, 64, 128, 4, 4), (32, 64, 128, 4, 3), (32, 128, 128, 4, 3), (32, 64, 64, 4, 4)],
            ("p2", "p4", "p8")),
    "m64": ((64,), [(64, 64, 64, 4, 4), (64, 64, 64, 8, 4), (64, 64, 128, 4, 4), (64, 128, 64, 4, 4)],
            ("p2", "p8-nocap")),
    "m128": ((128,), [(128, 64, 64, 4, 3), (128, 64, 64, 8, 3), (128, 128, 64, 8, 3), (64, 64, 64, 4, 4)],
             ("p4-nocap", "p8-nocap")),
}  # fmt: skip

SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672))  # (K, N): the bench's


def weights(K: int, N: int, dtype, with_dense: bool = True) -> tuple[list, list]:
    """Rotated random ``[K, N]`` weights (group 128, symmetric) and, with ``with_dense``, their dense copies."""
    ws = rotated(lambda: _random_prepared(K, N, dtype, "cuda"), K * N // 2)
    return ws, [dense_weight(w.qweight, w.scales, None, None, 128, dtype) for w in ws] if with_dense else []


def timed(a, ws, config) -> float:
    """Median µs of the launch at ``config`` over the rotated weights ``ws``."""
    return time_us(lambda: [w4_launch.launch_w4a16_gemm(a, w.qweight, w.scales, None, None, None, 128, config=config)
                            for w in ws], len(ws), rep_ms=30)  # fmt: skip


def checked(a, w, config):
    """The launch's output at ``config`` on weight ``w``, checked against the op's contract first."""
    args = (a, w.qweight, w.scales, None, None, None, 128)
    out = w4_launch.launch_w4a16_gemm(*args, config=config)
    check = CONTRACT.check(out, w4a16_gemm.native(*args), args=args)
    assert check.passed, (config, check.detail)
    return out


def shipped_rule(bucket: str) -> str:
    b = next(b for b in SHIPPED if b.name == bucket)
    return f"p{b.programs_per_sm}" + ("w" if b.one_wave else "") + ("" if b.traffic_cap else "-nocap")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", choices=list(BUCKETS))
    parser.add_argument("--tiles", nargs="+", type=lambda t: tuple(int(v) for v in t.split(",")))
    parser.add_argument("--rules", nargs="+")
    parser.add_argument("--fields", nargs="+", default=[], help="TileConfig booleans set on every candidate")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    opts = parser.parse_args()
    dtype = torch.float16 if opts.dtype == "fp16" else torch.bfloat16
    buckets = {opts.bucket: BUCKETS[opts.bucket]} if opts.bucket else BUCKETS
    if opts.bucket:
        ms, tiles, rules = buckets[opts.bucket]
        buckets[opts.bucket] = (ms, opts.tiles or tiles, opts.rules or rules)
    line, sms, bw = device_line()
    lines, rows = [line], []
    for K, N in SHAPES:
        ws, dense = weights(K, N, dtype)
        for bucket, (ms, tiles, rules) in buckets.items():
            fixup = next(b.fixup for b in SHIPPED if b.name == bucket)  # the bucket's split-K sum
            for M in ms:
                a = torch.randn((M, K), dtype=dtype, device="cuda")
                cublas = time_us(lambda a=a, dense=dense: [torch.matmul(a, d) for d in dense], len(dense))
                roof = _bytes(a, ws[0].qweight, ws[0].scales, None, None, None, 128) / bw * 1e6
                seen = {}
                for (BM, BN, BK, warps, stages), rule in ((t, r) for t in tiles for r in rules):
                    gemv, pps = BM == 0, int(rule[1:].split("-")[0].rstrip("w"))
                    BM = next_power_of_2(M) if gemv else BM
                    split, kps = choose_split(M, N, K, BM, BN, BK, sms, pps, 64, "nocap" not in rule, "w" in rule)
                    name = bucket if gemv or bucket != "gemv" else "decode"
                    cfg = TileConfig(name, BM, BN, BK, warps, stages, split, kps, fixup=fixup, gemv=gemv,
                                     **dict.fromkeys(opts.fields, True))  # fmt: skip
                    if cfg not in seen:
                        checked(a, ws[0], cfg)
                        seen[cfg] = timed(a, ws, cfg)
                    rows.append(dict(K=K, N=N, M=M, bucket=bucket, tile=[BM if not gemv else 0, BN, BK, warps, stages],
                                     rule=rule, split=split, us=seen[cfg], cublas=cublas, roof_us=roof))  # fmt: skip
                best = min((r for r in rows if (r["K"], r["N"], r["M"]) == (K, N, M)), key=lambda r: r["us"])
                lines.append(f"K{K} N{N} M{M}: best {tuple(best['tile'])} {best['rule']} S{best['split']} "
                             f"{best['us']:.1f} µs ({100 * roof / best['us']:.0f}% roof, {cublas / best['us']:.2f}x "
                             f"cuBLAS {cublas:.1f})")  # fmt: skip
                print(lines[-1], flush=True)
        ws = dense = None
        torch.cuda.empty_cache()
    lines.append("\ngeomean µs per (tile, rule), best 6 per bucket:")
    for bucket, (_, tiles, _) in buckets.items():
        scores = {}
        for r in (r for r in rows if r["bucket"] == bucket):
            scores.setdefault(f"{tuple(r['tile'])} {r['rule']}", []).append(r["us"])
        geo = sorted((geomean(v), k) for k, v in scores.items())
        lines.append(f"  {bucket}: " + "  ".join(f"{k}={v:.1f}" for v, k in geo[:6]))
        shipped = f"{tuple(tiles[0])} {shipped_rule(bucket)}"
        lines.append(f"    shipped {shipped}: {dict((k, v) for v, k in geo).get(shipped, math.nan):.1f}")
    suffix = (f"_{opts.bucket}" if opts.bucket else "") + ("_fp16" if opts.dtype == "fp16" else "")
    emit(f"sweep_w4a16_tiles{suffix}.txt", lines, dict(copy_bw=bw, dtype=opts.dtype, fields=opts.fields, rows=rows))


if __name__ == "__main__":
    main()
