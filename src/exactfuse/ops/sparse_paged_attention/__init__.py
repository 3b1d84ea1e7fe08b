"""Declaration of ``sparse_paged_attention``: top-k sparse paged GQA attention with a sigmoid output gate
(docs/sparse_attention.md).

Spec in ``native.py``, argument checks in ``checks.py``, the kernels in ``partial_kernel.py`` (the split-K
partial kernel) and ``merge_kernel.py`` (the LSE merge and the gate), their launcher, the provider and what it
takes in ``launch.py``, the launch rule in ``heuristics.py``, the warmup hook in ``warmup.py``. Inputs,
benchmark grids and cost live in the test kit (``exactfuse.testing.cases.sparse_paged_attention``), baselines
in the bench (``exactfuse.bench.peers``). The op is *opaque* to torch.compile (``custom_op`` + fake): its split
count depends on the row count. It writes ``out``; ``exactfuse.sparse_paged_attention`` allocates ``out`` when
the caller passes none and returns it.
"""

from __future__ import annotations

import torch

from exactfuse.ops.sparse_paged_attention import checks, launch, merge_kernel, native, partial_kernel, warmup
from exactfuse.registry import KeywordOp, op, platform
from exactfuse.registry.contracts import Float64Relative
from exactfuse.utils import empty

# By the float64 rule (docs/contracts.md): relative Frobenius error against the float64 reference at most twice the
# native path's own (native: fp32 scores and softmax, one rounding; the kernel also rounds P to the
# V dtype for the P @ V dot and sums splits through their LSE). fp8 caches: against the dequantized
# float64 reference, the same rule. The gate stage is bit for bit the declared formula on the op's own
# ungated output (tests/ops/test_sparse_paged_attention.py).
CONTRACT = Float64Relative(native.reference64, factor=2.0)
_sparse_paged_attention = op(
    native.sparse_paged_attention,
    contract=CONTRACT,
    check=checks.check_sparse_paged_attention,
    mutates_args=("out",),
    compiler="opaque",
    fake=native.sparse_paged_attention_fake,
    dtypes=(torch.bfloat16, torch.float16),
    warmup=warmup.sparse_paged_attention,
)
_sparse_paged_attention.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=launch.triton_supports,
    kernels=[partial_kernel.sparse_attention_partial_kernel, merge_kernel.sparse_attention_merge_kernel],
)(launch.sparse_paged_attention_triton)


def _sparse_paged_attention_call(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    logical_indices: torch.Tensor,
    block_table: torch.Tensor,
    token_to_req: torch.Tensor,
    *,
    counts: torch.Tensor | None = None,
    scale: float | None = None,
    output_gate: torch.Tensor | None = None,
    gate_rounding: str = "fused",
    k_scale: float | None = None,
    v_scale: float | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    if out is None:
        out = empty(q.shape, q.dtype, q.device)
    _sparse_paged_attention(
        out, q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts, scale, output_gate,
        gate_rounding, k_scale, v_scale,
    )  # fmt: skip
    return out


sparse_paged_attention = KeywordOp(_sparse_paged_attention, _sparse_paged_attention_call)

__all__ = ["CONTRACT", "sparse_paged_attention"]
