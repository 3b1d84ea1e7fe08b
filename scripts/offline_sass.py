"""Compile a kernel for sm_90a without a GPU and print its registers, shared memory and SASS op mix.

Usage: PYTHONPATH=src python scripts/offline_sass.py conv [--tiles 32x128,32x128u8 ...] [--warps 4]
       PYTHONPATH=src python scripts/offline_sass.py decode [--tiles 64,128] [--warps 1]
       PYTHONPATH=src python scripts/offline_sass.py short_decode [--tiles 64] [--warps 2] [--paths tsf]
       PYTHONPATH=src python scripts/offline_sass.py attention [--kv bf16,fp8e4nv,fp8e5] [--q bf16] [--fixup]
       PYTHONPATH=src python scripts/offline_sass.py merge        (the attention's merge launch)
       PYTHONPATH=src python scripts/offline_sass.py moe          (flat and row grid, both layouts)
       ... [--op F2F,F2FP,LDG,LDGSTS,LDS,HMMA] [--sass DIR]   (count these ops; write each kernel's SASS)

Triton compiles to PTX and ptxas / nvdisasm (shipped in the Triton wheel) to SASS without a GPU, so
a change to a kernel can be read at the instruction level before it runs on one: registers (from the
cubin, what limits occupancy), shared memory, and how many of each SASS op the kernel holds. These are
static counts (code size, both sides of every branch), not executed instructions, and the local Triton
may be newer than the one the kernels are measured with (3.6.0 on the H200): read differences between
variants, then measure on the GPU.

Presets: ``decode`` is the conv update kernel's decode step on FLA's ``[B, C, K]`` state (``--tiles``:
channels a program, ``--rows``: rows a program), by window path (``--paths``: the two loads, ``WINDOW_TILE``
with ``S_ALIGN`` 4, the channel stride K, or ``FLAT_WINDOW``), and with ``--fla`` fla-core's update kernel
on the same call; ``short_decode`` short_conv's decode step over ``[slot, C, W]`` storage (``cw``, a
9-position window) by window path (``--paths``);
``conv_grad`` the conv backward's row and dx kernels (bf16, K = 4, SiLU, bias; a tile ending in ``w`` reads
the weights as one word a channel); ``conv`` is the conv family's
prefill kernel in causal_conv1d prefill (K = 4, bf16's fast SiLU ``ACT``, bias, a slot cache, bf16);
``attention`` is sparse_paged_attention's partial kernel at (Hq, Hkv) = (24, 2), D = 128, block_n 64,
split, fused gate; ``merge`` its merge launch, plain (8 splits a group, all columns, 2 warps) and the
rows = 1 rule's (16 splits at once, 64 columns, 4 warps, a programmatic dependent launch); ``moe`` is
moe_silu_and_mul's kernel at its N = 3072 bf16 configuration (BM 1, BN 1024, 4 warps) with fp32 row
weights, split and interleaved, flat and row grid. Pointers and row strides are marked 16-divisible and
unit strides constant, as the launches specialize them.
"""

from __future__ import annotations

import argparse
import collections
import os
import re

import triton

from exactfuse.testing.offline import compile_offline, cubin_tool
from exactfuse.testing.offline import sass as disassemble

# the conv presets' SiLU: the first bf16 candidate, the formula the H200 proves (fastmath.CANDIDATES)
ACT = 11  # exactfuse.ops.fastmath.SILU_RCP


def compile_sass(
    fn, types: dict, constexprs: dict, div16=(), ones=(), num_warps=4, num_stages=None, maxnreg=None
) -> dict:
    """Registers, shared bytes and the SASS op counts of ``fn`` compiled with these argument types."""
    kernel = compile_offline(fn, types, constexprs, div16, ones, num_warps, num_stages, maxnreg=maxnreg)
    usage = cubin_tool(kernel, "cuobjdump", "-res-usage")
    sass = disassemble(kernel)
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        if m := re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line):
            ops[m.group(1)] += 1
    regs = re.search(r"REG:(\d+)", usage)
    return {"regs": int(regs.group(1)) if regs else None, "shared": kernel.metadata.shared, "ops": ops, "sass": sass,
            "kernel": kernel}  # fmt: skip


