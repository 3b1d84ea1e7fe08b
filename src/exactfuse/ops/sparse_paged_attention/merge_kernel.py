"""The gate and the split merge of ``sparse_paged_attention``'s kernels: the merge kernel, grid
``(rows, Hq, column slices)``, and the helpers the partial kernel (``partial_kernel.py``) shares with it (its
in-launch merge with ``FIXUP``, its gated store without a split).

The merge weights split ``s`` by ``exp2(lse2_s - max lse2)`` and sums in split order (deterministic, the
same bits whatever the launch's shape), rounds to the output dtype, applies the gate and stores. Gate
(``GATE``: 0 none, 1 fused, 2 eager): ``sigmoid_fp32(g) = 1 / (1 + exp(-g))`` with libdevice ``exp`` and
an IEEE division, the expression eager PyTorch's CUDA sigmoid evaluates; the eager gate rounds the
sigmoid of a 16-bit gate by the formula ``SIGMOID`` that ``exactfuse.ops.fastmath`` admits.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.fastmath import SIGMOID
from exactfuse.ops.math import activation, exact_exp
from exactfuse.ops.sparse_paged_attention import heuristics


@triton.jit
def _load_gate(gate_ptr, row, heads, d, hmask, s_g_row, s_g_head, GATE: tl.constexpr):
    """The gate of heads ``heads`` (``[M]``), columns ``d`` of row ``row`` as fp32 ``[M, len(d)]`` (0 without
    one)."""
    if GATE == 0:
        return tl.zeros((heads.shape[0], d.shape[0]), tl.float32)
    g_ptrs = gate_ptr + row * s_g_row + heads[:, None] * s_g_head + d[None, :]
    return tl.load(g_ptrs, mask=hmask[:, None], other=0.0).to(tl.float32)


@triton.jit
def _gate(attn, g, dtype: tl.constexpr, GATE: tl.constexpr, SIGMOID: tl.constexpr):
    """``attn`` (fp32) rounded to ``dtype``, times the gate ``g`` (fp32, :func:`_load_gate`) as ``GATE``
    declares, still fp32; the eager gate's sigmoid by formula ``SIGMOID``."""
    a = attn.to(dtype).to(tl.float32)
    if GATE == 0:
        return a
    if GATE == 2:
        return a * activation(g, SIGMOID).to(dtype).to(tl.float32)
    return a * tl.div_rn(1.0, 1.0 + exact_exp(-g))


@triton.jit
def _store_heads(o, g, out_ptr, row, heads, d, hmask, s_o_row, s_o_head, GATE: tl.constexpr, SIGMOID: tl.constexpr):
    """Heads ``heads`` (``[M]``, ``hmask`` in range), columns ``d`` of row ``row``: ``o`` (fp32) rounded, gated
    by ``g`` (:func:`_load_gate`), stored."""
    y = _gate(o, g, out_ptr.dtype.element_ty, GATE, SIGMOID)
    tl.store(out_ptr + row * s_o_row + heads[:, None] * s_o_head + d[None, :], y.to(out_ptr.dtype.element_ty),
             mask=hmask[:, None])  # fmt: skip


# Splits the merge reads in one unrolled group: their loads are issued together, before any of them is
# used, so a group costs one L2 round trip instead of one a split (64 splits, one after another, were
# 12 µs of a 22 µs decode).
MERGE_GROUP = 8
# The widest group a launch takes (a wider ``AttentionConfig.merge_group`` takes groups of this many): each
# split of a group is unrolled code of its own, and compiling the loop's 64-split group took 86 s against
# 3.1 s for 16 (Triton 3.6, sm_90a, 128 columns; the time is in its coalescing pass).
MAX_MERGE_GROUP = 16
MAX_SPLITS = tl.constexpr(heuristics.MAX_SPLITS)


@triton.jit
def _load_group(part_ptr, lse_ptr, row, heads, hmask, d, rows, num_splits, s0, HQ: tl.constexpr, D: tl.constexpr,
                GROUP: tl.constexpr):  # fmt: skip
    """Splits ``s0 .. s0 + GROUP - 1``'s LSE (``[M]``) and partials (``[M, len(d)]``) as two tuples, every load
    issued before any is used; a split past ``num_splits`` reads LSE ``-inf`` and zeros."""
    lses = ()
    parts = ()
    for i in tl.static_range(GROUP):
        m = tl.where(s0 + i < num_splits, hmask, False)  # a vector mask (& a scalar: int32 in the interpreter)
        base = ((s0 + i) * rows + row) * HQ + heads
        lse = tl.load(lse_ptr + base, mask=m, other=float("-inf"), cache_modifier=".cg")
        o = tl.load(part_ptr + base[:, None] * D + d[None, :], mask=m[:, None], other=0.0, cache_modifier=".cg")
        # tuples grow by concatenation: Triton's front end takes no starred expression
        lses = lses + (lse,)  # noqa: RUF005
        parts = parts + (o,)  # noqa: RUF005
    return lses, parts


