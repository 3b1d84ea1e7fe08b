"""W4A16 with the dequantized weights as wgmma's register operand (Gluon), against the shipped kernels.

Usage: PYTHONPATH=src python3 scripts/gpu/probe_w4a16_wgmma.py [--ms 1,4,16,32,64,128] [--dtype bf16|fp16]
       [--staged-only]

The question: is the fused tile slow because the dequantized B tile reaches the MMA through shared
memory (``docs/heuristics.md``)? This kernel computes ``out^T = W^T a^T``: each program dequantizes a
``[BN, BK]`` tile of ``W^T`` directly in the register layout of wgmma's A operand (Gluon's
``DotOperandLayout``; no shared memory, no layout conversion: each thread loads the packed words of
the rows and K pairs it holds), and the activations, ``[BM, BK]``, go through shared memory as the B
operand. Split-K partials in fp32 (the fewest splits that give every SM a program) are summed by the shipped
reduction kernel (``splitk.w4a16_splitk_reduce_kernel``). Dequantization is the spec's, ``(q - z)`` times the scale in
fp32, rounded once. Limits of this probe: no act-order permutation, ``N % BN == 0``, groups a multiple
of ``BK``.

Per (K, N, M), bf16 (or fp16), asymmetric group-128 weights rotated past the L2: the shipped tl.dot tiles
(``select_config`` without the staged tile: the op's path wherever the staged tile cannot run), this
kernel at (BN, BK) in {(64, 64), (128, 64), (64, 128)}, with the next K step's operands loaded
while a step is computed (``p``) and, at 64 x 64, without; dequantized a weight at a time in fp32 or two
a PTX instruction (``2``: each thread's K pairs, which the A operand's layout keeps in one register, come
from one packed word; the pairs' layout, ``half_k_layout``, joins into the operand's with no data
movement, which the kernel asserts); the last also adds its splits atomically into one fp32 buffer
instead of the two-pass workspace (``atomic``, not deterministic); the multi-stage tile of
``exactfuse.ops.w4a16.staged`` (``staged BNxBK sS``: S K steps of activations and packed words in flight
through cp.async into shared memory); and cuBLAS on the dense weight, each output checked against the
op's contract first; µs, median of CUDA-graph replays.
Result: benchmarks/results/h200/sweeps/w4a16_wgmma.txt (fp16: w4a16_wgmma_fp16.txt; ``--staged-only``, the
multi-stage variants alone: w4a16_wgmma_staged.txt, w4a16_wgmma_staged_fp16.txt; ``--suffix S`` appends
``_S`` to the name).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import SHAPES, bench_rotating, device_info

from exactfuse.ops.w4a16 import CONTRACT, native
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import TileConfig
from exactfuse.ops.w4a16.splitk import REDUCE_BLOCK, w4a16_splitk_reduce_kernel
from exactfuse.ops.w4a16.staged import _PAIR_BF16
from exactfuse.utils import DTYPES_BY_NAME, next_power_of_2


@gluon.constexpr_function
def half_k_layout(BN, BK, num_warps):
    """The A operand's register layout (``DotOperandLayout(0, NVMMA v3, k_width=2)``, warps along N,
    ``BN = 16 * num_warps``) over ``[BN, BK / 2]`` weight pairs: pair ``j`` where that layout holds
    weights ``2j`` and ``2j + 1``, so joining a pair's two halves is no data movement."""
    reg = [[8, 0]] + [[0, 4 << i] for i in range((BK // 8).bit_length() - 1)]
    lane = [[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]]
    warp = [[16 << i, 0] for i in range(num_warps.bit_length() - 1)]
    return gl.DistributedLinearLayout(reg, lane, warp, [], [BN, BK // 2])


@gluon.jit
def _step_operands(p_a, p_qw, p_s, p_z, o_am, m_am, o_ak, o_kw, o_n, N, stride_a, k0, GROUP: gl.constexpr,
                   HAS_ZEROS: gl.constexpr, PACKED: gl.constexpr):  # fmt: skip
    """One K step's activations ``[BM, BK]``, packed words (``o_kw``: each weight's or pair's word, in the
    weights' register layout: each thread loads the words of its own rows and K positions, once each),
    scales and zero points (8: symmetric); PACKED: the scale and ``0x4300 | z`` twice in 32 bits."""
    a = gl.load(p_a + o_am[:, None] * stride_a + (k0 + o_ak)[None, :], mask=m_am[:, None], other=0.0)
    words = gl.load(p_qw + (k0 // 8 + o_kw)[None, :] * N + o_n[:, None])  # unmasked: N % BN == 0
    g = k0 // GROUP
    s = gl.load(p_s + g * N + o_n)
    if HAS_ZEROS:
        z = gl.load(p_z + g * N + o_n).to(gl.int32)
    else:
        z = gl.full(o_n.shape, 8, gl.int32, layout=o_n.type.layout)
    if PACKED:
        s16 = s.to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
        s_out = s16 | (s16 << 16)
        z_out = (z | 0x4300) * 0x10001
    else:
        s_out = s.to(gl.float32)
        z_out = z
    return a, words, s_out, z_out


@gluon.jit
def _dequantize(words, s, z, shift, DT: gl.constexpr, PACKED: gl.constexpr, w_layout: gl.constexpr,
                BN: gl.constexpr, BK: gl.constexpr):  # fmt: skip
    """The ``[BN, BK]`` weights in ``w_layout``: ``(q - z) * s`` rounded once to DT, per weight in fp32, or
    (PACKED, bf16) two a PTX instruction from ``[BN, BK / 2]`` pairs joined in place."""
    if PACKED:
        lo, hi = gl.inline_asm_elementwise(_PAIR_BF16, "=h,=h,r,r,r,r", [words, shift[None, :], z[:, None],
                                           s[:, None]], (gl.bfloat16, gl.bfloat16), True, 1)  # fmt: skip
        w = gl.convert_layout(gl.reshape(gl.join(lo, hi), [BN, BK]), w_layout, assert_trivial=True)
    else:
        w = ((((words >> shift[None, :]) & 0xF) - z[:, None]).to(gl.float32) * s[:, None]).to(DT)
    return w


@gluon.jit
def w4a16_wgmma_kernel(
    p_a, p_qw, p_s, p_z, p_ws, M, N, stride_a, k_per_split,
    GROUP: gl.constexpr, HAS_ZEROS: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
    PIPELINE: gl.constexpr, PACKED: gl.constexpr, ATOMIC: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """Partial ``ws[s, m, n] = sum over split s's K rows of a[m, k] W[k, n]``, one ``[BN, BM]`` tile
    (ATOMIC: added into ``ws[0]``, zero on entry, in no fixed order)."""
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    pid_s = gl.program_id(2)
    DT: gl.constexpr = p_a.dtype.element_ty
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BM, 16]
    )
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    a_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    a_smem = gl.allocate_shared_memory(DT, [BM, BK], gl.NVMMASharedLayout.get_default_for([BM, BK], DT))
    if PACKED:  # words per pair of weights
        gl.static_assert(gl.bfloat16 == DT, "the packed dequantization is written for bf16")
        wl: gl.constexpr = half_k_layout(BN, BK, num_warps)
        o_j = gl.arange(0, BK // 2, layout=gl.SliceLayout(0, wl))
        o_kw = o_j // 4
        shift = (o_j % 4) * 8
    else:
        wl: gl.constexpr = w_layout
        o_k = gl.arange(0, BK, layout=gl.SliceLayout(0, wl))
        o_kw = o_k // 8
        shift = (o_k % 8) * 4
    o_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, wl))
    o_am = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, a_layout))
    o_ak = gl.arange(0, BK, layout=gl.SliceLayout(0, a_layout))
    m_am = o_am < M
    acc = gl.zeros([BN, BM], gl.float32, layout=mma)
    k_begin = pid_s * k_per_split
    k_last = k_begin + k_per_split - BK
    if PIPELINE:  # the first step's operands; each step then loads the next step's (the last one again)
        a, words, s, z = _step_operands(p_a, p_qw, p_s, p_z, o_am, m_am, o_ak, o_kw, o_n, N, stride_a, k_begin,
                                        GROUP, HAS_ZEROS, PACKED)  # fmt: skip
    for k0 in range(k_begin, k_begin + k_per_split, BK):
        if not PIPELINE:
            a, words, s, z = _step_operands(p_a, p_qw, p_s, p_z, o_am, m_am, o_ak, o_kw, o_n, N, stride_a, k0,
                                            GROUP, HAS_ZEROS, PACKED)  # fmt: skip
        a_smem.store(a)
        fence_async_shared()
        w = _dequantize(words, s, z, shift, DT, PACKED, w_layout, BN, BK)
        if PIPELINE:
            k_next = gl.minimum(k0 + BK, k_last)
            a, words, s, z = _step_operands(p_a, p_qw, p_s, p_z, o_am, m_am, o_ak, o_kw, o_n, N, stride_a, k_next,
                                            GROUP, HAS_ZEROS, PACKED)  # fmt: skip
        acc = warpgroup_mma(w, a_smem.permute((1, 0)), acc)
    out_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, mma))
    out_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, mma))
    if ATOMIC:
        ptrs = p_ws + out_m[None, :].to(gl.int64) * N + out_n[:, None]
        gl.atomic_add(ptrs, acc, mask=(out_m < M)[None, :], sem="relaxed")
    else:
        ptrs = p_ws + (pid_s * M + out_m[None, :]).to(gl.int64) * N + out_n[:, None]
        gl.store(ptrs, acc, mask=(out_m < M)[None, :])


