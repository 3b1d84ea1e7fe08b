"""``w4a16_gemm_packed``'s kernels (``ops/w4a16/packed_kernel.py``, and ``packed_wgmma_kernel.py`` with
``--wgmma``) beside its dense path, ``w4a16_gemm`` on the GPTQ layout and cuBLAS.

Run on a GPU: ``bash scripts/gpu/run.sh probe w4a16_packed`` (``--layers``, ``--dtypes``, ``--ms``, ``--pdl``,
``--per-warp``, ``--tiles``, ``--stages``, ``--piece-chunks``, ``--wgmma``; the lists comma-separated). For each
layer (K x N), dtype and M, group 128, weights rotated past the L2, the kernel at ``packed_config`` (``--tiles`` /
``--stages`` override it; ``--pdl 0,1``: plain and programmatic dependent launches; ``--per-warp 0,1``: the consumer
warps in one partition or each in its own; ``--piece-chunks 8,32``: the stream-K grid chosen with each cost of a
unit's piece in place of ``heuristics.PIECE_CHUNKS``; ``--wgmma ROWSxTILESuUNROLLsSTAGES[p][gG]/WARPS,...``: the
wgmma kernel too (``p`` pipelined, ``g2`` two consumer warpgroup partitions), at each configuration whose rows cover
M) is checked first: one-hot activations pick weight rows (exact sums in any order: the dequantization bit for bit),
random ones meet the op's contract against its native spec (asymmetric RTN weights, ``--symmetric``: without zero
points; with and without a bias) and repeat bit for bit, at any M (above ``PACKED_KERNEL_MAX_M`` rows the op itself
takes the dense path; the probe times the kernel's 4-block tile there against it). Then it, the op's dense path (the
layout dequantized, then cuBLAS), ``w4a16_gemm`` on the same weights in the GPTQ layout (what ``W4A16Linear`` runs
by default), cuBLAS's dense ``a @ W`` and a pure read of the words (``read_kernel``) are timed over CUDA-graph
replays of one call per rotated weight; one line a (layer, M, dtype, launch) with µs and ratios; exit status 1 if a
check fails. The programmatic dependent launch overlaps the previous call's tail in that sequence, which a model's
layers give only where the kernel before each one lets its dependents start early. ``--routed``: first, at each M,
the op's provider as it routes that M (checked: the contract with and without a bias, a repeat) beside
``w4a16_gemm`` as it routes it, the two layouts' paths side by side (``W4A16Linear``'s default layout,
docs/performance.md); above ``PACKED_KERNEL_MAX_M`` rows only that line."""

from __future__ import annotations

import argparse
import contextlib
import re

import torch
import triton
import triton.language as tl

LAYERS = "4096x4096,4096x14336,14336x4096,8192x8192,8192x28672,28672x8192,5120x13824,4096x6144"  # K x N
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@triton.jit
def read_kernel(p_words, n, p_out, BLOCK: tl.constexpr):
    """Every word of ``p_words [n]`` read once (16-byte loads, evict-first, a grid-stride loop the compiler
    pipelines) and XOR-ed into one ``[BLOCK]`` vector a program, stored so that nothing is left out: a pure
    read of the bytes the W4A16 kernels stream."""
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.int32)
    for start in tl.range(pid * BLOCK, n, tl.num_programs(0) * BLOCK, num_stages=4):
        offs = start + tl.arange(0, BLOCK)
        acc ^= tl.load(p_words + offs, mask=offs < n, other=0, eviction_policy="evict_first")
    tl.store(p_out + pid * BLOCK + tl.arange(0, BLOCK), acc)


def _read_us(packed: list) -> float:
    """µs a pure read of one weight's words (:func:`read_kernel`, 4 programs of 8 warps an SM), over the
    rotated weights: the read bandwidth the kernel's main stream could reach, measured beside it."""
    from common import time_us

    from exactfuse.utils import num_sms

    grid, block = 4 * num_sms(packed[0].words.device), 4096
    out = torch.empty(grid * block, dtype=torch.int32, device=packed[0].words.device)
    return time_us(
        lambda: [read_kernel[(grid,)](p.words, p.words.numel(), out, BLOCK=block, num_warps=8) for p in packed],
        len(packed),
    )


