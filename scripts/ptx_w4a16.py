"""Compile the W4A16 GEMM kernel for sm_90 without a GPU and count the PTX and SASS instructions of its K loop.

Backs the PTX numbers in NOTES.md and the kernel's comments (st.shared width,
conversion instructions, loop length per thread and K step). Needs only the
Triton wheel (its bundled ptxas); the counts are for the Triton installed here,
which may differ from the GPU machine's.

    python3 scripts/ptx_w4a16.py --tile 16 128 128 4 4 --split               # decode tile, shipped path
    python3 scripts/ptx_w4a16.py --tile 128 128 64 8 3 --dtype fp16 --group 32 --zeros --act-order
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from exactfuse.ops.w4a16.triton import w4a16_gemm_kernel

POINTERS = (0, 1, 2, 3, 4, 5, 6)  # arguments assumed 16-byte aligned, as the launcher's tensors are
SIZES = (8, 9, 10, 11)  # N, K, stride_am, K_PER_SPLIT: multiples of 16


def loop_instructions(ptx: str) -> collections.Counter:
    """Opcode counts of the first inner loop (``Inner Loop Header`` to its back-edge)."""
    body = ptx[ptx.find("Inner Loop Header") :]
    body = body[: body.find("bra.uni")]
    ops = collections.Counter()
    for line in body.splitlines():
        line = re.sub(r"^@!?%p\d+\s*", "", line.strip())
        if line and not line.startswith(("//", ".loc", "$", "{", "}", ".reg")):
            ops[line.split()[0].rstrip(";")] += 1
    return ops


def sass_loop_instructions(cubin: bytes) -> collections.Counter:
    """Opcode counts of the longest backward-branch loop of ``cubin``'s SASS (nvdisasm from the Triton wheel)."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, check=True).stdout.splitlines()
    labels = {m.group(1): i for i, line in enumerate(text) if (m := re.match(r"\s*(\.L_x_\d+):", line))}
    loops = []
    for i, line in enumerate(text):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", line)
        if m and labels.get(m.group(1), i) < i:
            loops.append((i - labels[m.group(1)], labels[m.group(1)], i))
    if not loops:
        return collections.Counter()
    _, start, end = max(loops)
    ops = collections.Counter()
    for line in text[start : end + 1]:
        if m := re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line):
            ops[m.group(1)] += 1
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tile", nargs=5, type=int, metavar=("BM", "BN", "BK", "WARPS", "STAGES"), required=True)
    parser.add_argument("--split", action="store_true", help="split-K (fp32 workspace output)")
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--group", type=int, default=128, help="GROUP constexpr (a power of two)")
    parser.add_argument("--zeros", action="store_true")
    parser.add_argument("--act-order", action="store_true")
    parser.add_argument("--bias", action="store_true")
    parser.add_argument("--odd-k", action="store_true", help="EVEN_K false: masked last step")
    args = parser.parse_args()
    BM, BN, BK, warps, stages = args.tile
    dt = args.dtype
    signature = {
        "p_a": f"*{dt}",
        "p_qw": "*i32",
        "p_s": f"*{dt}",
        "p_z": "*u8",
        "p_perm": "*i32",
        "p_bias": f"*{dt}",
        "p_out": "*fp32" if args.split else f"*{dt}",
        "M": "i32",
        "N": "i32",
        "K": "i32",
        "stride_am": "i32",
        "K_PER_SPLIT": "i32",
    }
    constants = dict(
        GROUP=args.group,
        GROUPS_PER_TILE=max(1, BK // args.group),
        HAS_ZEROS=args.zeros,
        HAS_PERM=args.act_order,
        HAS_BIAS=args.bias and not args.split,
        SPLIT=args.split,
        ATOMIC=False,
        EVEN_K=not args.odd_k,
        INT64_INDEX=False,
        BM=BM,
        BN=BN,
        BK=BK,
        GROUP_M=8,
    )
    signature.update(dict.fromkeys(constants, "constexpr"))
    attrs = {(i,): [["tt.divisibility", 16]] for i in POINTERS + SIZES}
    kernel = triton.compile(
        ASTSource(w4a16_gemm_kernel, signature, constexprs=constants, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options=dict(num_warps=warps, num_stages=stages),
    )
    print(f"triton {triton.__version__}, sm_90, {vars(args)}; shared memory {kernel.metadata.shared} B")
    for name, ops in (
        ("PTX", loop_instructions(kernel.asm["ptx"])),
        ("SASS", sass_loop_instructions(kernel.asm["cubin"])),
    ):
        print(f"K loop, {name}: {sum(ops.values())} instructions per thread and step")
        print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common(20)))


if __name__ == "__main__":
    main()
