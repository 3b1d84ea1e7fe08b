"""Compile ``w4a16_gemm_packed``'s kernel (``ops/w4a16/packed_kernel.py``) for sm_90a without a GPU
and print, per configuration, its registers, shared memory and the consumer's main loop in SASS.

Usage: PYTHONPATH=src python scripts/offline_packed_sass.py [--configs 1x1u2s8,2x2u2s6 ...] [--dtype bf16] [--warps 4]
    [--per-sm 1] [--mix] [--wgmma [--groups 2]]

A configuration is ``BLOCKSxTILES uUNROLL sSTAGES`` (blocks of 8 activation rows, 16-column tiles a consumer
warp, 64-row chunks a step, ring slots), compiled with --warps consumer warps, stream-K (a unit in at most
3 pieces), group 128 (GROUP_CHUNKS 2).
Printed: the registers of the cubin and the ``setmaxnreg`` values of the partitions, shared bytes (the ring:
words, records, activations, and the weights a slot times STAGES times the CTAs an SM: what is in flight an SM),
the consumer's loop (the longest loop with an HMMA) in SASS per packed word a lane dequantizes (the
register-pipelined kernel it replaced: 21.75 at 1x1u2) and its LDS / UTMALDG / SYNCS / BAR counts, and the
kernel's totals of the same. Static counts, as ``scripts/offline_sass.py``'s.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

import triton

from exactfuse.testing.offline import compile_error, cubin_tool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from offline_sass import compile_sass

from exactfuse.ops.w4a16.packed import ZERO_ROW, register_cap
from exactfuse.ops.w4a16.packed_kernel import w4a16_packed_kernel
from exactfuse.ops.w4a16.packed_smem import ACTS_SMEM, SCALES_SMEM, WORDS_SMEM, ZEROS_SMEM
from exactfuse.ops.w4a16.packed_wgmma_kernel import w4a16_packed_wgmma_kernel

WARPS = 4
OPS = ("LDS", "UTMALDG", "SYNCS", "BAR", "HMMA", "SHFL", "STS", "LDG")
DEFAULT = "1x1u2s8,1x2u2s6,1x1u4s4,1x4u1s8,2x1u2s8,2x2u2s6,2x1u4s4"


def _desc(block: list[int], layout, elem: str = "i32") -> str:
    """The signature type of a Gluon TMA descriptor argument (box ``block`` of ``elem`` in ``layout``)."""
    return f"tensordesc<{elem}[{', '.join(map(str, block))}],{layout!r}>"


def _loop_spans(lines: list[str]) -> list[tuple[int, int]]:
    """Each loop of the SASS ``lines``: (its label's line, the line of the branch back to it)."""
    labels: dict[str, int] = {}
    spans = []
    for i, line in enumerate(lines):
        if m := re.match(r"\s*(\.L_x_\d+):", line):
            labels[m.group(1)] = i
        if (m := re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", line)) and m.group(1) in labels:
            spans.append((labels[m.group(1)], i))
    return spans


def _body(lines: list[str], span: tuple[int, int]) -> list[str]:
    return [ln for ln in lines[span[0] : span[1] + 1] if re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln)]


def _consumer_loop(sass: str) -> list[str]:
    """The shortest loop holding an HMMA (a label to the branch back to it): the consumer's step loop, not the
    persistent loop around it."""
    lines = sass.splitlines()
    bodies = [_body(lines, span) for span in _loop_spans(lines)]
    return min((b for b in bodies if any(" HMMA" in ln for ln in b)), key=len, default=[])


def _op_mix(lines) -> str:
    """``lines``' SASS opcodes (predicates and modifiers dropped) and their counts, most first."""
    ops = collections.Counter(
        m.group(1) for ln in lines if (m := re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln))
    )
    return ", ".join(f"{op} {n}" for op, n in ops.most_common())


def _count(lines, op: str) -> int:
    return sum(bool(re.search(rf"\b{op}\b|\b{op}\.", ln)) for ln in lines)


