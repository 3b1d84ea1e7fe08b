"""The warp-specialized W4A16 decode kernel (``w4a16_ws.py``) beside the shipped fragment kernel and cuBLAS.

Run on a GPU: ``bash scripts/gpu/run.sh probe w4a16_ws`` (``--variants``, ``--layers``, ``--dtypes``, ``--ms``,
``--tiles``, ``--unroll``, ``--stages``, ``--splits``; the last two comma-separated lists). For the layers
4096x4096, 4096x14336, 14336x4096 and 8192x8192 (K x N), M 1-16, bf16 and fp16, group 128, weights rotated
past the L2, and each variant (consumer warps x CTAs an SM) x split x ring depth:
the prototype's output is checked bit for bit against ``launch_fragment`` at the same split, then both (the
shipped kernel at its ``fragment_config``) and cuBLAS's dense ``a @ W`` are timed over CUDA-graph replays; one
line a (layer, M, dtype, variant) with µs and ratios; exit status 1 if any output differs.
"""

from __future__ import annotations

import argparse

import torch
from w4a16_ws import launch_ws, ws_config

LAYERS = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192))  # (K, N)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _times(a, cfg: dict, fcfg: dict, packed: list, dense: list) -> tuple[float, float, float]:
    """µs a call of the probe (``cfg``), the shipped kernel (``fcfg``) and cuBLAS, over the rotated weights."""
    from common import time_us

    from exactfuse.ops.w4a16.mma import launch_fragment

    n = len(packed)
    t_ws = time_us(lambda: [launch_ws(a, p.words, p.scales, None, None, **cfg) for p in packed], n)
    t_frag = time_us(lambda: [launch_fragment(a, p.words, p.scales, None, None, **fcfg) for p in packed], n)
    return t_ws, t_frag, time_us(lambda: [a @ d for d in dense], len(dense))


def main() -> None:
    from common import device_line, rotated

    from exactfuse.ops.w4a16 import dense_weight, fragment
    from exactfuse.ops.w4a16.heuristics import fragment_config
    from exactfuse.ops.w4a16.mma import launch_fragment
    from exactfuse.ops.w4a16.packing import random_weights
    from exactfuse.testing.cases.w4a16 import _random_prepared

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--ms", default="1,2,4,8,16")
    parser.add_argument("--layers", default=",".join(f"{k}x{n}" for k, n in LAYERS), help="KxN,...")
    parser.add_argument("--tiles", type=int, default=0, help="tiles a consumer warp (0: ws_config's)")
    parser.add_argument("--unroll", type=int, default=2)
    parser.add_argument("--stages", default="0", help="ring slots, comma-separated (0: 48 KB of weights an SM)")
    parser.add_argument("--variants", default="4x1,4x2,8x1", help="consumer warps x CTAs an SM, comma-separated")
    parser.add_argument("--splits", default="0", help="K splits, comma-separated (0: ws_split's)")
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
            for M in (int(m) for m in args.ms.split(",")):
                a = torch.randn((M, K), dtype=dtype, device="cuda")
                for variant, split, stages in (
                    (v, int(s), int(r))
                    for v in args.variants.split(",")
                    for s in args.splits.split(",")
                    for r in args.stages.split(",")
                ):
                    warps, per_sm = (int(v) for v in variant.split("x"))
                    cfg = ws_config(M, N, K, sms, args.tiles, args.unroll, stages, warps, per_sm, split)
                    same = {k: cfg[k] for k in ("tiles", "blocks", "unroll", "split", "warps")}
                    exact = all(
                        torch.equal(launch_ws(a, *check, b, **cfg), launch_fragment(a, *check, b, **same))
                        for b in (None, bias)
                    )  # fmt: skip
                    failed += not exact
                    t_ws, t_frag, t_cublas = _times(a, cfg, fragment_config(M, N, K, sms), packed, dense)
                    label = "t{tiles}b{blocks}u{unroll}s{stages} split {split} {warps}w{per_sm}".format(**cfg)
                    print(f"{K}x{N} M{M} {name}: ws {t_ws:.2f} us ({label}), fragment {t_frag:.2f} us, cuBLAS "
                          f"{t_cublas:.2f} us; fragment/ws {t_frag / t_ws:.2f}x, cuBLAS/ws {t_cublas / t_ws:.2f}x; "
                          f"{'bit-exact' if exact else 'MISMATCH'}", flush=True)  # fmt: skip
            ws = packed = dense = None
            torch.cuda.empty_cache()
    print(f"{failed} mismatched cases" if failed else "every case bit-exact against launch_fragment at its split")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
