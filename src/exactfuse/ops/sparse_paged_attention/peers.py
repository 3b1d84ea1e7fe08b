"""Baselines timed beside ``sparse_paged_attention`` (built from torch itself):

- ``gather-sdpa``: what a PyTorch user writes without a kernel: map the indices to cache slots, gather
  the selected K/V, ``scaled_dot_product_attention`` with a mask of the valid entries (GQA through
  ``enable_gqa``), then the gate; all of it timed.
- ``dense-sdpa``: attention over each request's whole context (what a model without sparsity runs), from
  a dense ``[requests, Hkv, context, D]`` copy of the cache made outside the timing. It computes another
  function, so the bench reports it as inexact; its time is the point.
"""

from __future__ import annotations

import torch.nn.functional as F

from exactfuse.bench.peers import PeerAdapter, PreparedCall, cuda_only, register_peer
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


def _dense_sdpa(args: tuple, kwargs: dict) -> PreparedCall:
    a = _named(args, kwargs)
    q, k_cache, v_cache, out, table = a["q"], a["k_cache"], a["v_cache"], a["out"], a["block_table"]
    rows, Hq, D = q.shape
    reqs = table.shape[0]
    per_req = rows // reqs
    context = int(((table >= 0) & (table < k_cache.shape[0])).sum(1).min()) * k_cache.shape[1]
    pages = table[:, : context // k_cache.shape[1]].long()
    # [reqs, pages, page, Hkv, D] -> [reqs, Hkv, context, D]
    k = k_cache[pages].flatten(1, 2).transpose(1, 2).contiguous()
    v = v_cache[pages].flatten(1, 2).transpose(1, 2).contiguous()

    def call():
        qr = q[: reqs * per_req].view(reqs, per_req, Hq, D).transpose(1, 2)
        attn = F.scaled_dot_product_attention(qr, k, v, scale=a["scale"], enable_gqa=True)
        gated = apply_gate(attn.transpose(1, 2).reshape(-1, Hq, D), a["output_gate"], a["gate_rounding"])
        out[: reqs * per_req].copy_(gated)

    return call


def _dense_accepts(*args, **kwargs) -> bool | str:
    a = _named(args, kwargs)
    if (reason := _bf16_cache(*args, **kwargs)) is not True:
        return reason
    rows, reqs = a["q"].shape[0], a["block_table"].shape[0]
    return True if reqs and rows % reqs == 0 else "rows not spread evenly over the requests"


register_peer(PeerAdapter("gather-sdpa", "sparse_paged_attention", cuda_only, _gather_sdpa, _bf16_cache))
register_peer(PeerAdapter("dense-sdpa", "sparse_paged_attention", cuda_only, _dense_sdpa, _dense_accepts))