def compile_ws(
    config: str,
    dtype: str,
    warps: int = WARPS,
    per_sm: int = 1,
    pdl: bool = False,
    zeros: bool = True,
    per_warp: bool = False,
    mix: bool = False,
) -> str:
    """One configuration compiled with ``warps`` consumer warps for ``per_sm`` CTAs an SM
    (``packed.register_cap``), with ``pdl`` the programmatic-dependent-launch waits, with ``zeros`` zero
    points (else every one 8); its printed line (``mix``: and the consumer loop's whole opcode mix)."""
    blocks, tiles, unroll, stages = (int(v) for v in re.fullmatch(r"(\d+)x(\d+)u(\d+)s(\d+)", config).groups())
    t_cta = tiles * warps
    group_chunks = 2
    ru = 1 if group_chunks % unroll == 0 else unroll
    types = {
        "w_desc": _desc([t_cta, unroll, 128], WORDS_SMEM),
        "s_desc": _desc([1, 16 * t_cta], SCALES_SMEM, "i16"),
        "z_desc": _desc([1, max(2 * t_cta, ZERO_ROW)], ZEROS_SMEM),
        "a_desc": _desc([unroll, 8 * blocks, 32], ACTS_SMEM),
        "p_bias": f"*{dtype}",
        "p_out": f"*{dtype}",
        "p_ws": "*fp32",
        "p_count": "*i32",
    }
    consts = dict(GROUP_CHUNKS=group_chunks, HAS_BIAS=False, HAS_ZEROS=zeros, BLOCKS=blocks, TILES=tiles,
                  UNROLL=unroll, STAGES=stages, PIECES=3, PDL=pdl, PER_WARP=per_warp, num_warps=warps)  # fmt: skip
    label = (
        f"packed {dtype} {config}/{warps}"
        + (f" x{per_sm} an SM" if per_sm > 1 else "")
        + (" pdl" if pdl else "")
        + (" per-warp" if per_warp else "")
        + ("" if zeros else " symmetric")
    )
    try:
        div16 = ["p_bias", "p_out", "p_ws", "p_count", "N"]
        r = compile_sass(w4a16_packed_kernel, types, consts, div16, (), warps, maxnreg=register_cap(warps, per_sm))
    except Exception as exc:  # a failed configuration is a line of the table, not the end of it
        return compile_error(label, exc)
    sass = r["sass"]
    loop = _consumer_loop(sass)
    words = tiles * unroll * 4
    maxnreg = {
        f"{kind.lower()} {int(n, 0)}"
        for kind, n in re.findall(r"USETMAXREG\.(TRY_ALLOC|DEALLOC)\.CTAPOOL\s+(?:UP\d+,\s*)?(0x[0-9a-f]+|\d+)", sass)
    }
    stack = re.search(r"STACK:(\d+)", cubin_tool(r["kernel"], "cuobjdump", "-res-usage"))
    slot_words = t_cta * unroll * 512
    zero_row = 4 * max(2 * t_cta, ZERO_ROW) * zeros
    slot = slot_words + ru * (t_cta * 32 + zero_row) + unroll * blocks * 1024  # words, scales, zeros, activations
    in_loop = ", ".join(f"{op} {_count(loop, op)}" for op in OPS)
    total = ", ".join(f"{op} {_count(sass.splitlines(), op)}" for op in OPS[:4])
    return (
        f"{label}: {r['regs']} regs (setmaxnreg {', '.join(sorted(maxnreg)) or '-'}), "
        f"stack {stack.group(1) if stack else '?'} B; {r['shared']} B shared (slot {slot} B, "
        f"{stages * slot_words * per_sm // 1024} KB of weights in flight an SM); loop"
        f" {len(loop)} SASS, {len(loop) / words:.2f} a word: {in_loop}; kernel: {total}"
        + (f"\n  the loop's opcodes: {_op_mix(loop)}" if mix else "")
    )