def _conv(tile: str, warps: int, dilation: int = 1, residual: bool = False) -> tuple[str, dict]:
    from exactfuse.ops.conv.lean import conv_lean_kernel
    from exactfuse.ops.conv.prefill import conv_prefill_kernel

    bt, bc, unroll, lean, fixup, stateless = re.fullmatch(r"(\d+)x(\d+)(?:u(\d+))?(l)?(f)?(s)?", tile).groups()
    bt, bc = int(bt), int(bc)
    types = {n: "*bf16" for n in ("p_x", "p_w", "p_b", "p_res", "p_outer", "p_out", "p_state")}
    types |= {"p_sid": "*i32", "p_qsl": "*i32", "p_acc": "*i32", "p_init": "*i1", "p_tok": "*i32", "p_seq": "*i32"}
    consts = dict(K=4, D=dilation, HAS_STATE=not stateless, HAS_SID=not stateless, INIT=0 if stateless else 1,
                  HAS_RESIDUAL=residual, HAS_OUTER=False, HAS_BIAS=True, ACT=ACT, BC=bc, BT=bt,
                  EVEN_C=True)  # fmt: skip
    kernel = conv_lean_kernel
    if lean:  # a contiguous [C, 4] bf16 weight: each channel's taps one 64-bit word (the launcher's W_WORD)
        runs = int(unroll or 1)
        consts |= dict(UNROLL=runs, W_ALIGN=4, W_WORD=4, EVERY_TILE=bool(stateless) and runs > 1)  # as launched
    else:
        kernel = conv_prefill_kernel
        consts |= dict(HAS_TOKEN_MAP=False, UNROLL=int(unroll or 1), HAS_SEQ_IDX=False, FIXUP=bool(fixup), HEAD=0)
    types = {n: t for n, t in types.items() if n in kernel.arg_names}
    div16 = [*types, "stride_x", "stride_res", "stride_outer", "stride_out", "C"]
    ones = [n for n in ("stride_w_k", "stride_s_w", "stride_sid") if n in kernel.arg_names]
    result = compile_sass(kernel, types, consts, div16, ones, warps, num_stages=1)
    return f"conv {tile}/{warps}", result | {"outputs": bt * bc // (32 * warps)}


def _fla_conv(bd: int, warps: int) -> tuple[str, dict]:
    """fla-core's forward conv kernel (``causal_conv1d_fwd_kernel``) on the ``conv`` preset's stateless call as
    FLA's users make it (batch ``[B, T, C]``, K = 4, SiLU, bias, bf16): its 64-row chunk x ``bd`` channels
    (FLA's ``BD``, which it autotunes)."""
    from fla.modules.causal_conv1d.ops import causal_conv1d_fwd_kernel

    kernel = causal_conv1d_fwd_kernel
    while not hasattr(kernel, "arg_names") or not hasattr(kernel, "src"):  # under @heuristics and its autotuner
        kernel = kernel.fn
    types = {n: "*bf16" for n in ("x", "y", "weight", "bias", "residual", "initial_state")}
    types |= {"cu_seqlens": "*i32", "chunk_indices": "*i32"}
    consts = dict(D=10240, W=4, BT=64, BW=4, BD=bd, ACTIVATION="silu", HAS_WEIGHT=True, HAS_BIAS=True,
                  HAS_RESIDUAL=False, USE_INITIAL_STATE=False, IS_VARLEN=False)  # fmt: skip
    result = compile_sass(kernel, types, consts, [*types, "stride_x_n", "stride_x_t"], ["stride_x_d"], warps)
    return f"fla conv 64x{bd}/{warps}", result | {"outputs": 64 * bd // (32 * warps)}


def _decode(bc: int, warps: int, path: str, rows: int = 1) -> tuple[str, dict]:
    """The decode kernel's step on FLA's state (``[B, C, K]``, K = 4, the history at the end: HEAD 1),
    bf16, SiLU, bias, no state indices; ``path``: ``-`` the two loads, ``t`` the register window's tile, ``f``
    the flat run."""
    from exactfuse.ops.conv.decode import window_owned
    from exactfuse.ops.conv.update import conv_decode_kernel as kernel

    types = {n: "*bf16" for n in ("p_x", "p_w", "p_b", "p_res", "p_outer", "p_out", "p_state")}
    types |= {"p_sid": "*i32", "p_init": "*i1", "p_tok": "*i32"}
    consts = dict(K=4, D=1, HAS_STATE=True, HAS_SID=False, INIT=2, HAS_TOKEN_MAP=False,
                  HAS_RESIDUAL=False, HAS_OUTER=False, HAS_BIAS=True, ACT=ACT, BC=bc, BW=4, BT=rows,
                  HEAD=1, WINDOW_TILE=path == "t", S_ALIGN=4, W_ALIGN=4,
                  CHANNELS_FIRST=False, FLAT_WINDOW=path == "f", EVEN_C=True, SCALAR_WINDOW=False,
                  OWNED=window_owned(path == "f", bc, warps))  # fmt: skip
    div16 = [*types, "stride_x", "stride_out", "stride_s_slot", "C"]  # stride_s_c is K = 4: not 16-divisible
    ones = ["stride_w_k", "stride_s_w", "stride_sid"]
    kind = {"-": "", "t": " window tile", "f": " flat run"}[path]
    label = f"decode [B, C, K] {bc}/{warps}{kind}{f' {rows} rows' if rows > 1 else ''}"
    return label, compile_sass(kernel, types, consts, div16, ones, warps, num_stages=1)


def _short_decode(bc: int, warps: int, path: str, rows: int = 1) -> tuple[str, dict]:
    """short_conv's decode step over ``[slot, C, W]`` storage (``cw``: K = 4, D = 3, a window of 9 positions, the
    channel stride 9), bf16, residual and outer residual, no activation, a state index and initial-state flag
    a row; ``path``: ``t`` the register window's ``[BW, BC]`` tile, ``s`` one ``[BC]`` vector a position
    (SCALAR_WINDOW), ``f`` the flat run (FLAT_WINDOW)."""
    from exactfuse.ops.conv.decode import window_owned
    from exactfuse.ops.conv.update import conv_decode_kernel as kernel

    types = {n: "*bf16" for n in ("p_x", "p_w", "p_b", "p_res", "p_outer", "p_out", "p_state")}
    types |= {"p_sid": "*i32", "p_init": "*i1", "p_tok": "*i32"}
    consts = dict(K=4, D=3, HAS_STATE=True, HAS_SID=True, INIT=1, HAS_TOKEN_MAP=False,
                  HAS_RESIDUAL=True, HAS_OUTER=True, HAS_BIAS=False, ACT=-1, BC=bc, BW=16, BT=rows,
                  HEAD=0, WINDOW_TILE=path in "ts", S_ALIGN=1, W_ALIGN=4,
                  CHANNELS_FIRST=False, FLAT_WINDOW=path == "f", EVEN_C=True, SCALAR_WINDOW=path == "s",
                  OWNED=window_owned(path == "f", bc, warps))  # fmt: skip
    div16 = [*types, "stride_x", "stride_res", "stride_outer", "stride_out", "stride_s_slot", "C"]
    ones = ["stride_w_k", "stride_s_w", "stride_sid"]  # stride_s_c is the window, 9: not 16-divisible
    label = f"short_conv decode cw {bc}/{warps} {path}{f' {rows} rows' if rows > 1 else ''}"
    return label, compile_sass(kernel, types, consts, div16, ones, warps, num_stages=1)


def _fla_update(bd: int, warps: int) -> tuple[str, dict]:
    """fla-core's update kernel (``causal_conv1d_update_kernel``) on the same call as :func:`_decode`: bf16,
    C = 10240, K = 4, SiLU, bias, its cache as the state; ``bd`` channels a program (FLA's ``BD``)."""
    from fla.modules.causal_conv1d.ops import causal_conv1d_update_kernel

    kernel = causal_conv1d_update_kernel
    while not hasattr(kernel, "arg_names") or not hasattr(kernel, "src"):  # under @heuristics and its autotuner
        kernel = kernel.fn
    types = {n: "*bf16" for n in ("x", "cache", "residual", "y", "weight", "bias")}
    consts = dict(D=10240, W=4, BD=bd, BW=4, ACTIVATION="silu", USE_INITIAL_STATE=True, HAS_WEIGHT=True,
                  HAS_BIAS=True, HAS_RESIDUAL=False)  # fmt: skip
    div16 = [*types, "stride_x_n", "stride_y_n"]
    return f"fla update BD {bd}/{warps}", compile_sass(
        kernel, types, consts, div16, ("stride_x_d", "stride_y_d"), warps
    )


def _attention(q: str, kv: str, warps: int, fixup: bool, prefetch: bool = False) -> tuple[str, dict]:
    from exactfuse.ops.sparse_paged_attention.partial_kernel import sparse_attention_partial_kernel as kernel

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


def _merge(group: int, block_d: int, pdl: bool, warps: int) -> tuple[str, dict]:
    from exactfuse.ops.sparse_paged_attention.merge_kernel import sparse_attention_merge_kernel as kernel

    types = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "gate_ptr": "*bf16", "out_ptr": "*bf16"}
    consts = dict(HQ=24, D=128, GATE=1, MERGE_GROUP=group, BLOCK_D=block_d, PDL=pdl)
    div16 = [n for n in kernel.arg_names if n.endswith("_ptr") or n.startswith("s_")]
    label = f"merge group {group} block_d {block_d or 'all'}{' pdl' if pdl else ''}/{warps}"
    return label, compile_sass(kernel, types, consts, div16, (), warps)


def _moe(interleaved: bool, row_grid: bool) -> tuple[str, dict]:
    from exactfuse.ops.moe_silu_and_mul.heuristics import moe_config
    from exactfuse.ops.moe_silu_and_mul.moe_gated_kernel import moe_silu_and_mul_kernel as kernel

    cfg = moe_config(3072, 2, interleaved)
    types = {"p_x": "*bf16", "p_w": "*fp32", "p_y": "*bf16"}
    consts = dict(INTERLEAVED=interleaved, HAS_WEIGHTS=True, INT64_INDEX=False, EVEN_N=True, BM=cfg.BM, BN=cfg.BN,
                  EVICT_FIRST=cfg.evict_first, STORE_RUN=cfg.store_run, ROW_GRID=row_grid)  # fmt: skip
    label = f"moe {'interleaved' if interleaved else 'split'} {'row grid' if row_grid else 'flat grid'}"
    return label, compile_sass(kernel, types, consts, [*types, "N", "stride_x"], ("stride_w",), cfg.num_warps)


def _conv_grad(tile: str, warps: int, dx: bool) -> tuple[str, dict]:
    from exactfuse.ops.conv.grad_kernels import conv_grad_rows_kernel, conv_grad_x_kernel

    word = tile.endswith("w")  # the weights' taps read as one word a channel (lean.tile_weights)
    bt, bc, steps = (int(v) for v in tile.removesuffix("w").split("x"))
    types = {n: "*bf16" for n in ("p_g", "p_x", "p_w", "p_b", "p_init", "p_dconv")}
    types |= {"p_qsl": "*i32", "p_seq": "*i32", "p_dw": "*fp32", "p_db": "*fp32"}
    consts = dict(K=4, D=1, HAS_BIAS=True, ACT=0, HAS_SEQ_IDX=False, HAS_INIT=False, BT=bt, BC=bc, STEPS=steps)
    consts |= dict(W_ALIGN=4, W_WORD=4 if word else 0)
    if not dx:
        div16 = [*types, "stride_g", "stride_x", "C"]
        return f"conv_grad rows {tile}/{warps}", compile_sass(
            conv_grad_rows_kernel, types, consts, div16, ["stride_w_k"], warps
        )
    types = {"p_dconv": "*bf16", "p_w": "*bf16", "p_qsl": "*i32", "p_seq": "*i32", "p_dx": "*bf16"}
    consts = dict(K=4, D=1, HAS_SEQ_IDX=False, BT=bt, BC=bc)
    div16 = [*types, "stride_dx", "C"]
    return f"conv_grad dx {bt}x{bc}/{warps}", compile_sass(
        conv_grad_x_kernel, types, consts, div16, ["stride_w_k"], warps
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preset", choices=["conv", "decode", "short_decode", "conv_grad", "attention", "merge",
                                           "moe"])  # fmt: skip
    parser.add_argument("--tiles", help="conv: BTxBC[uUNROLL][l: the lean prefill kernel][f: the prefill kernel's "
                        "fixup launch][s: no state],... (16x128,16x128l,16x128f,16x128ls); conv_grad: "
                        "BTxBCxSTEPS[w: weights read as one word a channel],... (32x64x8,16x128x16w)")  # fmt: skip
    parser.add_argument("--kv", default="bf16,fp8e4nv", help="attention: cache dtypes (Triton names)")
    parser.add_argument("--q", default="bf16", help="attention: q dtype (Triton name)")
    parser.add_argument("--warps", type=int, default=4, help="num_warps")
    parser.add_argument("--dilation", type=int, default=1, help="conv: the taps' dilation (short_conv's is 3)")
    parser.add_argument("--residual", action="store_true", help="conv: the output added to a residual")
    parser.add_argument("--fixup", action="store_true", help="attention: merge in the launch (FIXUP)")
    parser.add_argument("--prefetch-slots", action="store_true", help="attention: also with PREFETCH_SLOTS")
    parser.add_argument("--op", default="F2F,F2FP,HADD2,LDG,LDGSTS,LDS,STS,HMMA,FFMA,IMAD",
                        help="SASS op prefixes to count (comma-separated)")  # fmt: skip
    parser.add_argument("--sass", help="a folder to write each kernel's SASS into")
    parser.add_argument("--rows", type=int, default=1, help="decode: rows a program (ConvConfig.BT)")
    parser.add_argument(
        "--paths",
        help="decode (default -t), short_decode (default tsf): window paths "
        "(- the two loads, t the register window's tile, s one vector a position, f the flat run)",
    )
    parser.add_argument("--fla", action="store_true", help="conv, decode: also fla-core's kernel (fla importable)")
    args = parser.parse_args()
    if args.preset == "conv":
        tiles = (args.tiles or "32x128,16x128,32x128u8").split(",")
        jobs = [lambda t=t: _conv(t, args.warps, args.dilation, args.residual) for t in tiles]
        if args.fla:
            jobs += [lambda bd=bd: _fla_conv(bd, args.warps) for bd in (32, 64, 128)]
    elif args.preset == "decode":  # --tiles: channels a program
        channels = [int(c) for c in (args.tiles or "64,128").split(",")]
        jobs = [lambda c=c, p=p: _decode(c, args.warps, p, args.rows) for c in channels for p in args.paths or "-t"]
        if args.fla:
            jobs += [lambda c=c: _fla_update(c, args.warps) for c in channels]
    elif args.preset == "short_decode":  # --tiles: channels a program; --paths: window paths
        channels = [int(c) for c in (args.tiles or "64").split(",")]
        paths = args.paths or "tsf"
        jobs = [lambda c=c, p=p: _short_decode(c, args.warps, p, args.rows) for c in channels for p in paths]
    elif args.preset == "conv_grad":
        tiles = (args.tiles or "32x64x8,16x128x16").split(",")
        jobs = [lambda t=t, dx=dx: _conv_grad(t, args.warps, dx) for t in tiles for dx in (False, True)]
    elif args.preset == "merge":  # the plain merge launch and the rows = 1 rule's
        jobs = [lambda: _merge(8, 0, False, 2), lambda: _merge(16, 64, True, 4)]
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
        total = sum(r["ops"].values())
        per = f" ({total / r['outputs']:.1f} an output)" if "outputs" in r else ""
        print(f"{label}: {r['regs']} regs, {r['shared']} B shared, {total} SASS{per}; "
              + ", ".join(f"{p} {n}" for p, n in counts.items()) + r.get("note", ""))  # fmt: skip
        if args.sass:
            os.makedirs(args.sass, exist_ok=True)
            with open(os.path.join(args.sass, re.sub(r"[^\w.-]+", "_", label) + ".sass"), "w") as f:
                f.write(r["sass"])


if __name__ == "__main__":
    main()
