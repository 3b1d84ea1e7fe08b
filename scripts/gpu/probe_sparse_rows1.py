"""sparse_paged_attention at one decode row: the launch configurations that could reach 1.5x the
``gather-sdpa-compiled`` peer, side by side with it, the shipped rule and the read floor.

Usage: PYTHONPATH=src python scripts/gpu/probe_sparse_rows1.py [--rows 1,16,64] [--kv bf16,e4m3]
       [--peer-rows 1] [--out PATH]

Shapes: the bench grid's (W = 2048, 32k context, page 1024, (Hq, Hkv) = (24, 2), D 128 and 256), bf16
at every row count of ``--rows`` (16 and 64 are controls: the merge variants must not slow them), fp8
e4m3 at rows = 1 only. Each candidate's output is checked against native under the op's contract
(``CONTRACT``) before it is timed, and a merge variant's output against the same split with the plain
merge, bit for bit (column ``bits``: the merge's shape, PDL and the in-launch merge must not change a
bit). Times: median of CUDA-graph replays (the bench's timer), all in one process. Columns: µs;
``x peer`` = peer µs / µs (the target: >= 1.5 at rows = 1); ``/ rule`` = µs / the shipped rule's µs.
The peer (bf16 caches only) is timed at ``--peer-rows`` (its torch.compile costs seconds a shape); the
read floor is ``probe attention_read_floor``'s gather-read kernel, fastest of a few tiles and splits.

Candidates (``AttentionConfig``; m = merge loads every split at once, 64 columns a merge program, 4 warps;
pdl = the merge launched as a programmatic dependent of the partial kernel):
- the rule, the rule + m, the rule + m + pdl (every row count);
- at rows = 1, one tile a program so that 128 programs stream W: 32-token tiles x 64 splits at 4 and 8
  warps, 64 x 32 at 4 and 8 warps, each + m + pdl; 32 x 64 without pdl (pdl's share), with one pipeline
  stage, with 32 columns a merge program; two tiles a program (32 x 32, 16 x 64, slots prefetched); the
  rule with three pipeline stages (both of a program's tiles in flight before the first is used: the
  pipeline's prologue issues them, sm_90a SASS); one 128-token tile a program over 16 splits; the rule
  and its three stages with the merge in the launch (``f``: the last split to arrive merges; one launch).
  The fp8 cache takes ``FP8_CANDIDATES`` of them (each configuration is a compile).

Result: benchmarks/results/h200/sweeps/sparse_rows1.txt (about 2-3 minutes on an H200).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import torch
from probe_attention_read_floor import read

from exactfuse.bench.peers import peers_for
from exactfuse.bench.timing import cudagraph_timer, recompile_limits
from exactfuse.ops.sparse_paged_attention import CONTRACT, _sparse_paged_attention, heuristics, inputs, native
from exactfuse.ops.sparse_paged_attention import triton as at
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.utils import num_sms

TIMER = cudagraph_timer(rep_ms=4)
PEER = "gather-sdpa-compiled"
HEADS = (24, 2)
W = 2048
KV = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}
FLOOR_TILES = ((32, 16), (32, 32), (32, 64), (64, 8), (64, 16), (64, 32))


def wide_merge(c: AttentionConfig, pdl: bool = True, block_d: int = 64) -> AttentionConfig:
    """``c`` with the merge reading every split at once, ``block_d`` columns a merge program, 4 warps."""
    return replace(c, merge_group=c.num_splits, merge_block_d=block_d, merge_warps=4, pdl=pdl)


# the fp8 cache (rows = 1) takes only these of the rows = 1 candidates: each one is compiled anew
FP8_CANDIDATES = ("rule", "rule + m + pdl", "32x64 w4 m pdl", "64x32 w8 m pdl", "rule s3 m pdl", "rule f")


def candidates(rule: AttentionConfig, rows: int, kv: str) -> dict[str, AttentionConfig]:
    out = {"rule": rule}
    if rule.num_splits > 1:
        out["rule + m"] = wide_merge(rule, pdl=False)
        out["rule + m + pdl"] = wide_merge(rule)
    if rows == 1:
        one_tile = AttentionConfig(32, 64, 4)
        out |= {
            "32x64 w4 m pdl": wide_merge(one_tile),
            "32x64 w8 m pdl": wide_merge(replace(one_tile, num_warps=8)),
            "64x32 w4 m pdl": wide_merge(AttentionConfig(64, 32, 4)),
            "64x32 w8 m pdl": wide_merge(AttentionConfig(64, 32, 8)),
            "32x64 w4 m": wide_merge(one_tile, pdl=False),
            "32x64 w4 s1 m pdl": wide_merge(replace(one_tile, num_stages=1)),
            "32x64 w4 m32 pdl": wide_merge(one_tile, block_d=32),
            "32x32 w4 p m pdl": wide_merge(AttentionConfig(32, 32, 4, prefetch_slots=True)),
            "32x32 w8 p m pdl": wide_merge(AttentionConfig(32, 32, 8, prefetch_slots=True)),
            "16x64 w4 p m pdl": wide_merge(AttentionConfig(16, 64, 4, prefetch_slots=True)),
            "rule s3 m pdl": wide_merge(replace(rule, num_stages=3)),
            "128x16 w8 m pdl": wide_merge(AttentionConfig(128, 16, 8)),
            "rule f": replace(rule, fixup=True),
            "rule s3 f": replace(rule, num_stages=3, fixup=True),
        }
    return out if kv == "bf16" else {name: c for name, c in out.items() if name in FP8_CANDIDATES}


def label(c: AttentionConfig) -> str:
    marks = f", s{c.num_stages}" if c.num_stages != AttentionConfig.num_stages else ""
    marks += ", p" if c.prefetch_slots else ""
    marks += ", f" if c.fixup else ""
    if c.merge_group is not None or c.merge_block_d is not None or c.merge_warps != AttentionConfig.merge_warps:
        marks += f", merge g{c.merge_group or at.MERGE_GROUP}/d{c.merge_block_d or 'all'}/w{c.merge_warps}"
    marks += ", pdl" if c.pdl else ""
    return f"({c.block_n}, {c.num_splits}, {c.num_warps}{marks})"


def plain_merge(c: AttentionConfig) -> AttentionConfig:
    """``c`` with the plain second launch for its merge (no in-launch merge, the default merge shape)."""
    return replace(c, merge_group=None, merge_block_d=None, merge_warps=AttentionConfig.merge_warps, pdl=False,
                   fixup=False)  # fmt: skip


def run_config(args: tuple, config: AttentionConfig) -> torch.Tensor:
    out = torch.full_like(args[0], float("nan"))
    at.launch_sparse_paged_attention(out, *args[1:], config=config)
    torch.cuda.synchronize()
    return out


def time_config(args: tuple, config: AttentionConfig) -> float:
    out = torch.empty_like(args[0])
    return TIMER(lambda: at.launch_sparse_paged_attention(out, *args[1:], config=config)) * 1e3


def floor_us(args: tuple) -> tuple[float, tuple]:
    times = {}
    for block_n, splits in FLOOR_TILES:
        call = read(args, block_n, splits)
        call()
        times[block_n, splits] = TIMER(call) * 1e3
    best = min(times, key=times.get)
    return times[best], best


def peer_us(args: tuple) -> tuple[float, float]:
    """The peer's µs and its relative error against the op's float64 reference (its own output buffer)."""
    own = (torch.empty_like(args[0]), *args[1:])
    call = next(a for a in peers_for("sparse_paged_attention") if a.name == PEER).prepare(own, {})
    call()
    ref = native.reference64(*own)
    err = float(torch.linalg.vector_norm(own[0].double() - ref) / torch.linalg.vector_norm(ref))
    return TIMER(call) * 1e3, err


def shape_lines(args: tuple, case_id: str, rows: int, D: int, kv: str, with_peer: bool, sms: int) -> list[str]:
    expected = torch.empty_like(args[0])
    _sparse_paged_attention.native(expected, *args[1:])
    rule = heuristics.attention_config(rows, HEADS[1], D, W, sms, args[2].element_size())
    floor, floor_tile = floor_us(args)
    peer, peer_err = peer_us(args) if with_peer and kv == "bf16" else (None, None)
    head = f"{case_id}: read floor {floor:.1f} µs {floor_tile}"
    head += f", {PEER} {peer:.1f} µs (rel err {peer_err:.2g})" if peer else f", {PEER} not timed"
    lines = [head, "  candidate (block_n, splits, warps, ...) | µs | x peer | / rule | / floor | bits"]
    times = {}
    for name, config in candidates(rule, rows, kv).items():
        try:
            out = run_config(args, config)
            check = CONTRACT.check(out, expected, args=args)
            if not check.passed or (torch.isnan(out).any() and not torch.isnan(expected).any()):
                lines.append(f"  {name} {label(config)} | FAILS the contract: {check.summary()}")
                continue
            twin = plain_merge(config)
            bits = "-"
            if twin != config:
                same = torch.equal(out.view(torch.int16), run_config(args, twin).view(torch.int16))
                bits = "same" if same else "DIFFER"
            us = times[name] = time_config(args, config)
        except Exception as e:  # a candidate that cannot launch or be captured is reported, not fatal
            lines.append(f"  {name} {label(config)} | error: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        x_peer = f"{peer / us:.2f}" if peer else "-"
        rel = f"{us / times['rule']:.2f}" if "rule" in times else "-"
        lines.append(f"  {name} {label(config)} | {us:.1f} | {x_peer} | {rel} | {us / floor:.2f} | {bits}")
    if times:
        best = min(times, key=times.get)
        x_peer = f", {peer / times[best]:.2f}x peer" if peer else ""
        lines.append(f"  best: {best} {times[best]:.1f} µs{x_peer}, {times['rule'] / times[best]:.2f}x the rule")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,16,64")
    parser.add_argument("--kv", default="bf16,e4m3", help="cache dtypes (e4m3 at rows = 1 only)")
    parser.add_argument("--peer-rows", default="1", help=f"row counts at which {PEER} is timed")
    parser.add_argument("--out", default="benchmarks/results/h200/sweeps/sparse_rows1.txt")
    opts = parser.parse_args()
    dev = torch.device("cuda")
    sms = num_sms(dev)
    peer_rows = {int(r) for r in opts.peer_rows.split(",") if r}
    lines = [
        f"{torch.cuda.get_device_name()}: {sms} SMs, torch {torch.__version__}; (Hq, Hkv) = {HEADS}, W = {W}; "
        "x peer = peer µs / µs (target >= 1.5 at rows = 1), / rule = µs / rule µs"
    ]
    start = time.time()
    seed = 0
    with recompile_limits():
        for kv in opts.kv.split(","):
            for rows in [int(r) for r in opts.rows.split(",")]:
                if kv != "bf16" and rows != 1:
                    continue
                for D in (128, 256):
                    case = inputs._grid_case(dev, torch.bfloat16, seed, rows, *HEADS, D, W, KV[kv])
                    seed += 1
                    t0 = time.time()
                    block = shape_lines(case.args, case.id, rows, D, kv, rows in peer_rows, sms)
                    block.append(f"  ({time.time() - t0:.0f} s)")
                    print("\n".join(block), flush=True)
                    lines += block
                    del case
                    torch.cuda.empty_cache()
                    save(opts.out, lines)  # a run stopped by its budget keeps what it measured
    lines.append(f"{time.time() - start:.0f} s in all")
    save(opts.out, lines)
    print(lines[-1])


def save(path: str, lines: list[str]) -> None:
    """``lines`` into ``path`` and, under ``run.sh`` (``OUT`` set), into ``$OUT/sparse_rows1.txt``."""
    for target in (path, os.path.join(os.environ["OUT"], "sparse_rows1.txt") if os.environ.get("OUT") else None):
        if target:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            with open(target, "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
