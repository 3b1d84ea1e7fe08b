"""The warp-specialized stream-K W4A16 decode kernel (``w4a16_ws.py``) beside the shipped fragment kernel and
cuBLAS.

Run on a GPU: ``bash scripts/gpu/run.sh probe w4a16_ws`` (``--variants``, ``--layers``, ``--dtypes``, ``--ms``,
``--tiles``, ``--unroll``, ``--stages``, ``--pdl``; all but the three single numbers comma-separated lists).
For the layers 4096x4096, 4096x14336, 14336x4096 and 8192x8192 (K x N), M 1-16, bf16 and fp16, group 128,
weights rotated past the L2, and each variant (consumer warps x CTAs an SM) x ring depth x launch (``--pdl
0,1``: plain, programmatic dependent), the prototype (its scales in the compact layout, ``compact_scales``)
is checked first: one-hot activations pick weight rows
(exact sums in any order: the dequantization bit for bit), random ones meet ``w4a16_gemm_packed``'s contract
against its native spec (asymmetric RTN weights, with and without a bias) and repeat bit for bit. Then it,
the shipped kernel at its ``fragment_config``, cuBLAS's dense ``a @ W`` and a pure read of the words (a max
over them) are timed over CUDA-graph replays of one call per rotated weight; one line a (layer, M, dtype,
variant) with µs and ratios; exit status 1 if a check fails. A programmatic dependent launch overlaps the
previous call's tail in that sequence, which a model's layers give only where the kernel before each one
also lets its dependents start early.
"""

from __future__ import annotations

import argparse

import torch
from w4a16_ws_launch import compact_scales, launch_ws, ws_config

LAYERS = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192))  # (K, N)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _times(a, cfg: dict, fcfg: dict, packed: list, compact: list, dense: list) -> tuple[float, float, float]:
    """µs a call of the prototype (``cfg``, on ``compact``), the shipped kernel (``fcfg``, on ``packed``) and
    cuBLAS (on ``dense``), over the rotated weights."""
    from common import time_us

    from exactfuse.ops.w4a16.mma import launch_fragment

    n = len(packed)
    t_ws = time_us(lambda: [launch_ws(a, *c, None, None, **cfg) for c in compact], n)
    t_frag = time_us(lambda: [launch_fragment(a, p.words, p.scales, None, None, **fcfg) for p in packed], n)
    return t_ws, t_frag, time_us(lambda: [a @ d for d in dense], len(dense))


def _read_us(packed: list) -> float:
    """µs a pure read of one weight's words (a max over them, one kernel), over the rotated weights: the read
    bandwidth the W4A16 kernels' main stream can reach, measured beside them."""
    from common import time_us

    return time_us(lambda: [p.words.amax() for p in packed], len(packed))


def _check(M: int, dtype, check, bias, cfg: dict) -> str:
    """The prototype's checks at one configuration: "ok", else what failed."""
    import exactfuse
    from exactfuse.ops.w4a16 import fragment

    words, records, perm = check
    scales, zeros = compact_scales(*fragment.unpack_scales(records))
    K = words.shape[1] * 64
    w = fragment.dequantize(words, records)
    rows = torch.randint(0, K, (M,), device="cuda")
    onehot = torch.zeros(M, K, device="cuda", dtype=dtype)
    onehot[torch.arange(M), rows] = 1
    if not torch.equal(launch_ws(onehot, words, scales, zeros, None, None, **cfg), w[rows]):
        return "one-hot rows are not the dequantized weight's"
    op = exactfuse.get("w4a16_gemm_packed")
    a = torch.randn((M, K), dtype=dtype, device="cuda")
    for b in (None, bias):
        got = launch_ws(a, words, scales, zeros, perm, b, **cfg)
        res = op.contract.check(got, op.native(a, *check, b), args=(a, *check, b), kwargs={})
        if not res.passed:
            return f"contract (bias {b is not None}): {res.summary()}"
        if not torch.equal(got, launch_ws(a, words, scales, zeros, perm, b, **cfg)):
            return "not deterministic"
    return "ok"


