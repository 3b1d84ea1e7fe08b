"""The fastest plain read of sparse_paged_attention's selected K/V bytes, against the op (rows 1 and 16).

Usage: PYTHONPATH=src python scripts/gpu/probe_attention_read_floor.py [--merge-groups 8,16]

For each small-batch bench-grid shape (rows in {1, 16}, (Hq, Hkv) in {(24, 2), (64, 4)}, D in {128, 256},
W = 2048, bf16 cache) a streaming kernel maps the row's entries to cache slots exactly as the op does,
loads the same K and V rows for each KV head and sums them (so the loads stay), with every split count
1-64 and tile 32/64; the fastest is the read floor. The op (its heuristic) is timed beside it, both by
the bench's timer (median of CUDA-graph replays). The issue's rows = 1 target: the op within 1.5x of
the floor. Where the op's time goes: ``op, empty merge`` is the op with its merge launch replaced by an
empty kernel of the same arguments (the partial kernel plus one launch), ``empty`` that empty kernel
alone; so the partial kernel takes about ``op, empty merge - empty`` and the merge ``op - op, empty
merge + empty``. ``--merge-groups`` times the op once more for each group size of the merge's loads
(``MERGE_GROUP``, which the launcher reads from ``triton.py``'s namespace) after the first, side by side.
Result: benchmarks/results/h200/sweeps/sparse_attention_read_floor.txt.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import triton
import triton.language as tl
from sweep_io import emit

from exactfuse.bench.results import geomean
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.sparse_paged_attention import _sparse_paged_attention
from exactfuse.ops.sparse_paged_attention import triton as at
from exactfuse.testing.cases import sparse_paged_attention as inputs

TIMER = cudagraph_timer(rep_ms=4)


@triton.jit
def gather_read_kernel(
    k_ptr, v_ptr, idx_ptr, table_ptr, req_ptr, out_ptr, num_requests, max_pages, num_pages, page_size, W,
    num_splits, s_k_page, s_k_slot, s_k_head, s_idx_row, s_table_row, HKV: tl.constexpr, D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    g = tl.program_id(1)
    s = tl.program_id(2)
    d = tl.arange(0, D)
    req = tl.load(req_ptr + row)
    table_row = table_ptr + tl.minimum(tl.maximum(req, 0), num_requests - 1).to(tl.int64) * s_table_row
    acc = tl.zeros((D,), tl.float32)
    for t in range(s, tl.cdiv(W, BLOCK_N), num_splits):
        cols = t * BLOCK_N + tl.arange(0, BLOCK_N)
        tok = tl.load(idx_ptr + row.to(tl.int64) * s_idx_row + cols, mask=cols < W, other=-1)
        pos = tl.maximum(tok, 0)
        lpage = pos // page_size
        valid = (tok >= 0) & (lpage < max_pages) & (tl.zeros_like(tok) + req < num_requests)
        page = tl.load(table_row + tl.minimum(lpage, max_pages - 1), mask=valid, other=-1)
        valid = valid & (page >= 0) & (page < num_pages)
        off = tl.where(valid, page, 0).to(tl.int64) * s_k_page + tl.where(valid, pos - lpage * page_size, 0) * s_k_slot
        ptrs = (off + g * s_k_head)[:, None] + d[None, :]
        k = tl.load(k_ptr + ptrs, mask=valid[:, None], other=0.0)
        v = tl.load(v_ptr + ptrs, mask=valid[:, None], other=0.0)
        acc += tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
    tl.store(out_ptr + ((row * HKV + g) * num_splits + s) * D + d, acc)


@triton.jit
def empty_merge_kernel(
    part_ptr, lse_ptr, gate_ptr, out_ptr, rows, num_splits, s_g_row, s_g_head, s_o_row, s_o_head,
    HQ: tl.constexpr, D: tl.constexpr, GATE: tl.constexpr, MERGE_GROUP: tl.constexpr,
):  # fmt: skip
    pass


MERGE = at.sparse_attention_merge_kernel


GROUP = at.MERGE_GROUP


def op_time_us(args, merge=MERGE, group: int = GROUP) -> float:
    """The op (its heuristic) by the bench's timer, with ``merge`` as its merge kernel reading ``group``
    splits at a time."""
    at.sparse_attention_merge_kernel, at.MERGE_GROUP = merge, group
    try:
        return TIMER(lambda: _sparse_paged_attention.providers["triton"].fn(*args)) * 1e3
    finally:
        at.sparse_attention_merge_kernel, at.MERGE_GROUP = MERGE, GROUP


def empty_time_us(args) -> float:
    out, q = args[0], args[1]
    rows, Hq, D = q.shape

    def call():
        empty_merge_kernel[(rows, Hq)](out, out, out, out, rows, 1, 0, 0, 0, 0, HQ=Hq, D=D, GATE=0, MERGE_GROUP=1,
                                      num_warps=2)  # fmt: skip

    call()
    return TIMER(call) * 1e3


def read(args, block_n: int, splits: int):
    _, q, k, v, idx, table, req = args[:7]
    rows, Hkv, D = q.shape[0], k.shape[2], k.shape[3]
    assert k.stride() == v.stride()
    out = torch.empty((rows, Hkv, splits, D), dtype=torch.float32, device=q.device)

    def call():
        gather_read_kernel[(rows, Hkv, splits)](
            k, v, idx, table, req, out, table.shape[0], table.shape[1], k.shape[0], k.shape[1], idx.shape[1],
            splits, k.stride(0), k.stride(1), k.stride(2), idx.stride(0), table.stride(0), HKV=Hkv, D=D,
            BLOCK_N=block_n, num_warps=4,
        )  # fmt: skip

    return call


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--merge-groups", default=str(GROUP), help="merge group sizes, the first the default's")
    groups = [int(g) for g in parser.parse_args().merge_groups.split(",")]
    others = "".join(f" | op, merge group {g} µs" for g in groups[1:])
    lines = [f"shape | read floor µs (block_n, splits) | op µs | op / floor | op, empty merge µs | empty µs{others}"]
    ratios = {g: [] for g in groups[1:]}
    for seed, ((Hq, Hkv), D, rows) in enumerate(itertools.product(inputs.GRID_HEADS, (128, 256), (1, 16))):
        case = inputs._grid_case(torch.device("cuda"), torch.bfloat16, seed, rows, Hq, Hkv, D, 2048, torch.bfloat16)
        floors = {}
        for block_n, splits in itertools.product((32, 64), (1, 2, 4, 8, 16, 32, 64)):
            call = read(case.args, block_n, splits)
            call()
            floors[(block_n, splits)] = TIMER(call) * 1e3
        best = min(floors, key=floors.get)
        op_us = op_time_us(case.args, group=groups[0])
        parts = f"{op_time_us(case.args, empty_merge_kernel):.1f} | {empty_time_us(case.args):.1f}"
        for g in groups[1:]:
            at.MERGE_GROUP = g
            _sparse_paged_attention.providers["triton"].fn(*case.args)  # compiled before it is timed
            at.MERGE_GROUP = GROUP
            us = op_time_us(case.args, group=g)
            ratios[g].append(us / op_us)
            parts += f" | {us:.1f}"
        lines.append(f"{case.id} | {floors[best]:.1f} {best} | {op_us:.1f} | {op_us / floors[best]:.2f} | {parts}")
        print(lines[-1], flush=True)
    for g, r in ratios.items():
        lines.append(f"merge group {g} / {groups[0]}: geomean {geomean(r):.3f}, min {min(r):.3f}, max {max(r):.3f}")
    emit("sparse_attention_read_floor.txt", lines)


if __name__ == "__main__":
    main()
