"""The split-K partial kernel of ``sparse_paged_attention`` (the gate and the LSE merge are
``merge_kernel.py``'s; ``launch.py`` launches both).

Partial kernel, grid ``(rows, Hkv, num_splits)``: program ``(row, g, s)`` takes the ``G = Hq // Hkv``
query heads of KV head ``g`` as one ``[BLOCK_M, D]`` tile (heads past ``G`` masked) and the row's token
tiles ``s, s + num_splits, ...`` of ``BLOCK_N`` entries each. Per tile it maps entries to cache slots
(``native.physical_slots``' rule), gathers ``K``, ``V`` ``[BLOCK_N, D]`` (invalid entries read as zeros
and are masked out of the softmax) and runs an online softmax in the log2 domain: ``m`` starts at the
finite ``-1e20``, so a tile without a valid entry leaves the state as it was, never NaN. ``P`` is rounded
to ``V``'s compute dtype (``q``'s; fp16 for fp8 ``V``) for the ``P @ V`` dot, ``l`` sums the fp32 ``P``.

- ``num_splits == 1`` (``SPLIT`` off): the program normalizes, rounds to ``q``'s dtype, applies the gate
  and stores ``out``.
- ``SPLIT``: it stores ``O = acc / l * v_scale`` (fp32) and ``lse2 = m + log2(l)`` (``-inf`` without a
  valid token or when all of them score ``-inf``; ``O`` is then 0, or NaN) into
  ``partial_out [num_splits, rows, Hq, D]`` and ``partial_lse [num_splits, rows, Hq]``; every split
  writes its slot. The merge launch (``merge_kernel.sparse_attention_merge_kernel``; its launch shape and a
  programmatic dependent launch are ``AttentionConfig``'s, the bits the same) combines them; with ``FIXUP``
  the last split of each (row, KV head) to arrive does that merge for its heads in the same launch
  (arrival counters, as W4A16's split-K), and there is no second launch.

The gate stage is bit for bit the declared formula on the rounded attention (``merge_kernel.py``). Offsets into
the caches and the partials are int64; ``rows``, request, page and split counts are runtime arguments (not
specialized).
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.fastmath import SIGMOID
from exactfuse.ops.sparse_paged_attention.merge_kernel import _load_gate, _merge_splits, _store_heads


@triton.jit
def _fp8_pairs_as_fp16(head, rows, valid, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """The fp8 ``[BLOCK_N, D]`` tile at element offsets ``rows`` (even) from ``head`` (even), read as
    ``D // 2`` 16-bit pairs a row and widened to fp16 (exact) in the load's own layout.

    ``P @ V`` takes ``V`` as its B operand, whose K dimension (tokens) is not the contiguous one: a 16-bit
    tile goes through shared memory to ``ldmatrix`` (transposing), but an fp8 tile loaded as such is
    widened after that copy and read back a byte at a time (64 ``LDS.U8`` a thread a tile at block_n 64,
    D 128, against none here; 154 registers against 128, sm_90a SASS). The join of the two halves is
    what keeps the compiler from moving the widening past the copy."""
    fp8 = head.dtype.element_ty
    w = tl.arange(0, D // 2)
    pairs = tl.load(
        head.to(tl.pointer_type(tl.uint16)) + (rows // 2)[:, None] + w[None, :], mask=valid[:, None], other=0
    )
    lo = (pairs & 0xFF).to(tl.uint8).to(fp8, bitcast=True).to(tl.float16)
    hi = (pairs >> 8).to(tl.uint8).to(fp8, bitcast=True).to(tl.float16)
    return tl.reshape(tl.join(lo, hi), (BLOCK_N, D))


@triton.jit
def _tile_slots(idx_row, table_row, t, limit, req, num_requests, max_pages, num_pages, page_size,
                BLOCK_N: tl.constexpr):  # fmt: skip
    """Tile ``t``'s entries of a row (``idx_row``: its logical indices, ``table_row``: its request's page
    table row) -> ``(page, slot)`` as int64 (0 where not valid) and which entries are valid tokens. A tile
    past ``limit`` is all invalid and reads nothing."""
    cols = t * BLOCK_N + tl.arange(0, BLOCK_N)
    tok = tl.load(idx_row + cols, mask=cols < limit, other=-1)
    pos = tl.maximum(tok, 0)
    lpage = pos // page_size
    req_v = tl.zeros_like(tok) + req  # a vector: a scalar mask term breaks the interpreter's masked load
    valid = (req_v >= 0) & (req_v < num_requests) & (tok >= 0) & (lpage < max_pages)
    page = tl.load(table_row + tl.minimum(lpage, max_pages - 1), mask=valid, other=-1)
    valid = valid & (page >= 0) & (page < num_pages)
    page64 = tl.where(valid, page, 0).to(tl.int64)
    slot64 = tl.where(valid, pos - lpage * page_size, 0).to(tl.int64)
    return page64, slot64, valid


@triton.jit(do_not_specialize=["num_requests", "max_pages", "num_pages", "rows", "num_splits"])
def sparse_attention_partial_kernel(
    q_ptr, k_ptr, v_ptr, idx_ptr, counts_ptr, table_ptr, req_ptr, gate_ptr, out_ptr, part_ptr, lse_ptr, count_ptr,
    rows, num_requests, max_pages, num_pages, page_size, W, num_splits,
    s_q_row, s_q_head, s_k_page, s_k_slot, s_k_head, s_v_page, s_v_slot, s_v_head,
    s_idx_row, s_table_row, s_g_row, s_g_head, s_o_row, s_o_head,
    qk_scale, out_scale,
    G: tl.constexpr, HQ: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_COUNTS: tl.constexpr, GATE: tl.constexpr, SPLIT: tl.constexpr, FIXUP: tl.constexpr,
    PV_FP16: tl.constexpr, V_PAIRS: tl.constexpr, PREFETCH_SLOTS: tl.constexpr, MERGE_GROUP: tl.constexpr,
    PDL: tl.constexpr = False, SIGMOID: tl.constexpr = SIGMOID,
):  # fmt: skip
    """Pointers: q/gate/out ``[rows, Hq, D]``, k/v ``[pages, page_size, Hkv, D]`` (last strides 1),
    idx ``[rows, W]``, counts ``[rows]``, table ``[requests, max_pages]``, req ``[rows]`` (int32);
    part/lse the fp32 partials (``SPLIT``); count ``[rows * Hkv]`` int32 arrival counters, zero on entry
    and left zero (``FIXUP``). ``qk_scale = scale * log2(e) [* k_scale]``, ``out_scale`` =
    ``v_scale`` (1 for bf16/fp16 caches). ``PDL``: the merge launch that follows may start now (it waits
    for this grid's partials before reading them)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0)
    g = tl.program_id(1)
    s = tl.program_id(2)
    row64 = row.to(tl.int64)
    m_off = tl.arange(0, BLOCK_M)
    heads = g * G + m_off
    hmask = m_off < G
    d = tl.arange(0, D)
    q = tl.load(q_ptr + row64 * s_q_row + heads[:, None] * s_q_head + d[None, :], mask=hmask[:, None], other=0.0)

    req = tl.load(req_ptr + row)
    table_row = table_ptr + tl.minimum(tl.maximum(req, 0), num_requests - 1).to(tl.int64) * s_table_row
    limit = W
    if HAS_COUNTS:
        limit = tl.minimum(tl.maximum(tl.load(counts_ptr + row), 0), W)
    num_tiles = tl.cdiv(limit, BLOCK_N)

    m = tl.full((BLOCK_M,), -1.0e20, tl.float32)
    l_sum = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    any_valid = tl.zeros((BLOCK_N,), tl.int1)  # summed after the loop: a sum in it is a barrier a tile
    k_head = k_ptr + g.to(tl.int64) * s_k_head
    v_head = v_ptr + g.to(tl.int64) * s_v_head
    idx_row = idx_ptr + row64 * s_idx_row
    if PREFETCH_SLOTS:
        page64, slot64, valid = _tile_slots(idx_row, table_row, s, limit, req, num_requests, max_pages, num_pages,
                                            page_size, BLOCK_N)  # fmt: skip
    for t in range(s, num_tiles, num_splits):
        if PREFETCH_SLOTS:  # the next tile's slots, loaded while this one is computed (all masked past the end)
            page_next, slot_next, valid_next = _tile_slots(
                idx_row, table_row, t + num_splits, limit, req, num_requests, max_pages, num_pages, page_size, BLOCK_N
            )
        else:
            page64, slot64, valid = _tile_slots(idx_row, table_row, t, limit, req, num_requests, max_pages,
                                                num_pages, page_size, BLOCK_N)  # fmt: skip
        any_valid = any_valid | valid
        k = tl.load(
            k_head + (page64 * s_k_page + slot64 * s_k_slot)[:, None] + d[None, :], mask=valid[:, None], other=0.0
        )
        if PV_FP16 and q.dtype == tl.bfloat16:
            # fp8 -> fp16 -> fp32 -> bf16, each step exact: the direct fp16 -> bf16 conversion (F2F.BF16.F16)
            # runs on the narrow conversion pipe, 64 a thread a tile at block_n 64, D 128 (sm_90a SASS)
            k = k.to(tl.float16).to(tl.float32)
        scores = tl.dot(q, tl.trans(k.to(q.dtype))) * qk_scale
        scores = tl.where(valid[None, :], scores, -1.0e20)
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.where(valid[None, :], tl.exp2(scores - m_new[:, None]), 0.0)
        v_rows = page64 * s_v_page + slot64 * s_v_slot
        if PV_FP16 and V_PAIRS:  # fp8 V, widened in the load's layout
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), _fp8_pairs_as_fp16(v_head, v_rows, valid, BLOCK_N, D))
        else:
            v = tl.load(v_head + v_rows[:, None] + d[None, :], mask=valid[:, None], other=0.0)
            if PV_FP16:  # fp8 V: fp16 holds it exactly
                acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v.to(tl.float16))
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype))
        l_sum = l_sum * alpha + tl.sum(p, 1)
        m = m_new
        if PREFETCH_SLOTS:
            page64, slot64, valid = page_next, slot_next, valid_next

    # l = 0: no valid token (zeros), or only scores of -inf (NaN, as eager softmax gives); NaN stays NaN
    empty = l_sum == 0.0
    none = tl.where(tl.max(any_valid.to(tl.int32), 0) > 0, float("nan"), 0.0)
    o = tl.where(empty[:, None], none, acc * (out_scale / tl.where(empty, 1.0, l_sum))[:, None])
    if SPLIT:
        part_row = (s * rows + row64) * HQ + heads
        tl.store(part_ptr + part_row[:, None] * D + d[None, :], o, mask=hmask[:, None])
        lse = tl.where(empty, float("-inf"), m + tl.log2(l_sum))  # its O tells no token (0) from all -inf (NaN)
        tl.store(lse_ptr + part_row, lse, mask=hmask)
        if FIXUP:
            # The merge in this launch: the last of the (row, KV head)'s splits to arrive merges them all,
            # in split order, so the result does not depend on which one arrives last. The barrier
            # orders every thread's partial before the arrival (released at GPU scope); the partials
            # are read past L1 (.cg) after the acquire.
            tl.debug_barrier()
            counter = count_ptr + row * tl.num_programs(1) + g
            arrived = tl.atomic_add(counter, 1, sem="acq_rel")
            if arrived == num_splits - 1:
                o = _merge_splits(part_ptr, lse_ptr, row64, heads, hmask, d, rows, num_splits, HQ, D, MERGE_GROUP)
                tl.atomic_xchg(counter, 0)  # zero for the next launch
                g_val = _load_gate(gate_ptr, row64, heads, d, hmask, s_g_row, s_g_head, GATE)
                _store_heads(o, g_val, out_ptr, row64, heads, d, hmask, s_o_row, s_o_head, GATE, SIGMOID)
    else:
        g_val = _load_gate(gate_ptr, row64, heads, d, hmask, s_g_row, s_g_head, GATE)
        _store_heads(o, g_val, out_ptr, row64, heads, d, hmask, s_o_row, s_o_head, GATE, SIGMOID)
