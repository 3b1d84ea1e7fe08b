"""Warmup of sparse_paged_attention: the launches ``exactfuse.warmup`` makes so that no kernel compiles inside
a CUDA-graph capture. The op's declaration in ``__init__.py`` takes the hook
(``warmup=warmup.sparse_paged_attention``)."""

from __future__ import annotations

import torch

from exactfuse.ops.sparse_paged_attention import heuristics, launch
from exactfuse.ops.sparse_paged_attention.native import FP8_DTYPES
from exactfuse.utils import num_sms

DEFAULT_LAYER = {"num_heads": 24, "num_kv_heads": 2, "head_dim": 256, "width": 2051}


def warmup_layer(
    device,
    dtype,
    *,
    num_heads,
    num_kv_heads,
    head_dim,
    width,
    kv_dtype=None,
    k_cache=None,
    v_cache=None,
    output_gate=True,
    gate_rounding="fused",
    counts=False,
) -> list:
    """Compile every configuration ``heuristics.attention_config`` reaches for one attention layer.

    Launches the real launcher with each configuration on placeholder rows; ``k_cache``/``v_cache`` (the
    layer's real cache views) give the cache strides, else a K/V-halves cache of one page is used.
    Returns the configurations warmed.
    """  # fmt: skip
    if k_cache is None:
        kv = torch.zeros((2, 16, num_kv_heads, 2 * head_dim), dtype=kv_dtype or dtype, device=device)
        k_cache, v_cache = kv[..., :head_dim], kv[..., head_dim:]
    fp8 = k_cache.dtype in FP8_DTYPES
    rows = 16
    q = torch.zeros((rows, num_heads, head_dim), dtype=dtype, device=device)
    out = torch.empty_like(q)
    gate = torch.zeros_like(q) if output_gate else None
    idx = torch.zeros((rows, width), dtype=torch.int32, device=device)
    table = torch.zeros((1, 2), dtype=torch.int32, device=device)
    req = torch.zeros((rows,), dtype=torch.int32, device=device)
    cnt = torch.full((rows,), width, dtype=torch.int32, device=device) if counts else None
    configs = heuristics.reachable_configs(
        num_kv_heads, head_dim, width, num_sms(torch.device(device)), kv_bytes=k_cache.element_size()
    )
    for config in configs:
        launch.launch_sparse_paged_attention(
            out, q, k_cache, v_cache, idx, table, req, cnt, None, gate, gate_rounding,
            *((1.0, 1.0) if fp8 else (None, None)), config=config,
        )  # fmt: skip
    return configs


def sparse_paged_attention(device, dtype, *, attention_layers=(DEFAULT_LAYER,), **other_ops_options):
    """``attention_layers``: dicts of :func:`warmup_layer`'s keywords, one per distinct layer shape."""
    if dtype not in (torch.bfloat16, torch.float16):
        return
    for layer in attention_layers:
        warmup_layer(device, dtype, **layer)
