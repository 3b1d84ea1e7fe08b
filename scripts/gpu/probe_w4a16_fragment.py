"""The fragment-layout kernel (``ops/w4a16/mma.py``) against the shipped W4A16 path and cuBLAS.

Usage: PYTHONPATH=src python3 scripts/gpu/probe_w4a16_fragment.py [--ms 1,2,4,8,16,32,64] [--dtype bf16|fp16]
       [--configs 4x4,4x2,8x2 (warps x tiles a warp)] [--splits 1,2,4,8,16] [--unrolls 1,2,4] [--check-only]

First every configuration is checked: dequantization bit for bit (one-hot activations pick single
weight rows, products and sums exact) and the GEMM against the op's float64 contract, with bias, act-order
and odd M. Then, per (K, N, M), weights rotated past the L2: the op as shipped (``w4a16_gemm``), the
fragment kernel at every (warps x tiles, split, unroll) candidate and cuBLAS on the dense weight; µs, median of
CUDA-graph replays, and % of the bytes' roofline at the measured copy bandwidth.
Result: benchmarks/results/h200/sweeps/w4a16_fragment.txt (``_fp16`` for fp16).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import ROTATE_BYTES, SHAPES, TIMER, device_info

import exactfuse
from exactfuse.ops.w4a16 import CONTRACT, fragment, mma, native
from exactfuse.ops.w4a16.heuristics import fragment_blocks, fragment_config
from exactfuse.ops.w4a16.inputs import _random_prepared
from exactfuse.ops.w4a16.packing import pack_rows

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_layers(dtype, dev, gen):
    """The checks' layers, asymmetric, groups of 128, 64 and one: ``(K, N, G, qweight, scales, zeros, act-order
    perm, bias)``, drawn from ``gen``."""
    for K, N, G in ((512, 128, 128), (4096, 256, 128), (1024, 64, -1), (2048, 512, 64)):
        groups = 1 if G == -1 else K // G
        q = torch.randint(0, 16, (K, N), device=dev, dtype=torch.int32, generator=gen)
        scales = (torch.rand(groups, N, device=dev, generator=gen) * 0.02 + 1e-3).to(dtype)
        zeros = torch.randint(0, 16, (groups, N), device=dev, generator=gen).to(torch.uint8)
        perm = torch.randperm(K, device=dev, generator=gen).to(torch.int32)
        yield K, N, G, pack_rows(q), scales, zeros, perm, torch.randn(N, device=dev, generator=gen).to(dtype)


def _check(dtype, dev, configs, splits, unrolls) -> list[str]:
    lines = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for K, N, G, qweight, scales, zeros, perm, bias in check_layers(dtype, dev, gen):
        packed = fragment.pack(qweight, scales, zeros)
        w = native.dequantize(qweight, scales, zeros, G, dtype)
        for warps, tiles in configs:
            if (N // 16) % (warps * tiles):
                continue
            for split, unroll in ((s, u) for s in splits for u in unrolls):
                if (K // 64) % split or (K // 64 // split) % unroll:
                    continue
                for blocks in (1, 2, 8):
                    kw = dict(warps=warps, tiles=tiles, blocks=blocks, split=split, unroll=unroll)
                    rows = torch.randint(0, K, (8 * blocks,), device=dev, generator=gen)
                    onehot = torch.zeros(8 * blocks, K, device=dev, dtype=dtype)
                    onehot[torch.arange(8 * blocks), rows] = 1
                    got = mma.launch_fragment(onehot, packed.words, packed.scales, None, None, **kw)
                    ok = torch.equal(got, w[rows])
                    for M in (1, 3, 8 * blocks, 16 * blocks + 1):
                        a = torch.randn(M, K, device=dev, dtype=dtype, generator=gen)
                        for p, b in ((None, None), (perm, bias)):
                            out = mma.launch_fragment(a, packed.words, packed.scales, p, b, **kw)
                            want = native.w4a16_gemm(a, qweight, scales, zeros, p, b, G)
                            res = CONTRACT.check(out, want, args=(a, qweight, scales, zeros, p, b, G))
                            ok = ok and res.passed
                            if not res.passed:
                                lines.append(f"FAIL K{K} N{N} G{G} M{M} {kw} perm={p is not None}: {res.summary()}")
                    if not ok:
                        lines.append(f"FAIL K{K} N{N} G{G} {kw}")
    lines.append(f"check {dtype}: {'all pass' if not lines else f'{len(lines)} failures'}")
    return lines


def rotated_layers(K: int, N: int, dtype, dev) -> tuple[int, list, list, list]:
    """Enough random group-128 layers to rotate past the L2: ``(copies, prepared GPTQ weights, their fragment
    layouts, their dense weights)``."""
    w0 = _random_prepared(K, N, dtype, dev)
    copies = max(1, min(16, -(-ROTATE_BYTES // (w0.qweight.numel() * 4))))
    ws = [w0] + [_random_prepared(K, N, dtype, dev) for _ in range(copies - 1)]
    packs = [fragment.pack(w.qweight, w.scales, None) for w in ws]
    dense = [native.dense_weight(w.qweight, w.scales, None, None, 128, dtype) for w in ws]
    return copies, ws, packs, dense


def ranked(results: list, K: int, N: int, M: int, bw: float) -> tuple[float, str, float, str]:
    """``(µs, name)`` timings -> the fastest's µs and name, the roofline µs of the layer's bytes (group 128)
    at copy bandwidth ``bw``, and the four fastest as text."""
    results.sort()
    nbytes = K * N // 2 + (K // 128) * N * 2 + M * K * 2 + M * N * 2
    return *results[0], nbytes / bw * 1e6, ", ".join(f"{t:.1f} {n}" for t, n in results[:4])


def _timed(fn, copies: int) -> float:
    """Median µs per call of ``fn(i)`` over ``copies`` inputs, one CUDA graph replaying all of them."""

    def body():
        for i in range(copies):
            fn(i)

    body()
    return TIMER(body) * 1e3 / copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="1,2,4,8,16,32,64")
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--configs", default="4x4,4x2,8x2,2x4,4x8")
    parser.add_argument("--splits", default="1,2,4,8,16")
    parser.add_argument("--unrolls", default="1,2,4", help="chunks a step (each step's loads issued a step ahead)")
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    splits = [int(s) for s in args.splits.split(",")]
    unrolls = [int(u) for u in args.unrolls.split(",")]
    dev, _, bw = device_info()
    lines = [f"{torch.cuda.get_device_name()} copy bandwidth {bw / 1e12:.2f} TB/s, {args.dtype}"]
    check = _check(dtype, dev, configs, splits, unrolls)
    lines += check
    print("\n".join(check), flush=True)
    if args.check_only or check[-1].endswith("failures"):
        emit(f"w4a16_fragment{'' if dtype == torch.bfloat16 else '_fp16'}.txt", lines)
        return
    lines.append(
        "K N M | shipped us | fragment best us (warps x tiles, split) | cuBLAS us | % roofline | x shipped | x cuBLAS"
    )
    for K, N in SHAPES:
        copies, ws, packs, dense = rotated_layers(K, N, dtype, dev)
        for M in (int(m) for m in args.ms.split(",")):
            a = torch.randn(M, K, device=dev, dtype=dtype)

            shipped = _timed(lambda i, a=a, ws=ws: exactfuse.w4a16_gemm(a, ws[i].qweight, ws[i].scales), copies)
            cublas = _timed(lambda i, a=a, dense=dense: a @ dense[i], copies)
            results = []
            for warps, tiles, split, un in ((w, t, sp, u) for w, t in configs for sp in splits for u in unrolls):
                if (N // 16) % (warps * tiles) or (K // 64) % split or (K // 64 // split) % un:
                    continue
                kw = dict(warps=warps, tiles=tiles, blocks=fragment_blocks(M), split=split, unroll=un)
                name = f"{warps}x{tiles} s{split} u{un}"
                out = mma.launch_fragment(a, packs[0].words, packs[0].scales, None, None, **kw)
                want = native.w4a16_gemm(a, ws[0].qweight, ws[0].scales, None, None, None, 128)
                if not CONTRACT.check(out, want, args=(a, ws[0].qweight, ws[0].scales)).passed:
                    results.append((float("inf"), f"{name} FAILED"))
                    continue
                t = _timed(lambda i, a=a, p=packs, kw=kw: mma.launch_fragment(a, *p[i][:2], None, None, **kw), copies)
                results.append((t, name))
            rule = fragment_config(M, N, K)
            t_rule = _timed(
                lambda i, a=a, p=packs, kw=rule: mma.launch_fragment(a, *p[i][:2], None, None, **kw), copies
            )
            best, name, roof, top = ranked(results, K, N, M, bw)
            lines.append(
                f"{K} {N} {M} | {shipped:.1f} | {best:.1f} ({name}) | {cublas:.1f} | {100 * roof / best:.0f}% | "
                f"{shipped / best:.2f}x | {cublas / best:.2f}x | rule {t_rule:.1f} ({rule}) | top: {top}"
            )
            print(lines[-1], flush=True)
    emit(f"w4a16_fragment{'' if dtype == torch.bfloat16 else '_fp16'}.txt", lines)


if __name__ == "__main__":
    main()