@triton.jit
def _add_group(acc, total, nan, only_neg_inf, lses, parts, top, GROUP: tl.constexpr):
    """The merge's running sums with one loaded group added, split by split in split order."""
    for i in tl.static_range(GROUP):
        lse = lses[i]
        o = parts[i]
        finite = lse > float("-inf")  # False for NaN too
        w = tl.where(finite, tl.exp2(lse - top), 0.0)
        acc += tl.where(finite[:, None], w[:, None] * o, 0.0)
        total += w
        nan = nan | (lse != lse)
        only_neg_inf = only_neg_inf | ((lse == float("-inf"))[:, None] & (o != o))
    return acc, total, nan, only_neg_inf


@triton.jit
def _merge_splits(
    part_ptr, lse_ptr, row, heads, hmask, d, rows, num_splits, HQ: tl.constexpr, D: tl.constexpr, GROUP: tl.constexpr
):
    """The splits' fp32 partials of heads ``heads`` (``[M]``), columns ``d`` (of ``D``) of row ``row``,
    weighted by their base-2 LSE in split order: ``[M, len(d)]`` fp32 (rows past ``hmask`` are 0). Read past
    L1 (another program of the launch may have written them). The maximum LSE reads every split's in one
    load and is taken once the first group's loads are issued (in the loop, not before it: a first group
    peeled off the loop made the compile 5x slower); the sums take ``GROUP`` (:data:`MERGE_GROUP`) splits at
    a time, and a split past ``num_splits`` changes nothing. No step between a group's loads reduces across
    threads (a barrier would wait on each split's load in turn). A split whose LSE is ``-inf`` has the same
    ``O`` (0, no token, or NaN, all scored ``-inf``) on every column, so a column slice tells the two apart as
    the whole row does, and each column keeps its own flag."""
    every = tl.arange(0, MAX_SPLITS)  # all splits' LSE in one load: one L2 round trip for the maximum
    m_all = (every[:, None] < num_splits) & hmask[None, :]
    lse_all = tl.load(lse_ptr + ((every[:, None] * rows + row) * HQ + heads[None, :]), mask=m_all,
                      other=float("-inf"), cache_modifier=".cg")  # fmt: skip
    top = tl.zeros(heads.shape, tl.float32)
    acc = tl.zeros((heads.shape[0], d.shape[0]), tl.float32)
    total = tl.zeros(heads.shape, tl.float32)
    nan = tl.zeros(heads.shape, tl.int1)  # a split's NaN from the data: the head is NaN
    only_neg_inf = tl.zeros(acc.shape, tl.int1)  # a split had tokens, all scored -inf (its O is NaN)
    for s0 in range(0, num_splits, GROUP):
        lses, parts = _load_group(part_ptr, lse_ptr, row, heads, hmask, d, rows, num_splits, s0, HQ, D, GROUP)
        if s0 == 0:  # the maximum after the first group's loads are issued, not before: one round trip
            top = tl.max(lse_all, 0)
            top = tl.where(top == float("-inf"), 0.0, top)
        acc, total, nan, only_neg_inf = _add_group(acc, total, nan, only_neg_inf, lses, parts, top, GROUP)
    empty = tl.where(only_neg_inf, float("nan"), 0.0)
    merged = tl.where((total > 0.0)[:, None], acc / tl.where(total > 0.0, total, 1.0)[:, None], empty)
    return tl.where(nan[:, None], float("nan"), merged)


@triton.jit(do_not_specialize=["rows", "num_splits"])
def sparse_attention_merge_kernel(
    part_ptr, lse_ptr, gate_ptr, out_ptr, rows, num_splits, s_g_row, s_g_head, s_o_row, s_o_head,
    HQ: tl.constexpr, D: tl.constexpr, GATE: tl.constexpr, MERGE_GROUP: tl.constexpr,
    BLOCK_D: tl.constexpr = 0, PDL: tl.constexpr = False, SIGMOID: tl.constexpr = SIGMOID,
):  # fmt: skip
    """The second launch of a split without ``FIXUP``, grid ``(rows, HQ, D // BLOCK_D)``: one (row, head,
    ``BLOCK_D`` columns; 0: all ``D``), :func:`_merge_splits`. ``PDL``: launched as a programmatic dependent
    of the partial kernel, it loads the gate, then waits for the partials."""
    row = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) + tl.arange(0, 1)
    hmask = heads < HQ
    BD: tl.constexpr = D if BLOCK_D == 0 else BLOCK_D
    d = tl.program_id(2) * BD + tl.arange(0, BD)
    g_val = _load_gate(gate_ptr, row, heads, d, hmask, s_g_row, s_g_head, GATE)
    if PDL:
        tl.extra.cuda.gdc_wait()
    o = _merge_splits(part_ptr, lse_ptr, row, heads, hmask, d, rows, num_splits, HQ, D, MERGE_GROUP)
    _store_heads(o, g_val, out_ptr, row, heads, d, hmask, s_o_row, s_o_head, GATE, SIGMOID)
