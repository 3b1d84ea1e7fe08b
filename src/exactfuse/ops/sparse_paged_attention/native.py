"""Spec of ``sparse_paged_attention``: top-k sparse paged GQA attention with a sigmoid output gate.

One query row attends to the tokens its ``logical_indices`` row names, read from a paged KV cache
(docs/sparse_attention.md):

- entry ``col < counts[row]`` (all ``W`` entries without ``counts``) of ``logical_indices[row]`` is a
  logical position ``p`` in request ``req = token_to_req[row]``, ``-1`` (or any negative) = no token;
- ``p`` lives in physical page ``block_table[req, p // page_size]`` at slot ``p % page_size``; a request
  out of range (a padding row), a logical page past the table or a physical page out of the cache make
  the entry "no token";
- query head ``h`` reads KV head ``h // (Hq // Hkv)``.

What it computes, per row and query head, where the eager code it replaces rounds:

1. scores ``s = scale * q . k`` in fp32 over the row's valid tokens (fp8 caches: ``k`` dequantized as
   ``fp32(k) * k_scale``, ``v`` as ``fp32(v) * v_scale``);
2. ``attn = rnd(softmax_fp32(s) @ fp32(v))``, rounded to ``q``'s dtype; a row without a valid token
   gives zeros;
3. the gate, with ``g = output_gate[row, h]``: ``gate_rounding="fused"`` gives
   ``rnd(fp32(attn) * sigmoid_fp32(g))`` (one rounding, the fused kernel's), ``"eager"`` gives
   ``rnd(attn * rnd(sigmoid(g)))`` (what ``attn * torch.sigmoid(gate)`` computes in bf16, as Hugging
   Face gated attention does); no gate: ``attn``.

The result is written into ``out`` ``[rows, Hq, D]`` (``exactfuse.sparse_paged_attention`` allocates it
when the caller passes none).
"""

from __future__ import annotations

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
GATE_ROUNDINGS = ("fused", "eager")
_GATHER_ELEMENTS = 1 << 26  # rows per gather chunk: at most this many gathered K elements at a time
# under torch.compile Dynamo unrolls the chunk loop and the compile time grows with the chunks, so the
# compiled spec (the bench's native-compiled) gathers 4x more at a time (docs/sparse_attention.md, Bench)
_GATHER_ELEMENTS_COMPILED = 1 << 28


