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
    step = max(1, _GATHER_ELEMENTS // max(1, W * Hkv * D))
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


def _is_power_of_2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def check_sparse_paged_attention(
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
    """Raise ``ValueError`` / ``TypeError`` naming the argument when the call is not well formed."""
    name = "sparse_paged_attention"
    if q.dim() != 3:
        raise ValueError(f"{name}: q must be [rows, Hq, D], got {_shape(q)}")
    rows, Hq, D = q.shape
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"{name}: q must be bfloat16 or float16, got {q.dtype}")
    for arg, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(f"{name}: {arg} must be [pages, page_size, Hkv, D], got {_shape(t)}")
        if t.dtype not in (q.dtype, *FP8_DTYPES):
            raise TypeError(f"{name}: {arg} must be {q.dtype} (q's dtype) or float8_e4m3fn/e5m2, got {t.dtype}")
        if t.stride(-1) != 1 and t.numel():
            raise ValueError(f"{name}: {arg} must have last stride 1, got strides {tuple(t.stride())}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"{name}: v_cache must have k_cache's shape {_shape(k_cache)}, got {_shape(v_cache)}")
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"{name}: v_cache must have k_cache's dtype {k_cache.dtype}, got {v_cache.dtype}")
    _, page_size, Hkv, Dk = k_cache.shape
    if Dk != D:
        raise ValueError(f"{name}: k_cache head size {Dk} differs from q's D = {D}")
    if not _is_power_of_2(D) or D < 16:
        raise ValueError(f"{name}: q's head size D must be a power of two >= 16, got {D}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"{name}: q's heads Hq = {Hq} must be a multiple of the cache's heads Hkv = {Hkv}")
    if page_size == 0:
        raise ValueError(f"{name}: k_cache's page_size (dim 1) must be >= 1")
    if out.shape != q.shape or out.dtype != q.dtype:
        raise ValueError(f"{name}: out must be {q.dtype} {_shape(q)} like q, got {out.dtype} {_shape(out)}")
    if out.stride(-1) != 1 and out.numel():
        raise ValueError(f"{name}: out must have last stride 1, got strides {tuple(out.stride())}")
    if q.stride(-1) != 1 and q.numel():
        raise ValueError(f"{name}: q must have last stride 1, got strides {tuple(q.stride())}")
    if logical_indices.dim() != 2 or logical_indices.shape[0] != rows:
        raise ValueError(f"{name}: logical_indices must be [rows = {rows}, W], got {_shape(logical_indices)}")
    if block_table.dim() != 2:
        raise ValueError(f"{name}: block_table must be [requests, max_pages], got {_shape(block_table)}")
    if token_to_req.shape != (rows,):
        raise ValueError(f"{name}: token_to_req must be [rows = {rows}], got {_shape(token_to_req)}")
    if counts is not None and counts.shape != (rows,):
        raise ValueError(f"{name}: counts must be [rows = {rows}], got {_shape(counts)}")
    for arg, t in (("logical_indices", logical_indices), ("block_table", block_table),
                   ("token_to_req", token_to_req), ("counts", counts)):  # fmt: skip
        if t is None:
            continue
        if t.dtype != torch.int32:
            raise TypeError(f"{name}: {arg} must be int32, got {t.dtype}")
        if t.stride(-1) != 1 and t.numel():
            raise ValueError(f"{name}: {arg} must have last stride 1, got strides {tuple(t.stride())}")
    if output_gate is not None:
        if output_gate.shape != q.shape or output_gate.dtype != q.dtype:
            raise ValueError(
                f"{name}: output_gate must be {q.dtype} {_shape(q)} like q, got {output_gate.dtype} "
                f"{_shape(output_gate)}"
            )
        if output_gate.stride(-1) != 1 and output_gate.numel():
            raise ValueError(f"{name}: output_gate must have last stride 1, got strides {tuple(output_gate.stride())}")
    if gate_rounding not in GATE_ROUNDINGS:
        raise ValueError(f"{name}: gate_rounding must be one of {GATE_ROUNDINGS}, got {gate_rounding!r}")
    fp8 = k_cache.dtype in FP8_DTYPES
    for arg, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        if fp8 and value is None:
            raise ValueError(f"{name}: {arg} is required with a {k_cache.dtype} cache")
        if not fp8 and value is not None:
            raise ValueError(f"{name}: {arg} is only for float8 caches; the cache is {k_cache.dtype}")
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name}: {arg} must be a positive float, got {value!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError(f"{name}: scale must be a positive float, got {scale!r}")
    device = q.device
    tensors = (out, k_cache, v_cache, logical_indices, block_table, token_to_req, counts, output_gate)
    for t in tensors:  # a loop, not any() over a generator: 1.4 µs less a call (CPU machine, timeit)
        if t is not None and t.device != device:
            devices = sorted({str(t.device) for t in (q, *tensors) if t is not None})
            raise ValueError(f"{name}: all tensors must be on one device, got {devices}")