def _baselines(a, packed: list, gptq: list, dense: list) -> tuple[float, float, float]:
    """µs a call of the op's dense path (on ``packed``), ``w4a16_gemm`` (on ``gptq``) and cuBLAS (on ``dense``),
    over the rotated weights."""
    from common import time_us

    from exactfuse.ops.w4a16.dequant import packed_dense_gemm
    from exactfuse.ops.w4a16.launch import launch_w4a16_gemm

    n = len(packed)
    t_dense = time_us(lambda: [packed_dense_gemm(a, *p, None) for p in packed], n)
    t_gptq = time_us(
        lambda: [launch_w4a16_gemm(a, p.qweight, p.scales, p.zeros, None, None, 128, True) for p in gptq], n
    )
    return t_dense, t_gptq, time_us(lambda: [a @ d for d in dense], n)


def _time_packed(a, packed: list, cfg: dict, launch=None) -> float:
    """µs a call of the kernel at ``cfg`` (``launch``: ``launch_packed`` or ``launch_packed_wgmma``) over the
    rotated weights."""
    from common import time_us

    from exactfuse.ops.w4a16.packed import launch_packed

    launch = launch or launch_packed
    return time_us(lambda: [launch(a, *p, None, **cfg) for p in packed], len(packed))


def _routed(a, packed: list, check, bias) -> tuple[str, float, str]:
    """``w4a16_gemm_packed``'s provider as the op runs it at ``a``'s rows (``heuristics.packed_wgmma_config``,
    ``packed_config`` or the dense path): its checks against the op's spec with and without ``bias`` and a
    repeat ("ok" or what failed), its µs over the rotated weights, and which path it took."""
    from common import time_us

    import exactfuse
    from exactfuse.ops.w4a16.heuristics import PACKED_KERNEL_MAX_M, packed_config, packed_wgmma_config
    from exactfuse.ops.w4a16.packed import w4a16_gemm_packed_gluon

    (M, K), N = a.shape, check[0].shape[0] * 16
    op, verdict = exactfuse.get("w4a16_gemm_packed"), "ok"
    for b in (None, bias):
        got = w4a16_gemm_packed_gluon(a, *check, b)
        if not (res := op.contract.check(got, op.native(a, *check, b), args=(a, *check, b), kwargs={})).passed:
            verdict = f"contract (bias {b is not None}): {res.summary()}"
        elif not torch.equal(got, w4a16_gemm_packed_gluon(a, *check, b)):
            verdict = "not deterministic"
    t = time_us(lambda: [w4a16_gemm_packed_gluon(a, *p, None) for p in packed], len(packed))
    cfg = packed_config(M, N, K, K // 128)
    if M > PACKED_KERNEL_MAX_M or cfg is None:
        return verdict, t, "dense path"
    if wgmma := packed_wgmma_config(M, N, K, K // 128):
        return verdict, t, "wgmma {rows}x{tiles}u{unroll}s{stages}g{groups}/{warps}".format(**wgmma)
    return verdict, t, "mma.sync t{tiles}b{blocks}u{unroll}s{stages}".format(**cfg)


@contextlib.contextmanager
def _piece_cost(chunks: int):
    """The stream-K grid chosen with ``chunks`` as a piece's cost (``heuristics.PIECE_CHUNKS``; 0: as shipped)."""
    from exactfuse.ops.w4a16 import heuristics

    shipped = heuristics.PIECE_CHUNKS
    heuristics.PIECE_CHUNKS = chunks or shipped
    heuristics.stream_k.cache_clear()
    try:
        yield
    finally:
        heuristics.PIECE_CHUNKS = shipped
        heuristics.stream_k.cache_clear()


def _wgmma_config(spec: str) -> dict:
    """``ROWSxTILESuUNROLLsSTAGES[p][gGROUPS]/WARPS`` as ``launch_packed_wgmma``'s keywords (``p``: pipelined;
    ``g2``: two consumer warpgroups, each a partition of its own)."""
    config, _, warps = spec.partition("/")
    found = re.fullmatch(r"(\d+)x(\d+)u(\d+)s(\d+)(p?)(?:g(\d))?", config)
    rows, tiles, unroll, stages, pipelined, groups = found.groups()
    cfg = {"rows": int(rows), "tiles": int(tiles), "unroll": int(unroll), "stages": int(stages),
           "warps": int(warps or 4), "pipelined": bool(pipelined)}  # fmt: skip
    return cfg | ({"groups": int(groups)} if groups and groups != "1" else {})


def _check(M: int, dtype, check, bias, cfg: dict, launch=None) -> str:
    """The kernel's checks at one configuration: "ok", else what failed."""
    import exactfuse
    from exactfuse.ops.w4a16 import fragment
    from exactfuse.ops.w4a16.packed import launch_packed

    launch_packed = launch or launch_packed
    words, scales, zeros, _ = check
    K = words.shape[1] * 64
    w = fragment.dequantize(words, scales, zeros)
    rows = torch.randint(0, K, (M,), device="cuda")
    onehot = torch.zeros(M, K, device="cuda", dtype=dtype)
    onehot[torch.arange(M), rows] = 1
    if not torch.equal(launch_packed(onehot, words, scales, zeros, None, None, **cfg), w[rows]):
        return "one-hot rows are not the dequantized weight's"
    op = exactfuse.get("w4a16_gemm_packed")
    a = torch.randn((M, K), dtype=dtype, device="cuda")
    for b in (None, bias):
        got = launch_packed(a, *check, b, **cfg)
        res = op.contract.check(got, op.native(a, *check, b), args=(a, *check, b), kwargs={})
        if not res.passed:
            return f"contract (bias {b is not None}): {res.summary()}"
        if not torch.equal(got, launch_packed(a, *check, b, **cfg)):
            return "not deterministic"
    return "ok"


def main() -> None:
    from common import device_line, rotated

    from exactfuse.ops.w4a16 import dense_weight, fragment
    from exactfuse.ops.w4a16.heuristics import PACKED_KERNEL_MAX_M, packed_config
    from exactfuse.ops.w4a16.packing import random_weights
    from exactfuse.testing.cases.w4a16 import _random_prepared

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--ms", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--layers", default=LAYERS, help="KxN,...")
    parser.add_argument(
        "--pdl", default="0", help="0: a plain launch, 1: a programmatic dependent one, comma-separated"
    )
    parser.add_argument("--tiles", type=int, default=0, help="tiles a consumer warp (0: packed_config's)")
    parser.add_argument("--stages", type=int, default=0, help="ring slots (0: packed_config's)")
    parser.add_argument("--per-warp", default="0", help="1: each consumer warp a partition of its own; comma-separated")
    parser.add_argument(
        "--piece-chunks", default="", help="a piece's cost in the stream-K grid (PIECE_CHUNKS), comma-separated"
    )
    parser.add_argument(
        "--wgmma", default="", help="the wgmma kernel too, at ROWSxTILESuUNROLLsSTAGES/WARPS,... (rows >= M taken)"
    )
    parser.add_argument(
        "--symmetric", action="store_true", help="weights without zero points (GPTQ's sym=True), checked and timed"
    )
    parser.add_argument(
        "--routed", action="store_true",
        help="the op as it routes each M beside w4a16_gemm as it routes it (above 128 rows: only that line)",
    )  # fmt: skip
    args = parser.parse_args()
    device_line()
    failed = 0
    for K, N in (tuple(int(v) for v in layer.split("x")) for layer in args.layers.split(",")):
        for name in args.dtypes.split(","):
            dtype = DTYPES[name]
            # the checked weight: RTN-quantized, asymmetric (zero points) unless --symmetric; the timed ones: random
            # codes, rotated
            gen = torch.Generator().manual_seed(K + N)
            w = random_weights(K, N, dtype, "cuda", gen, symmetric=args.symmetric)
            check = fragment.pack(w.qweight, w.scales, w.zeros, w.perm)
            bias = torch.randn(N, dtype=dtype, device="cuda")
            gptq = rotated(lambda K=K, N=N, d=dtype: _random_prepared(K, N, d, "cuda"), K * N // 2)
            packed = [fragment.pack(p.qweight, p.scales, None if args.symmetric else p.zeros) for p in gptq]
            dense = [dense_weight(p.qweight, p.scales, None, None, 128, dtype) for p in gptq]
            t_read = _read_us(packed)
            print(
                f"{K}x{N} {name}: a pure read of the words {t_read:.2f} us, {K * N / 2e3 / t_read:.0f} GB/s", flush=True
            )
            for M in (int(m) for m in args.ms.split(",")):
                a = torch.randn((M, K), dtype=dtype, device="cuda")
                base = packed_config(M, N, K, K // 128)
                base |= {k: v for k, v in (("tiles", args.tiles), ("stages", args.stages)) if v}
                t_dense, t_gptq, t_cublas = _baselines(a, packed, gptq, dense)
                if args.routed:
                    verdict, t, route = _routed(a, packed, check, bias)
                    failed += verdict != "ok"
                    print(f"{K}x{N} M{M} {name}: the op as routed {t:.2f} us ({route}), w4a16_gemm as routed "
                          f"{t_gptq:.2f}, cuBLAS {t_cublas:.2f}; w4a16_gemm/op {t_gptq / t:.2f}x, cuBLAS/op "
                          f"{t_cublas / t:.2f}x; checks {verdict}", flush=True)  # fmt: skip
                    if M > PACKED_KERNEL_MAX_M:
                        continue  # the kernel's own lines are for the rows it serves
                for pdl, per_warp, pieces in (
                    (bool(int(d)), bool(int(w)), int(p) if p else 0)
                    for d in args.pdl.split(",")
                    for w in args.per_warp.split(",")
                    for p in args.piece_chunks.split(",")
                ):
                    cfg = base | {"pdl": pdl, "per_warp": per_warp}
                    with _piece_cost(pieces):
                        verdict = _check(M, dtype, check, bias, cfg)
                        failed += verdict != "ok"
                        t = _time_packed(a, packed, cfg)
                    label = "t{tiles}b{blocks}u{unroll}s{stages}".format(**cfg) + " pdl" * pdl + " per-warp" * per_warp
                    label += f" pieces cost {pieces}" * bool(pieces)
                    print(f"{K}x{N} M{M} {name}: packed {t:.2f} us ({label}), dense path {t_dense:.2f}, w4a16_gemm "
                          f"{t_gptq:.2f}, cuBLAS {t_cublas:.2f}; dense/packed {t_dense / t:.2f}x, w4a16_gemm/packed "
                          f"{t_gptq / t:.2f}x, cuBLAS/packed {t_cublas / t:.2f}x; {K * N / 2e3 / t:.0f} GB/s of codes, "
                          f"{t_read / t:.0%} of the pure read's; "
                          f"checks {verdict}", flush=True)  # fmt: skip
                for spec in (s for s in args.wgmma.split(",") if s):
                    from exactfuse.ops.w4a16.packed import launch_packed_wgmma

                    cfg = _wgmma_config(spec)
                    if cfg["rows"] < M:
                        continue
                    verdict = _check(M, dtype, check, bias, cfg, launch_packed_wgmma)
                    failed += verdict != "ok"
                    t = _time_packed(a, packed, cfg, launch_packed_wgmma)
                    print(f"{K}x{N} M{M} {name}: wgmma {t:.2f} us ({spec}), dense path {t_dense:.2f}, w4a16_gemm "
                          f"{t_gptq:.2f}, cuBLAS {t_cublas:.2f}; dense/wgmma {t_dense / t:.2f}x, w4a16_gemm/wgmma "
                          f"{t_gptq / t:.2f}x, cuBLAS/wgmma {t_cublas / t:.2f}x; {K * N / 2e3 / t:.0f} GB/s of codes; "
                          f"checks {verdict}", flush=True)  # fmt: skip
            gptq = packed = dense = None
            torch.cuda.empty_cache()
    print(f"{failed} failed checks" if failed else "every configuration passed its checks")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
