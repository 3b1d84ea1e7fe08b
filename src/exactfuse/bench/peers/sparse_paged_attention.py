"""Baselines timed beside ``sparse_paged_attention`` (built from torch itself):

- ``gather-sdpa``: what a PyTorch user writes without a kernel: map the indices to cache slots, gather
  the selected K/V, ``scaled_dot_product_attention`` with a mask of the valid entries (GQA through
  ``enable_gqa``), then the gate; all of it timed.
- ``gather-sdpa-compiled``: the same steps under ``torch.compile`` (static shapes), the gather as one
  index into the cache viewed as ``[pages * page_size, Hkv, D]``: what a PyTorch user who compiles writes,
  the block table to slot computation included in the timed call.
- ``dense-sdpa``: attention over each request's whole context (what a model without sparsity runs), from
  a dense ``[requests, Hkv, context, D]`` copy of the cache made outside the timing. It computes another
  function, so the bench reports it as inexact; its time is the point.
- ``flex-attention``: ``torch.compile(flex_attention)`` over the same dense copy with a block mask of each
  row's selected positions, mask built outside the timing (favouring it), in its faster form on the case:
  ``enable_gqa``, or each K/V head's query heads folded into the query axis. A position a row selects twice
  counts once there, so where rows repeat positions the bench reports it as inexact.
"""

from __future__ import annotations

import torch.nn.functional as F

from exactfuse.bench.peers import PeerAdapter, PreparedCall, cuda_only, fastest, register_peer
from exactfuse.ops.sparse_paged_attention.native import FP8_DTYPES, apply_gate, physical_slots


def _named(args: tuple, kwargs: dict) -> dict:
    from exactfuse.ops.sparse_paged_attention import _sparse_paged_attention

    bound = _sparse_paged_attention.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _bf16_cache(*args, **kwargs) -> bool | str:
    a = _named(args, kwargs)
    return True if a["k_cache"].dtype not in FP8_DTYPES else "float8 caches: SDPA takes bf16/fp16 K and V"


def _gather_sdpa(args: tuple, kwargs: dict) -> PreparedCall:
    a = _named(args, kwargs)
    q, k_cache, v_cache, out = a["q"], a["k_cache"], a["v_cache"], a["out"]
    num_pages, page_size = k_cache.shape[:2]

    def call():
        page, slot, valid = physical_slots(
            a["logical_indices"], a["block_table"], a["token_to_req"], a["counts"], page_size, num_pages
        )
        k = k_cache[page, slot].transpose(1, 2)  # [rows, Hkv, W, D]
        v = v_cache[page, slot].transpose(1, 2)
        attn = F.scaled_dot_product_attention(
            q[:, :, None], k, v, attn_mask=valid[:, None, None, :], scale=a["scale"], enable_gqa=True
        )[:, :, 0]
        out.copy_(apply_gate(attn, a["output_gate"], a["gate_rounding"]))

    return call


def _gather_sdpa_compiled(args: tuple, kwargs: dict) -> PreparedCall:
    import torch

    a = _named(args, kwargs)
    q, k_cache, v_cache, out = a["q"], a["k_cache"], a["v_cache"], a["out"]
    num_pages, page_size, Hkv, D = k_cache.shape

    def attend(q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts, output_gate):
        page, slot, valid = physical_slots(logical_indices, block_table, token_to_req, counts, page_size, num_pages)
        flat = page * page_size + slot  # [rows, W]
        k = k_cache.view(-1, Hkv, D)[flat].transpose(1, 2)  # [rows, Hkv, W, D]
        v = v_cache.view(-1, Hkv, D)[flat].transpose(1, 2)
        attn = F.scaled_dot_product_attention(
            q[:, :, None], k, v, attn_mask=valid[:, None, None, :], scale=a["scale"], enable_gqa=True
        )[:, :, 0]
        return apply_gate(attn, output_gate, a["gate_rounding"])

    compiled = torch.compile(attend, dynamic=False, fullgraph=True)
    inputs = (q, k_cache, v_cache, a["logical_indices"], a["block_table"], a["token_to_req"], a["counts"],
              a["output_gate"])  # fmt: skip

    def call():
        out.copy_(compiled(*inputs))

    return call


def _dense_sdpa(args: tuple, kwargs: dict) -> PreparedCall:
    a = _named(args, kwargs)
    q, out = a["q"], a["out"]
    rows, Hq, D = q.shape
    reqs = a["block_table"].shape[0]
    per_req = rows // reqs
    k, v, _ = _dense_context(a)

    def call():
        qr = q[: reqs * per_req].view(reqs, per_req, Hq, D).transpose(1, 2)
        attn = F.scaled_dot_product_attention(qr, k, v, scale=a["scale"], enable_gqa=True)
        gated = apply_gate(attn.transpose(1, 2).reshape(-1, Hq, D), a["output_gate"], a["gate_rounding"])
        out[: reqs * per_req].copy_(gated)

    return call


