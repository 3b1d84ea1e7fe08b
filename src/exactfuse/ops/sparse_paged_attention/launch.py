"""The host side of ``sparse_paged_attention``'s Triton provider: the launcher (the configuration from
``heuristics.py``, the split partials and arrival counters allocated, the partial kernel of ``partial_kernel.py``
and the merge kernel of ``merge_kernel.py`` launched), the provider function with the spec's signature, and what
the kernels take (the provider's ``supports_args``)."""

from __future__ import annotations

import torch

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.fastmath import SIGMOID, chosen_formula
from exactfuse.ops.sparse_paged_attention import heuristics
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.ops.sparse_paged_attention.merge_kernel import (
    MAX_MERGE_GROUP,
    MERGE_GROUP,
    sparse_attention_merge_kernel,
)
from exactfuse.ops.sparse_paged_attention.native import FP8_DTYPES
from exactfuse.ops.sparse_paged_attention.partial_kernel import sparse_attention_partial_kernel
from exactfuse.registry import platform
from exactfuse.utils import compute_capability, empty, num_sms

LOG2E = 1.4426950408889634
GATES = {None: 0, "fused": 1, "eager": 2}


def _even(t: torch.Tensor) -> bool:
    """Whether ``t``'s address and its page, slot and head strides are even: its fp8 rows can be read as
    16-bit pairs (``partial_kernel._fp8_pairs_as_fp16``)."""
    return t.data_ptr() % 2 == 0 and all(s % 2 == 0 for s in t.stride()[:3])


def launch_sparse_paged_attention(
    out: torch.Tensor,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    logical_indices: torch.Tensor,
    block_table: torch.Tensor,
    token_to_req: torch.Tensor,
    counts: torch.Tensor | None,
    scale: float | None,
    output_gate: torch.Tensor | None,
    gate_rounding: str,
    k_scale: float | None,
    v_scale: float | None,
    config: AttentionConfig | None = None,
) -> None:
    """Launch the kernels with ``config`` (default: ``heuristics.attention_config``) into ``out``."""
    rows, Hq, D = q.shape
    if rows == 0:
        return
    num_pages, page_size, Hkv, _ = k_cache.shape
    W = logical_indices.shape[1]
    if config is None:
        config = heuristics.attention_config(rows, Hkv, D, W, num_sms(q.device), k_cache.element_size())
    fp8 = k_cache.dtype in FP8_DTYPES
    qk_scale = (D**-0.5 if scale is None else scale) * LOG2E * (k_scale if fp8 else 1.0)
    out_scale = v_scale if fp8 else 1.0
    splits = config.num_splits
    fixup = splits > 1 and config.fixup
    merge_launch = splits > 1 and not fixup
    # grid dependency control: SM 9.0+ (the interpreter has none)
    pdl = merge_launch and config.pdl and q.is_cuda and compute_capability(q.device) >= (9, 0)
    if splits > 1:
        part = empty((splits, rows, Hq, D), torch.float32, q.device)
        lse = empty((splits, rows, Hq), torch.float32, q.device)
    else:
        part, lse = out, out  # not read: the SPLIT branch is compiled out
    counters = arrival_counters(q.device, rows * Hkv) if fixup else lse  # placeholder when not FIXUP
    gate = q if output_gate is None else output_gate  # a placeholder pointer with q's dtype when GATE = 0
    gate_code = GATES[None if output_gate is None else gate_rounding]
    # the eager gate rounds torch.sigmoid(gate) to out's dtype: a proven 16-bit formula where gate has it too
    sigmoid = SIGMOID
    if gate_code == GATES["eager"] and output_gate.dtype == out.dtype:
        sigmoid = chosen_formula("sigmoid", out.dtype, q.device)
    G = Hq // Hkv
    torch.library.wrap_triton(sparse_attention_partial_kernel)[(rows, Hkv, splits)](
        q, k_cache, v_cache, logical_indices, logical_indices if counts is None else counts, block_table,
        token_to_req, gate, out, part, lse, counters,
        rows, block_table.shape[0], block_table.shape[1], num_pages, page_size, W, splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        logical_indices.stride(0), block_table.stride(0), gate.stride(0), gate.stride(1),
        out.stride(0), out.stride(1), qk_scale, out_scale,
        G=G, HQ=Hq, D=D, BLOCK_M=heuristics.block_m(G), BLOCK_N=config.block_n,
        HAS_COUNTS=counts is not None, GATE=0 if splits > 1 and not fixup else gate_code,
        SPLIT=splits > 1, FIXUP=fixup, PV_FP16=fp8, V_PAIRS=fp8 and _even(v_cache),
        PREFETCH_SLOTS=config.prefetch_slots, MERGE_GROUP=MERGE_GROUP, PDL=pdl, SIGMOID=sigmoid,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if merge_launch:
        group = MERGE_GROUP if config.merge_group is None else min(config.merge_group, MAX_MERGE_GROUP)
        block_d = min(D, config.merge_block_d or D)
        # the column split and PDL only when asked: the kernel's defaults are the plain merge (and
        # probe attention_read_floor swaps in an empty kernel of that signature)
        shape = {"BLOCK_D": block_d} if block_d < D else {}
        launch = {"PDL": True, "launch_pdl": True} if pdl else {}
        torch.library.wrap_triton(sparse_attention_merge_kernel)[(rows, Hq, D // block_d)](
            part, lse, gate, out, rows, splits, gate.stride(0), gate.stride(1), out.stride(0), out.stride(1),
            HQ=Hq, D=D, GATE=gate_code, MERGE_GROUP=group, SIGMOID=sigmoid, num_warps=config.merge_warps, **shape,
            **launch,
        )  # fmt: skip


def sparse_paged_attention_triton(
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
    launch_sparse_paged_attention(
        out, q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts, scale, output_gate,
        gate_rounding, k_scale, v_scale,
    )  # fmt: skip


# ------------------------------------------------------------------ what the kernels take (supports_args)
MAX_GROUP = 16  # query heads per KV head the kernel takes (one [16, D] dot tile)
MAX_HEAD_DIM = 256


def triton_supports(
    out, q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts=None, scale=None,
    output_gate=None, gate_rounding="fused", k_scale=None, v_scale=None,
) -> bool | str:  # fmt: skip
    """True, or why the kernels cannot take these arguments."""
    for name, t in (("q", q), ("k_cache", k_cache)):
        if (reason := platform.triton_reads(name, t)) is not True:
            return reason
    if k_cache.is_cpu and k_cache.dtype in FP8_DTYPES:
        return "float8 caches on the CPU: the Triton interpreter has no float8 arithmetic"
    if k_cache.dtype == torch.float8_e4m3fn and k_cache.is_cuda and compute_capability(k_cache.device) < (8, 9):
        return "float8_e4m3fn caches need an SM 8.9+ GPU (use float8_e5m2)"
    G = q.shape[1] // k_cache.shape[2]
    if G > MAX_GROUP:
        return f"{G} query heads per KV head: the kernel takes at most {MAX_GROUP}"
    if q.shape[2] > MAX_HEAD_DIM:
        return f"head size {q.shape[2]}: the kernel takes at most {MAX_HEAD_DIM}"
    return True