def _hgmma_loops(sass: str) -> list[list[str]]:
    """The step loop of each consumer partition: for each HGMMA, the shortest loop holding it."""
    lines = sass.splitlines()
    spans = _loop_spans(lines)
    loops = set()
    for i, line in enumerate(lines):
        if " HGMMA" in line and (around := [(a, b) for a, b in spans if a <= i <= b]):
            loops.add(min(around, key=lambda span: span[1] - span[0]))
    return [_body(lines, span) for span in sorted(loops)]


def _written(line: str) -> set[int]:
    """The general registers an instruction writes: its first operand when that is a register (a ``.64``
    or ``.128`` result, ``LDSM``'s ``.x2`` / ``.x4``, spans 2 or 4), none for stores, branches and barriers."""
    m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s+R(\d+)\b", line)
    if m is None or m.group(1).split(".")[0] in ("ST", "STS", "STG", "STL", "RED", "BRA", "BAR", "HGMMA"):
        return set()
    op, first = m.group(1), int(m.group(2))
    width = 4 if (".128" in op or ".X4" in op.upper()) else 2 if (".64" in op or ".X2" in op.upper()) else 1
    return set(range(first, first + width))


def wgmma_overlap(sass: str) -> tuple[int, int, int]:
    """Of the wgmma kernel's step loop, walked twice round (the second time counted, so that the wgmmas the
    loop's end leaves in flight are in flight at its top): the instructions that write a register an in-flight
    wgmma reads as its A operand (any: ptxas broke the pipeline, the results are wrong), the dequantizing
    ``HMUL2``s issued while wgmmas are in flight (the overlap the pipelined consumer exists for), and the
    loop's ``HMUL2``s. A wgmma is in flight from its ``HGMMA`` to the next ``WARPGROUP.DEPBAR``."""
    loop = min(_hgmma_loops(sass), key=len, default=[])
    in_flight: set[int] = set()
    clobbers = overlapped = 0
    for lap in (0, 1):
        for line in loop:
            if "WARPGROUP.DEPBAR" in line:
                in_flight.clear()
            elif m := re.search(r"HGMMA\.\S+\s+R\d+,\s+R(\d+),", line):
                in_flight |= set(range(int(m.group(1)), int(m.group(1)) + 4))
            elif lap:
                clobbers += bool(_written(line) & in_flight)
                overlapped += bool(in_flight) and _count([line], "HMUL2") > 0
    return clobbers, overlapped, _count(loop, "HMUL2")