def _dense_context(a: dict) -> tuple:
    """``(k, v, positions)``: each request's context as dense ``[requests, Hkv, context, D]`` copies and
    its length."""
    k_cache, v_cache, table = a["k_cache"], a["v_cache"], a["block_table"]
    context = int(((table >= 0) & (table < k_cache.shape[0])).sum(1).min()) * k_cache.shape[1]
    pages = table[:, : context // k_cache.shape[1]].long()
    k = k_cache[pages].flatten(1, 2).transpose(1, 2).contiguous()
    v = v_cache[pages].flatten(1, 2).transpose(1, 2).contiguous()
    return k, v, context


def _flex(args: tuple, kwargs: dict) -> PreparedCall:
    """flex_attention's faster form on this case (``peers.fastest``): ``enable_gqa``, or each K/V head's
    group of query heads folded into the query axis (``[requests, Hkv, group * rows, D]``, no GQA), the
    form flex's users write for decoding where its GQA path is slow (a group of 12: 840 µs at rows = 1
    on an H100, against 56 µs at a group of 16; ``benchmarks/results/h100/sparse_paged_attention.csv``)."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    a = _named(args, kwargs)
    q, out, idx = a["q"], a["out"], a["logical_indices"]
    rows, Hq, D = q.shape
    reqs = a["block_table"].shape[0]
    per_req = rows // reqs
    k, v, context = _dense_context(a)
    Hkv = k.shape[1]
    group = Hq // Hkv
    _, _, valid = physical_slots(idx, a["block_table"], a["token_to_req"], a["counts"], a["k_cache"].shape[1],
                                 a["k_cache"].shape[0])  # fmt: skip
    selected = torch.zeros((rows, context), dtype=torch.bool, device=q.device)
    keep = valid & (idx < context)
    selected[torch.arange(rows, device=q.device)[:, None].expand_as(idx)[keep], idx.long()[keep]] = True
    selected = selected[: reqs * per_req].view(reqs, per_req, context)
    attend = torch.compile(flex_attention, dynamic=False)
    heads = q[: reqs * per_req].view(reqs, per_req, Hq, D)

    def finish(attn):  # [reqs, per_req, Hq, D] -> the gate, into out
        out[: reqs * per_req].copy_(apply_gate(attn.reshape(-1, Hq, D), a["output_gate"], a["gate_rounding"]))

    def gqa_mask(b, h, q_idx, kv_idx):
        return selected[b, q_idx, kv_idx]

    gqa_blocks = selected_blocks(selected, 1, gqa_mask)
    q_gqa = heads.transpose(1, 2)

    def with_gqa():
        finish(attend(q_gqa, k, v, block_mask=gqa_blocks, scale=a["scale"], enable_gqa=True).transpose(1, 2))

    forms = {"enable_gqa": with_gqa}
    if group > 1:
        # query row r, head h = j * group + g -> position r * group + g of kv head j's queries
        def folded_mask(b, h, q_idx, kv_idx):
            return selected[b, q_idx // group, kv_idx]

        folded_blocks = selected_blocks(selected, group, folded_mask)
        q_folded = heads.view(reqs, per_req, Hkv, group, D).transpose(1, 2).reshape(reqs, Hkv, per_req * group, D)

        def folded():
            attn = attend(q_folded, k, v, block_mask=folded_blocks, scale=a["scale"])
            finish(attn.view(reqs, Hkv, per_req, group, D).transpose(1, 2))

        forms["group folded into the queries"] = folded
    return fastest(forms)


def selected_blocks(selected, group: int, mask_mod, block: int = 128):
    """flex_attention's ``BlockMask`` over ``selected [requests, rows, context]`` (bool: the positions each
    row attends to) with each row's query repeated ``group`` times (query position ``p`` is row
    ``p // group``), built from ``block`` x ``block`` tiles of it: a tile where every query selects every
    position is full (no ``mask_mod`` in it), one where some query selects some position partial.
    ``create_block_mask`` evaluates ``mask_mod`` on every (query, position) pair, ``requests x rows x group x
    context`` at once: 1.6 billion at 256 rows a request, a group of 12 and a 32k context."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import BlockMask

    reqs, rows, context = selected.shape
    queries = rows * group
    kv_blocks, q_blocks = -(-context // block), -(-queries // block)
    tiles = F.pad(selected, (0, kv_blocks * block - context)).view(reqs, rows, kv_blocks, block)
    # each query position's row; the positions past the last query read a row that selects nothing
    positions = torch.arange(q_blocks * block, device=selected.device)
    positions = torch.where(positions < queries, positions // group, rows)

    def blocks(per_row):  # [reqs, rows, kv blocks] -> [reqs, q blocks, kv blocks], over the block's queries
        per_row = F.pad(per_row, (0, 0, 0, 1))
        return per_row[:, positions].view(reqs, q_blocks, block, kv_blocks)

    full = blocks(tiles.all(-1)).all(2)
    partial = blocks(tiles.any(-1)).any(2) & ~full

    def listed(visit):  # the counts and the indices, visited blocks first, as BlockMask takes them
        order = torch.argsort((~visit).to(torch.int8), dim=-1, stable=True)
        return visit.sum(-1, dtype=torch.int32)[:, None], order.to(torch.int32)[:, None]

    return BlockMask.from_kv_blocks(
        *listed(partial), *listed(full), BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(queries, context)
    )


def _dense_accepts(*args, **kwargs) -> bool | str:
    a = _named(args, kwargs)
    if (reason := _bf16_cache(*args, **kwargs)) is not True:
        return reason
    rows, reqs = a["q"].shape[0], a["block_table"].shape[0]
    return True if reqs and rows % reqs == 0 else "rows not spread evenly over the requests"


_PEERS = (  # (name, prepare, accepts, what the row computes)
    ("gather-sdpa", _gather_sdpa, _bf16_cache,
     "the selected K/V gathered, then SDPA with a mask and the gate (all timed)"),
    ("gather-sdpa-compiled", _gather_sdpa_compiled, _bf16_cache,
     "gather-sdpa's steps under torch.compile (static shapes)"),
    ("dense-sdpa", _dense_sdpa, _dense_accepts,
     "another function: SDPA over each request's whole context (dense copy, untimed)"),
    ("flex-attention", _flex, _dense_accepts,
     "compiled flex_attention over a dense copy with a block mask of the selected positions"),
)  # fmt: skip
for _name, _prepare, _accepts, _computes in _PEERS:
    register_peer(PeerAdapter(_name, "sparse_paged_attention", cuda_only, _prepare, _accepts, computes=_computes))