def split_count(tiles: int, K: int, BK: int, sms: int) -> int:
    """The fewest K splits (a power of two, at most 16) that give every SM a program, each split at least
    four K steps: the fp32 partials are ``splits * M * N * 4`` bytes written and read again."""
    splits = 1
    while splits < 16 and tiles * splits < sms and K % (2 * splits * BK) == 0 and K // (2 * splits) >= 4 * BK:
        splits *= 2
    return splits


def wgmma_gemm(
    a,
    qweight,
    scales,
    zeros,
    group_size: int,
    BN: int,
    BK: int,
    pipeline: bool,
    packed: bool,
    atomic: bool,
    sms: int,
) -> torch.Tensor:
    """``a @ dequantize(W)`` with :func:`w4a16_wgmma_kernel` and the shipped split-K reduction (atomic: the
    splits added into one fp32 buffer, then rounded by the same kernel with one split)."""
    M, K = a.shape
    N = qweight.shape[1]
    G = K if group_size == -1 else group_size
    assert N % BN == 0 and G % BK == 0 and K % BK == 0, (N, G, K)
    BM = min(128, max(8, next_power_of_2(M)))
    tiles = (N // BN) * triton.cdiv(M, BM)
    splits = split_count(tiles, K, BK, sms)
    ws = (
        torch.zeros((1, M, N), dtype=torch.float32, device=a.device)
        if atomic
        else torch.empty((splits, M, N), dtype=torch.float32, device=a.device)
    )
    w4a16_wgmma_kernel[(N // BN, triton.cdiv(M, BM), splits)](
        a, qweight, scales, zeros if zeros is not None else qweight, ws, M, N, a.stride(0), K // splits,
        GROUP=G, HAS_ZEROS=zeros is not None, BN=BN, BM=BM, BK=BK, PIPELINE=pipeline, PACKED=packed, ATOMIC=atomic,
        num_warps=BN // 16,
    )  # fmt: skip
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    w4a16_splitk_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](
        ws, out, out, M, N, 1 if atomic else splits, HAS_BIAS=False, BLOCK=REDUCE_BLOCK
    )
    return out


# (BN, BK, next step loaded ahead, two weights an instruction, splits added atomically)
VARIANTS = ((64, 64, False, False, False), (64, 64, True, False, False), (64, 64, True, True, False),
            (128, 64, True, True, False), (64, 128, True, True, False), (64, 64, True, True, True))  # fmt: skip
# the multi-stage tile (exactfuse.ops.w4a16.staged, forced through the op's launcher):
# (BN, BK, stages, splits as a multiple of split_count's)
STAGED = ((64, 64, 3, 1), (64, 64, 4, 1), (128, 64, 4, 1), (64, 64, 4, 2), (64, 64, 6, 1), (64, 128, 4, 1))
ALL = (*VARIANTS, *STAGED)


def variant_name(v) -> str:
    if len(v) == 4:
        return f"staged {v[0]}x{v[1]} s{v[2]}{f' x{v[3]} splits' if v[3] > 1 else ''}"
    bn, bk, p, two, at = v
    return f"wgmma {bn}x{bk}{' p' if p else ''}{' 2' if two else ''}{' atomic' if at else ''}"


def staged_splits(v, M: int, K8: int, N: int, sms: int) -> int:
    """The staged variant's K splits: split_count's times its multiple, while each split keeps whole
    groups and one K step more than the ring holds."""
    K = 8 * K8
    splits = split_count((N // v[0]) * triton.cdiv(M, min(128, max(8, next_power_of_2(M)))), K, v[1], sms)
    more = splits * v[3]
    return more if K % (more * 128) == 0 and K // more >= v[2] * v[1] else splits


def variant_gemm(v, a, qweight, scales, zeros, sms: int) -> torch.Tensor:
    if len(v) == 4:
        M, K = a.shape
        bn, bk, stages = v[:3]
        splits = staged_splits(v, M, K // 8, qweight.shape[1], sms)
        BM = min(128, max(8, next_power_of_2(M)))
        cfg = TileConfig("staged", BM, bn, bk, bn // 16, stages, splits, K // splits, staged=True)
        return w4.launch_w4a16_gemm(a, qweight, scales, zeros, None, None, 128, config=cfg)
    return wgmma_gemm(a, qweight, scales, zeros, 128, *v, sms)


def random_weight(K: int, N: int, dtype: torch.dtype, dev) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prepared asymmetric group-128 codes drawn on the device: (qweight, scales, zeros)."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (K // 8, N), dtype=torch.int32, device=dev)
    scales = (torch.rand((K // 128, N), device=dev) * 0.01 + 0.001).to(dtype)
    zeros = torch.randint(0, 16, (K // 128, N), device=dev).to(torch.uint8)
    return qweight, scales, zeros


def shape_lines(
    K: int, N: int, ms: list[int], dtype: torch.dtype, sms: int, bw: float, dev, variants: tuple, copies: int = 4
) -> list[str]:
    """One line per M for a (K, N) weight: every path's µs, each output checked first (the probe
    kernel's pair dequantization is bf16's: "-" in fp16)."""
    weights = [random_weight(K, N, dtype, dev) for _ in range(copies)]
    dense = [native.dequantize(q, s, z, 128, dtype) for q, s, z in weights]
    lines = []
    for M in ms:
        a = torch.randn((M, K), dtype=dtype, device=dev)
        args = (a, *weights[0], None, None, 128)
        tl_dot = w4.select_config(M, N, K, 128, sms)
        expected = native.w4a16_gemm(*args)
        times = {
            "shipped": bench_rotating(
                lambda i, a=a, c=tl_dot: w4.launch_w4a16_gemm(a, *weights[i], None, None, 128, config=c), copies
            )
        }
        for v in variants:
            if len(v) == 5 and v[3] and dtype != torch.bfloat16:
                times[v] = float("inf")
                continue
            # a variant that fails to build or misses the contract is reported, and the others still run
            try:
                check = CONTRACT.check(variant_gemm(v, a, *weights[0], sms), expected, args=args)
            except Exception as error:  # the probe reports every failure and goes on
                print(f"K{K} N{N} M{M} {variant_name(v)}: {type(error).__name__}: {str(error)[:2000]}", flush=True)
                times[v] = float("inf")
                continue
            if not check.passed:
                print(f"K{K} N{N} M{M} {variant_name(v)}: contract missed: {check.summary()}", flush=True)
                times[v] = float("inf")
                continue
            times[v] = bench_rotating(lambda i, a=a, v=v: variant_gemm(v, a, *weights[i], sms), copies)
        times["cublas"] = bench_rotating(lambda i, a=a: torch.matmul(a, dense[i]), copies)
        best = min(times[v] for v in variants)
        # bytes the op must move: packed weights, scales, zero points, activations, output
        roofline_us = (K * N // 2 + 3 * (K // 128) * N + 2 * M * (K + N)) / bw * 1e6
        cfg = tl_dot
        BM = min(128, max(8, next_power_of_2(M)))
        splits = "/".join(
            str(
                staged_splits(v, M, K // 8, N, sms)
                if len(v) == 4
                else split_count((N // v[0]) * triton.cdiv(M, BM), K, v[1], sms)
            )
            for v in variants
        )
        path = f"{cfg.name}, split {cfg.split_k}; Gluon splits {splits}"
        cells = " | ".join(f"{times[v]:.1f}" if times[v] < float("inf") else "-" for v in variants)
        lines.append(
            f"{K} | {N} | {M} | {times['shipped']:.1f} ({path}) | {cells} | {times['cublas']:.1f} | "
            f"{times['shipped'] / best:.2f} | {times['cublas'] / best:.2f} | {100 * roofline_us / best:.0f}%"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ms", default="1,4,16,32,64,128")
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--staged-only", action="store_true", help="only the multi-stage tile's variants")
    parser.add_argument("--suffix", default="", help="appended to the results file's name")
    args = parser.parse_args()
    variants = STAGED if args.staged_only else ALL
    ms = [int(m) for m in args.ms.split(",")]
    dtype = DTYPES_BY_NAME[args.dtype]
    dev, sms, bw = device_info()
    header = " | ".join(variant_name(v) for v in variants)
    lines = [f"{torch.cuda.get_device_name()}; {args.dtype}, asymmetric group 128; µs, median of CUDA-graph replays"]
    lines.append(
        f"K | N | M | shipped (path) | {header} | cublas | shipped / best Gluon | cublas / best Gluon | "
        "best Gluon % roofline"
    )
    for K, N in SHAPES:
        lines += shape_lines(K, N, ms, dtype, sms, bw, dev, variants)
        torch.cuda.empty_cache()
    name = "w4a16_wgmma" + ("_staged" if args.staged_only else "") + ("" if args.dtype == "bf16" else f"_{args.dtype}")
    name += f"_{args.suffix}" if args.suffix else ""
    emit(f"{name}.txt", lines)


if __name__ == "__main__":
    main()
