"""Compile a kernel for sm_90a without a GPU and print its registers, shared memory and SASS op mix.

Usage: PYTHONPATH=src python scripts/offline_sass.py conv [--tiles 32x128,32x128u8 ...] [--warps 4]
       PYTHONPATH=src python scripts/offline_sass.py attention [--kv bf16,fp8e4nv,fp8e5] [--q bf16] [--fixup]
       PYTHONPATH=src python scripts/offline_sass.py moe          (flat and row grid, both layouts)
       ... [--op F2F,F2FP,LDG,LDGSTS,LDS,HMMA] [--sass DIR]   (count these ops; write each kernel's SASS)

Triton compiles to PTX and ptxas / nvdisasm (shipped in the Triton wheel) to SASS on the CPU machine, so
a change to a kernel can be read at the instruction level before a GPU call: registers (from the
cubin, what limits occupancy), shared memory, and how many of each SASS op the kernel holds. These are
static counts (code size, both sides of every branch), not executed instructions, and the local Triton
may be newer than the GPU machine's: read differences between variants, then measure on the GPU.

Presets: ``conv`` is the conv family's row kernel in causal_conv1d prefill (K = 4, SiLU, bias, a slot
cache, bf16); ``attention`` is sparse_paged_attention's partial kernel at (Hq, Hkv) = (24, 2), D = 128,
block_n 64, split, fused gate; ``moe`` is moe_silu_and_mul's kernel at its N = 3072 bf16 configuration
(BM 1, BN 1024, 4 warps) with fp32 row weights, split and interleaved, flat and row grid. Pointers and
row strides are marked 16-divisible and unit strides constant, as the launches specialize them.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
TARGET = GPUTarget("cuda", 90, 32)


def compile_sass(fn, types: dict, constexprs: dict, div16=(), ones=(), num_warps=4, num_stages=None) -> dict:
    """Registers, shared bytes and the SASS op counts of ``fn`` compiled with these argument types."""
    names = list(fn.arg_names)
    sig = {n: types.get(n, "i32") for n in names}
    sig.update({n: "constexpr" for n in (*constexprs, *ones)})
    consts = {(names.index(k),): v for k, v in constexprs.items()} | {(names.index(k),): 1 for k in ones}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    options = {"num_warps": num_warps} | ({"num_stages": num_stages} if num_stages else {})
    kernel = triton.compile(ASTSource(fn, sig, constexprs=consts, attrs=attrs), target=TARGET, options=options)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "kernel.cubin")
        with open(cubin, "wb") as f:
            f.write(kernel.asm["cubin"])
        usage = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", cubin], capture_output=True, text=True)
        sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", cubin], capture_output=True, text=True).stdout
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        if m := re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line):
            ops[m.group(1)] += 1
    regs = re.search(r"REG:(\d+)", usage.stdout)
    return {"regs": int(regs.group(1)) if regs else None, "shared": kernel.metadata.shared, "ops": ops, "sass": sass}


def _conv(tile: str, warps: int) -> tuple[str, dict]:
    from exactfuse.ops.conv.kernels import conv_rows_kernel

    dims, _, unroll = tile.partition("u")
    bt, bc = (int(v) for v in dims.split("x"))
    types = {n: "*bf16" for n in ("p_x", "p_w", "p_b", "p_res", "p_outer", "p_out", "p_state")}
    types |= {"p_sid": "*i32", "p_qsl": "*i32", "p_acc": "*i32", "p_init": "*i1", "p_tok": "*i32"}
    consts = dict(MODE=2, K=4, D=1, SQL=1, HAS_STATE=True, HAS_SID=True, INIT=1, HAS_TOKEN_MAP=False,
                  HAS_RESIDUAL=False, HAS_OUTER=False, HAS_BIAS=True, ACT=0, BC=bc, BW=4, BT=bt,
                  UNROLL=int(unroll or 1))  # fmt: skip
    div16 = [*types, "stride_x", "stride_res", "stride_outer", "stride_out", "C"]
    ones = ["stride_w_k", "stride_s_w", "stride_sid"]
    return f"conv {tile}/{warps}", compile_sass(conv_rows_kernel, types, consts, div16, ones, warps)


def _attention(q: str, kv: str, warps: int, fixup: bool, prefetch: bool = False) -> tuple[str, dict]:
    from exactfuse.ops.sparse_paged_attention.triton import sparse_attention_partial_kernel as kernel

    types = {"q_ptr": f"*{q}", "k_ptr": f"*{kv}", "v_ptr": f"*{kv}", "gate_ptr": f"*{q}", "out_ptr": f"*{q}",
             "part_ptr": "*fp32", "lse_ptr": "*fp32", "count_ptr": "*i32", "qk_scale": "fp32",
             "out_scale": "fp32"}  # fmt: skip
    types |= {n: "*i32" for n in ("idx_ptr", "counts_ptr", "table_ptr", "req_ptr")}
    consts = dict(G=12, HQ=24, D=128, BLOCK_M=16, BLOCK_N=64, HAS_COUNTS=False, GATE=1, SPLIT=True,
                  FIXUP=fixup, PV_FP16=kv.startswith("fp8"), V_PAIRS=kv.startswith("fp8"),
                  PREFETCH_SLOTS=prefetch, MERGE_GROUP=8)  # fmt: skip
    div16 = [n for n in kernel.arg_names if n.endswith("_ptr") or n.startswith("s_")] + ["W"]
    label = f"attention q {q} kv {kv}{' fixup' if fixup else ''}{' prefetch' if prefetch else ''}/{warps}"
    return label, compile_sass(kernel, types, consts, div16, (), warps, 2)


def _moe(interleaved: bool, row_grid: bool) -> tuple[str, dict]:
    from exactfuse.ops.moe_silu_and_mul.heuristics import moe_config
    from exactfuse.ops.moe_silu_and_mul.triton import moe_silu_and_mul_kernel as kernel

    cfg = moe_config(3072, 2, interleaved)
    types = {"p_x": "*bf16", "p_w": "*fp32", "p_y": "*bf16"}
    consts = dict(INTERLEAVED=interleaved, HAS_WEIGHTS=True, INT64_INDEX=False, EVEN_N=True, BM=cfg.BM, BN=cfg.BN,
                  EVICT_FIRST=cfg.evict_first, STORE_RUN=cfg.store_run, ROW_GRID=row_grid)  # fmt: skip
    label = f"moe {'interleaved' if interleaved else 'split'} {'row grid' if row_grid else 'flat grid'}"
    return label, compile_sass(kernel, types, consts, [*types, "N", "stride_x"], ("stride_w",), cfg.num_warps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preset", choices=["conv", "attention", "moe"])
    parser.add_argument("--tiles", default="32x128,16x128,32x128u8", help="conv: BTxBC[uUNROLL],...")
    parser.add_argument("--kv", default="bf16,fp8e4nv", help="attention: cache dtypes (Triton names)")
    parser.add_argument("--q", default="bf16", help="attention: q dtype (Triton name)")
    parser.add_argument("--warps", type=int, default=4, help="num_warps")
    parser.add_argument("--fixup", action="store_true", help="attention: merge in the launch (FIXUP)")
    parser.add_argument("--prefetch-slots", action="store_true", help="attention: also with PREFETCH_SLOTS")
    parser.add_argument("--op", default="F2F,F2FP,HADD2,LDG,LDGSTS,LDS,STS,HMMA,FFMA,IMAD",
                        help="SASS op prefixes to count (comma-separated)")  # fmt: skip
    parser.add_argument("--sass", help="a folder to write each kernel's SASS into")
    args = parser.parse_args()
    if args.preset == "conv":
        jobs = [lambda t=t: _conv(t, args.warps) for t in args.tiles.split(",")]
    elif args.preset == "moe":
        jobs = [lambda i=i, r=r: _moe(i, r) for i in (False, True) for r in (False, True)]
    else:
        prefetch = (False, True) if args.prefetch_slots else (False,)
        jobs = [lambda kv=kv, p=p: _attention(args.q, kv, args.warps, args.fixup, p)
                for kv in args.kv.split(",") for p in prefetch]  # fmt: skip
    prefixes = args.op.split(",")
    print(f"Triton {triton.__version__}, sm_90a; static SASS counts")
    for job in jobs:
        label, r = job()
        counts = {p: sum(n for op, n in r["ops"].items() if op.split(".")[0] == p) for p in prefixes}
        print(f"{label}: {r['regs']} regs, {r['shared']} B shared, {sum(r['ops'].values())} SASS; "
              + ", ".join(f"{p} {n}" for p, n in counts.items()))  # fmt: skip
        if args.sass:
            os.makedirs(args.sass, exist_ok=True)
            with open(os.path.join(args.sass, re.sub(r"[^\w.-]+", "_", label) + ".sass"), "w") as f:
                f.write(r["sass"])


if __name__ == "__main__":
    main()