def physical_slots(
    logical_indices: torch.Tensor,
    block_table: torch.Tensor,
    token_to_req: torch.Tensor,
    counts: torch.Tensor | None,
    page_size: int,
    num_pages: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(page, slot, valid)`` ``[rows, W]`` int64/int64/bool for each entry (``page = slot = 0`` where not valid)."""
    rows, W = logical_indices.shape
    reqs, max_pages = block_table.shape
    tok = logical_indices.to(torch.int64)
    req = token_to_req.to(torch.int64)[:, None]
    valid = (tok >= 0) & (req >= 0) & (req < reqs)
    if counts is not None:
        valid &= torch.arange(W, device=tok.device)[None, :] < counts.to(torch.int64)[:, None]
    pos = tok.clamp(min=0)
    logical_page, slot = pos // page_size, pos % page_size
    valid &= logical_page < max_pages
    table_row = req.clamp(0, max(reqs - 1, 0)).expand(rows, W)
    page = torch.zeros_like(tok)
    if reqs and max_pages:
        page = block_table[table_row, logical_page.clamp(max=max_pages - 1)].to(torch.int64)
    valid &= (page >= 0) & (page < num_pages)
    zero = torch.zeros_like(tok)
    return torch.where(valid, page, zero), torch.where(valid, slot, zero), valid


def _gather(cache: torch.Tensor, page: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """``cache[page, slot]``; float8 caches are indexed as bytes (indexing kernels do not take float8)."""
    if cache.dtype in FP8_DTYPES:
        return cache.view(torch.uint8)[page, slot].view(cache.dtype)
    return cache[page, slot]


def attention_rows(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    logical_indices: torch.Tensor,
    block_table: torch.Tensor,
    token_to_req: torch.Tensor,
    counts: torch.Tensor | None,
    scale: float | None,
    k_scale: float | None,
    v_scale: float | None,
    compute: torch.dtype,
) -> torch.Tensor:
    """The unrounded attention ``[rows, Hq, D]`` in ``compute`` (fp32: the spec; fp64: the reference)."""
    rows, Hq, D = q.shape
    num_pages, page_size, Hkv, _ = k_cache.shape
    G = Hq // Hkv
    scale = D**-0.5 if scale is None else scale
    fp8 = k_cache.dtype in FP8_DTYPES
    out = torch.zeros((rows, Hq, D), dtype=compute, device=q.device)
    W = logical_indices.shape[1]
    budget = _GATHER_ELEMENTS_COMPILED if torch.compiler.is_compiling() else _GATHER_ELEMENTS
    step = max(1, budget // max(1, W * Hkv * D))
    for start in range(0, rows, step):
        r = slice(start, min(start + step, rows))
        page, slot, valid = physical_slots(
            logical_indices[r], block_table, token_to_req[r], None if counts is None else counts[r],
            page_size, num_pages,
        )  # fmt: skip
        keep = valid[:, :, None, None]  # entries without a token read zeros (never the slot 0 stands for)
        k = torch.where(keep, _gather(k_cache, page, slot).to(compute), 0.0)  # [r, W, Hkv, D]
        v = torch.where(keep, _gather(v_cache, page, slot).to(compute), 0.0)
        if fp8:
            k, v = k * k_scale, v * v_scale
        qr = q[r].to(compute).reshape(-1, Hkv, G, D)
        s = torch.einsum("rhgd,rwhd->rhgw", qr, k) * scale
        s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
        # a row without a valid token gives zeros (its softmax is all NaN); NaN from the data stays NaN
        p = torch.where(valid.any(-1)[:, None, None, None], torch.softmax(s, dim=-1), 0.0)
        out[r] = torch.einsum("rhgw,rwhd->rhgd", p, v).reshape(-1, Hq, D)
    return out


def apply_gate(attn: torch.Tensor, output_gate: torch.Tensor | None, gate_rounding: str) -> torch.Tensor:
    """The gate stage on the rounded attention ``attn``, exactly as the op declares it."""
    if output_gate is None:
        return attn
    if gate_rounding == "eager":
        return attn * torch.sigmoid(output_gate)
    return (attn.float() * torch.sigmoid(output_gate.float())).to(attn.dtype)


def sparse_paged_attention(
    out: torch.Tensor,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    logical_indices: torch.Tensor,
    block_table: torch.Tensor,
    token_to_req: torch.Tensor,
    counts: torch.Tensor | None = None,
    scale: float | None = None,
    output_gate: torch.Tensor | None = None,
    gate_rounding: str = "fused",
    k_scale: float | None = None,
    v_scale: float | None = None,
) -> None:
    """Sparse paged attention into ``out`` (see the module docstring).

    Shapes: ``q``, ``out``, ``output_gate`` ``[rows, Hq, D]``; ``k_cache``, ``v_cache``
    ``[pages, page_size, Hkv, D]``; ``logical_indices`` ``[rows, W]``, ``block_table`` ``[reqs, max_pages]``,
    ``token_to_req`` ``[rows]``, ``counts`` ``[rows]``, all int32.
    """
    if q.shape[0] == 0:
        return
    attn = attention_rows(
        q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts, scale, k_scale, v_scale,
        torch.float32,
    ).to(q.dtype)  # fmt: skip
    out.copy_(apply_gate(attn, output_gate, gate_rounding))


def reference64(
    out, q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts=None, scale=None,
    output_gate=None, gate_rounding="fused", k_scale=None, v_scale=None,
) -> torch.Tensor:  # fmt: skip
    """float64 attention with the float64 gate: the contract's reference."""
    attn = attention_rows(
        q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts, scale, k_scale, v_scale,
        torch.float64,
    )  # fmt: skip
    return attn if output_gate is None else attn * torch.sigmoid(output_gate.double())


def sparse_paged_attention_fake(*args) -> None:
    """Fake (meta) kernel: the op writes ``out`` and returns nothing."""
    return None