def compile_wgmma(
    config: str,
    dtype: str,
    warps: int = WARPS,
    zeros: bool = True,
    pipelined: bool = True,
    groups: int = 1,
    pdl: bool = False,
) -> str:
    """The wgmma kernel (``packed_wgmma_kernel.py``) at ``ROWSxTILES uUNROLL sSTAGES`` (rows of ``a`` a unit,
    16-column tiles a consumer warp, 64-row chunks a step, ring slots) with ``warps`` consumer warps in each of
    ``groups`` consumer partitions (``pdl``: with the programmatic-dependent-launch waits); its printed line
    (``pipelined``: a step's wgmmas in flight while the next is dequantized): registers, shared bytes, the
    consumer's loop per packed word a lane dequantizes and its HGMMA / PRMT / SHFL counts (the A operand built
    with no data movement: no PRMT or SHFL in the loop), and with two partitions each one's loop's HGMMAs."""
    rows, tiles, unroll, stages = (int(v) for v in re.fullmatch(r"(\d+)x(\d+)u(\d+)s(\d+)", config).groups())
    t_cta = tiles * warps * groups
    types = {
        "w_desc": _desc([t_cta, unroll, 128], WORDS_SMEM),
        "s_desc": _desc([1, 16 * t_cta], SCALES_SMEM, "i16"),
        "z_desc": _desc([1, max(2 * t_cta, ZERO_ROW)], ZEROS_SMEM),
        "a_desc": _desc([unroll, rows, 32], ACTS_SMEM),
        "p_bias": f"*{dtype}",
        "p_out": f"*{dtype}",
        "p_ws": "*fp32",
        "p_count": "*i32",
    }
    consts = dict(GROUP_CHUNKS=2, HAS_BIAS=False, HAS_ZEROS=zeros, BM=rows, TILES=tiles, UNROLL=unroll,
                  STAGES=stages, PIECES=3, PDL=pdl, PIPELINED=pipelined, GROUPS=groups, num_warps=warps)  # fmt: skip
    label = (
        f"wgmma {dtype} {config}/{warps}"
        + ("" if groups == 1 else f" x{groups} partitions")
        + ("" if zeros else " symmetric")
        + ("" if pipelined else " unpipelined")
        + (" pdl" if pdl else "")
    )
    try:
        r = compile_sass(w4a16_packed_wgmma_kernel, types, consts, ["p_bias", "p_out", "p_ws", "p_count", "N"], (),
                         warps)  # fmt: skip
    except Exception as exc:  # a failed configuration is a line of the table, not the end of it
        return compile_error(label, exc)
    loop = _consumer_loop(r["sass"].replace("HGMMA", "HMMA.G"))
    words = tiles * unroll * 4
    in_loop = ", ".join(f"{op} {_count(loop, op)}" for op in ("HMMA", "PRMT", "SHFL", "LDS", "STS", "BAR"))
    each = ", ".join(str(_count(body, "HGMMA")) for body in _hgmma_loops(r["sass"]))
    loops = "" if groups == 1 else f"; partitions' loops: HGMMA {each}"
    if groups == 1:
        clobbers, under, dequant = wgmma_overlap(r["sass"])
        loops += f"; under wgmmas in flight: {under} of {dequant} HMUL2, {clobbers} writes of their A registers"
    sums = _count(r["sass"].splitlines(), "LDG.E.128")  # the stream-K sum's loads of the pieces' partials
    return (
        f"{label}: {r['regs']} regs, {r['shared']} B shared; loop {len(loop)} SASS, {len(loop) / words:.2f} a word:"
        f" {in_loop.replace('HMMA', 'HGMMA')}{loops}; kernel: LDG.E.128 {sums}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=DEFAULT, help="BLOCKSxTILESuUNROLLsSTAGES,...")
    parser.add_argument("--dtype", default="bf16", help="the activation dtype (bf16, fp16)")
    parser.add_argument("--warps", type=int, default=WARPS, help="consumer warps")
    parser.add_argument("--per-sm", type=int, default=1, help="CTAs an SM (the registers capped to fit them)")
    parser.add_argument("--pdl", action="store_true", help="with the programmatic-dependent-launch waits")
    parser.add_argument("--symmetric", action="store_true", help="no zero points (every one 8)")
    parser.add_argument("--per-warp", action="store_true", help="each consumer warp a partition of its own")
    parser.add_argument("--wgmma", action="store_true", help="the wgmma kernel, configurations ROWSxTILESuUsS")
    parser.add_argument("--groups", type=int, default=1, help="the wgmma kernel's consumer partitions (1 or 2)")
    parser.add_argument("--mix", action="store_true", help="the mma.sync kernel's consumer loop's whole opcode mix")
    args = parser.parse_args()
    print(f"Triton {triton.__version__}, sm_90a; static SASS counts")
    for config in args.configs.split(","):
        if args.wgmma:
            for pipelined in (True, False) if args.groups == 1 else (False,):  # two partitions: unpipelined
                print(
                    compile_wgmma(config, args.dtype, args.warps, not args.symmetric, pipelined, args.groups, args.pdl),
                    flush=True,
                )
            continue
        print(
            compile_ws(
                config, args.dtype, args.warps, args.per_sm, args.pdl, not args.symmetric, args.per_warp, args.mix
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
