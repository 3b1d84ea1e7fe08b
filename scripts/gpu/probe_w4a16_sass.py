"""SASS instruction mix of the W4A16 fused kernel, compiled ahead of time for sm_90 (no GPU needed:
Triton's bundled ptxas and nvdisasm).

For the decode tile (group 128, symmetric, split-K with the in-launch fixup, bf16 and fp16): the SASS
instruction count of the whole kernel (its loop body runs once per BK step; Triton does not unroll
it), the most frequent opcodes, and the shared-memory encodings Triton chose (TTGIR); then the GEMV
bucket's whole kernel per BM, with and without its 16-bit pair dequantization and its wide loads. Counts
differ between Triton versions, so compare them within one run. Results
(benchmarks/results/h200/sweeps/, Triton 3.6): sass_w4a16_gemv_loads.txt (the current kernels); the older
sass_w4a16_unpack16.txt, sass_w4a16_load3d_swap_ab.txt and sass_w4a16_gemv_packed_math.txt were made with
variants that are no longer in the kernels.

    PYTHONPATH=src python3 scripts/gpu/probe_w4a16_sass.py
"""

from __future__ import annotations

import collections
import os
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit

from exactfuse.ops.w4a16.gemv import w4a16_gemv_kernel
from exactfuse.ops.w4a16.heuristics import BUCKETS
from exactfuse.ops.w4a16.triton import GROUP_M, w4a16_gemm_kernel
from exactfuse.testing.offline import cubin_tool, sass

POINTERS = dict(p_a="*{dt}", p_qw="*i32", p_s="*{dt}", p_z="*u8", p_perm="*i32", p_bias="*{dt}", p_out="*{dt}")
POINTERS.update(p_ws="*fp32", p_count="*i32")
SCALARS = ("M", "N", "K", "stride_am", "K_PER_SPLIT")


DECODE = next(b for b in BUCKETS if b.name == "decode")
GEMV = next(b for b in BUCKETS if b.name == "gemv")


def compile_decode(dtype: str, arch: int = 90):
    BM, BN, BK, num_warps, num_stages = DECODE.BM, DECODE.BN, DECODE.BK, DECODE.num_warps, DECODE.num_stages
    # the tl.dot kernel's trailing arguments: the per-row group index (unused here) and its flag
    trailing = {"p_gi": "*i32", "groups": "i32", "HAS_GROUP_INDEX": False}
    return compile_tile(
        w4a16_gemm_kernel, dtype, dict(BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M), num_warps, num_stages, arch, trailing
    )


def compile_gemv(
    dtype: str,
    BM: int,
    BN: int,
    BK: int,
    num_warps: int,
    packed_math: bool = True,
    wide_a: bool = True,
    scale_tile: bool = True,
    arch: int = 90,
):
    tile = dict(PACKED_MATH=packed_math, WIDE_A=wide_a, SCALE_TILE=scale_tile, BM=BM, BN=BN, BK=BK)
    return compile_tile(w4a16_gemv_kernel, dtype, tile, num_warps, 1, arch)


def compile_tile(kernel, dtype: str, tile: dict, num_warps: int, num_stages: int, arch: int = 90, trailing=None):
    """``kernel`` (a W4A16 kernel) for group 128, symmetric, split-K with the in-launch fixup, the ``tile``
    constexprs, sizes divisible by 16; ``trailing``: the kernel's last arguments after those, name -> a
    Triton type or a constexpr's value."""
    const = dict(GROUP=128, GROUPS_PER_TILE=1, HAS_ZEROS=False, HAS_PERM=False, HAS_BIAS=False, SPLIT=True)
    const.update(ATOMIC=False, FIXUP=True, EVEN_K=True, INT64_INDEX=False, **tile)
    pointers = {name: t.format(dt=dtype) for name, t in POINTERS.items()}
    signature = {**pointers, **dict.fromkeys(SCALARS, "i32"), **dict.fromkeys(const, "constexpr")}
    for name, value in (trailing or {}).items():
        if isinstance(value, str):
            signature[name] = value
        else:
            signature[name] = "constexpr"
            const[name] = value
    # what the launcher specializes for pointers and for sizes divisible by 16 (the benchmark shapes)
    names = list(signature)
    aligned = [*POINTERS, "N", "K", "stride_am", "K_PER_SPLIT"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    source = ASTSource(kernel, signature, const, attrs)
    options = dict(num_warps=num_warps, num_stages=num_stages)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def opcodes(kernel) -> collections.Counter:
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass(kernel), re.M)
    return collections.Counter(ops)


def resources(kernel) -> str:
    """Registers, spill stores and shared memory of ``kernel``'s cubin (cuobjdump's resource usage)."""
    text = cubin_tool(kernel, "cuobjdump", "-res-usage")
    usage = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", text)
    return f"{usage[1]} registers, {usage[2]} B stack, {kernel.metadata.shared} B shared" if usage else text


def main() -> None:
    lines = [f"Triton {triton.__version__}, sm_90, decode bucket {DECODE}"]
    for dtype in ("bf16", "fp16"):
        kernel = compile_decode(dtype)
        ops = opcodes(kernel)
        head = f"{dtype}: {sum(ops.values())} SASS instructions"
        lines.append(f"\n{head}, {kernel.metadata.shared} B shared")
        lines.append("  " + "  ".join(f"{op} {n}" for op, n in ops.most_common(24)))
        shared = sorted(set(re.findall(r"#ttg\.\w*shared<\{[^}]*\}>", kernel.asm["ttgir"])))
        lines.append("  shared encodings: " + "; ".join(shared))
    BN, BK, num_warps = GEMV.BN, GEMV.BK, GEMV.num_warps
    lines.append(f"\ngemv bucket {GEMV}: the whole kernel per BM (its loop body once, the 8 nibbles unrolled)")
    for dtype in ("bf16", "fp16"):
        for BM in (1, 2, 4):
            # shipped; without the 64-bit activation loads and the scale tile; in fp32 arithmetic
            for packed, wide in ((True, True), (True, False), (False, True)):
                kernel = compile_gemv(dtype, BM, BN, BK, num_warps, packed, wide, wide)
                ops = opcodes(kernel)
                math = "16-bit pairs" if packed else "fp32"
                loads = "" if wide else ", one load per activation and scale"
                head = f"{dtype} BM={BM} {math}{loads}: {sum(ops.values())} SASS instructions"
                lines.append(f"{head}, {ops['BAR']} BAR, {resources(kernel)}")
                lines.append("  " + "  ".join(f"{op} {n}" for op, n in ops.most_common(16)))
    emit("probe_w4a16_sass.txt", lines)


if __name__ == "__main__":
    main()