def main() -> None:
    from common import device_line, rotated

    from exactfuse.ops.w4a16 import dense_weight, fragment
    from exactfuse.ops.w4a16.heuristics import fragment_config
    from exactfuse.ops.w4a16.packing import random_weights
    from exactfuse.testing.cases.w4a16 import _random_prepared

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--ms", default="1,2,4,8,16")
    parser.add_argument("--layers", default=",".join(f"{k}x{n}" for k, n in LAYERS), help="KxN,...")
    parser.add_argument("--tiles", type=int, default=0, help="tiles a consumer warp (0: ws_config's)")
    parser.add_argument("--unroll", type=int, default=2)
    parser.add_argument("--stages", default="0", help="ring slots, comma-separated (0: 48 KB of weights an SM)")
    parser.add_argument("--variants", default="4x1", help="consumer warps x CTAs an SM, comma-separated")
    parser.add_argument(
        "--pdl", default="0", help="0: a plain launch, 1: a programmatic dependent one; comma-separated"
    )
    args = parser.parse_args()
    _, sms, _ = device_line()
    failed = 0
    for K, N in (tuple(int(v) for v in layer.split("x")) for layer in args.layers.split(",")):
        for name in args.dtypes.split(","):
            dtype = DTYPES[name]
            # the checked weight: RTN-quantized, asymmetric (zero points); the timed ones: random codes, rotated
            w = random_weights(K, N, dtype, "cuda", torch.Generator().manual_seed(K + N), symmetric=False)
            check = fragment.pack(w.qweight, w.scales, w.zeros, w.perm)
            bias = torch.randn(N, dtype=dtype, device="cuda")
            ws = rotated(lambda K=K, N=N, d=dtype: _random_prepared(K, N, d, "cuda"), K * N // 2)
            packed = [fragment.pack(p.qweight, p.scales, p.zeros) for p in ws]
            dense = [dense_weight(p.qweight, p.scales, None, None, 128, dtype) for p in ws]
            compact = [(p.words, *compact_scales(*fragment.unpack_scales(p.scales))) for p in packed]
            t_read = _read_us(packed)
            print(
                f"{K}x{N} {name}: a pure read of the words {t_read:.2f} us, {K * N / 2e3 / t_read:.0f} GB/s", flush=True
            )
            for M in (int(m) for m in args.ms.split(",")):
                a = torch.randn((M, K), dtype=dtype, device="cuda")
                for variant, stages, pdl in (
                    (v, int(r), bool(int(d)))
                    for v in args.variants.split(",")
                    for r in args.stages.split(",")
                    for d in args.pdl.split(",")
                ):
                    warps, per_sm = (int(v) for v in variant.split("x"))
                    cfg = ws_config(M, N, K, args.tiles, args.unroll, stages, warps, per_sm) | {"pdl": pdl}
                    verdict = _check(M, dtype, check, bias, cfg)
                    failed += verdict != "ok"
                    t_ws, t_frag, t_cublas = _times(a, cfg, fragment_config(M, N, K, sms), packed, compact, dense)
                    label = "t{tiles}b{blocks}u{unroll}s{stages} {warps}w{per_sm}".format(**cfg) + " pdl" * pdl
                    print(f"{K}x{N} M{M} {name}: ws {t_ws:.2f} us ({label}), fragment {t_frag:.2f} us, cuBLAS "
                          f"{t_cublas:.2f} us; fragment/ws {t_frag / t_ws:.2f}x, cuBLAS/ws {t_cublas / t_ws:.2f}x; "
                          f"{K * N / 2e3 / t_ws:.0f} GB/s of codes, {t_read / t_ws:.0%} of the pure read's; "
                          f"checks {verdict}", flush=True)  # fmt: skip
            ws = packed = compact = dense = None
            torch.cuda.empty_cache()
    print(f"{failed} failed checks" if failed else "every configuration passed its checks")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
