"""Tensor-parallel ops over ``torch.distributed`` (NCCL on GPUs, gloo on the CPU).

``gelu_and_mul_sparse`` on a column-parallel shard: serving engines threshold each shard of the gate by
its own row statistics, so a sharded Gemma3n thresholds differently from the single-device model. Here
the row statistics are the whole row's: each rank computes ``(count, mean, M2)`` of its shard in fp64,
one ``all_gather`` brings every rank's partials, and every rank merges them in rank order by Chan's
formula (the same merge on every rank, so all ranks agree bit for bit). The threshold, GELU and product
then follow the native spec's roundings (``ops/gelu_and_mul_sparse/native.py``) with those statistics
rounded to the activation dtype. The single-device spec accumulates in fp32, this merge in fp64: the
rounded statistics, and so the outputs, agree on all but a rare row whose statistic lies within an
fp32 error of a rounding boundary (``tests/test_distributed.py`` counts them).

These are torch operations, not a fused kernel: one collective of ``3 x rows`` doubles a call, no host
synchronization, capturable in a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from exactfuse.ops.act_and_mul.checks import check_approximate
from exactfuse.ops.gelu_and_mul_sparse import native as sparse_native
from exactfuse.ops.gelu_and_mul_sparse.checks import check_std_multiplier


def merged_row_stats(gate: torch.Tensor, group=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, std)`` ``[T, 1]`` fp64 of the whole rows whose shards ``gate [T, d_local]`` the ranks of
    ``group`` hold, in rank order; ``std`` is the population std (``unbiased=False``)."""
    g = gate.double()
    count = torch.full((gate.shape[0], 1), float(gate.shape[-1]), dtype=torch.float64, device=gate.device)
    mean = g.mean(dim=-1, keepdim=True)
    m2 = ((g - mean) ** 2).sum(dim=-1, keepdim=True)
    partial = torch.cat([count, mean, m2], dim=1)
    parts = [torch.empty_like(partial) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, partial.contiguous(), group=group)
    n, mu, M2 = parts[0][:, :1], parts[0][:, 1:2], parts[0][:, 2:]
    for p in parts[1:]:  # Chan et al.: pairwise merge of (count, mean, M2), in rank order
        nb, mub, M2b = p[:, :1], p[:, 1:2], p[:, 2:]
        total = n + nb
        delta = mub - mu
        mu = mu + delta * (nb / total)
        M2 = M2 + M2b + delta * delta * (n * nb / total)
        n = total
    return mu, torch.sqrt(M2 / n)


def gelu_and_mul_sparse(
    x_local: torch.Tensor,
    std_multiplier: float,
    approximate: str = "tanh",
    group=None,
    *,
    local_stats: bool = False,
) -> torch.Tensor:
    """``gelu(relu(gate - (mean + std * m))) * up`` on this rank's shard, with the whole row's statistics.

    ``x_local [T, 2 * d_local]``: this rank's columns of the gate, then its columns of the up
    projection (what a merged column-parallel gate/up projection produces); the full row's gate is the
    ranks' gate shards in rank order. ``local_stats=True``: the shard's own statistics, as vLLM and
    SGLang compute them (for comparison). Returns ``[T, d_local]`` in ``x_local``'s dtype.
    """
    check_std_multiplier("distributed.gelu_and_mul_sparse", std_multiplier)
    check_approximate("distributed.gelu_and_mul_sparse", approximate)
    if x_local.dim() != 2 or x_local.shape[-1] % 2:
        raise ValueError(
            f"distributed.gelu_and_mul_sparse: x_local must be [T, 2 * d_local], got {list(x_local.shape)}"
        )
    if local_stats:
        return sparse_native.gelu_and_mul_sparse(x_local, std_multiplier, approximate)
    d = x_local.shape[-1] // 2
    gate, up = x_local[:, :d], x_local[:, d:]
    mean, std = merged_row_stats(gate, group)
    return sparse_native.thresholded(gate, up, mean.to(gate.dtype), std.to(gate.dtype), std_multiplier, approximate)


# ------------------------------------------------------------------------------- sharded W4A16 layers
def _sharded_like(layer, K: int, N: int, *, group_size: int, bias: bool, groups: int | None = None):
    """An empty ``W4A16Linear`` of ``layer``'s kind for a ``[K, N]`` shard (``groups``: a group per row)."""
    from exactfuse.layers.w4a16 import W4A16Linear

    return W4A16Linear(
        K, N, group_size=group_size, symmetric=layer.symmetric, act_order=layer.act_order and groups is None,
        bias=bias, dtype=layer.scales.dtype, device=layer.qweight.device, source_format=layer.source_format,
        deterministic=layer.deterministic, groups=groups,
    )  # fmt: skip


def _check_world(what: str, size: int, rank: int, world: int, multiple: int) -> int:
    if not (isinstance(world, int) and world >= 1 and isinstance(rank, int) and 0 <= rank < world):
        raise ValueError(f"{what}: need 0 <= rank < world, got rank={rank!r}, world={world!r}")
    if size % world or (size // world) % multiple:
        raise ValueError(f"{what}: {size} does not split into {world} shards of a multiple of {multiple}")
    return size // world


def _in_layout_of(layer, shard):
    """``shard`` in ``layer``'s layout where the shard takes it (a fragment-layout layer's shard that has no
    fragment layout, e.g. one with a group per row, stays in the GPTQ layout)."""
    if layer.layout == "fragment" and shard.fragment_unsupported() is None:
        return shard.repack()
    return shard


def shard_column(layer, rank: int, world: int):
    """Rank ``rank``'s column-parallel shard of a ``W4A16Linear``: output features
    ``[rank * N / world, (rank + 1) * N / world)``; the shards' outputs concatenated are the layer's.
    A layer in the fragment layout gives its shard in that layout where the shard takes it."""
    if layer.layout == "fragment":
        return _in_layout_of(layer, shard_column(layer.unpacked(), rank, world))
    n = _check_world("shard_column: out_features", layer.out_features, rank, world, 8)
    cols = slice(rank * n, (rank + 1) * n)
    shard = _sharded_like(layer, layer.in_features, n, group_size=layer.group_size, bias=layer.bias is not None)
    with torch.no_grad():
        shard.qweight.copy_(layer.qweight[:, cols])
        shard.scales.copy_(layer.scales[:, cols])
        if layer.zeros is not None:
            shard.zeros.copy_(layer.zeros[:, cols])
        if layer.perm is not None:
            shard.perm.copy_(layer.perm)
        if layer.bias is not None:
            shard.bias.copy_(layer.bias[cols])
    return shard


def shard_row(layer, rank: int, world: int):
    """Rank ``rank``'s row-parallel shard of a ``W4A16Linear``: input features
    ``[rank * K / world, (rank + 1) * K / world)`` (whole groups); the caller's all-reduce sums the
    shards' outputs, and only rank 0 keeps the bias.

    An act-order layer's groups are spread over all of K, so its shard keeps its rows in checkpoint
    order with a group per row (``W4A16Linear(groups=...)``: every group's scales, each row's group in
    ``group_index``); K / world need then be a multiple of 8 only, and the shard dequantizes its weight
    at every M (the fused kernels read one group per run of rows). A layer in the fragment layout gives
    its shard in that layout where the shard takes it."""
    if layer.layout == "fragment":
        return _in_layout_of(layer, shard_row(layer.unpacked(), rank, world))
    if layer.group_index is not None:
        raise ValueError("shard_row: the layer has a group per row already (a shard); shard the full layer")
    if layer.perm is not None:
        return _shard_rows_by_group(layer, rank, world)
    G = layer.group_size
    k = _check_world("shard_row: in_features", layer.in_features, rank, world, 8 if G == -1 else max(G, 8))
    rows = slice(rank * k, (rank + 1) * k)
    groups = slice(None) if G == -1 else slice(rank * k // G, (rank + 1) * k // G)
    shard = _sharded_like(layer, k, layer.out_features, group_size=G, bias=layer.bias is not None and rank == 0)
    with torch.no_grad():
        shard.qweight.copy_(layer.qweight[rows.start // 8 : rows.stop // 8])
        shard.scales.copy_(layer.scales[groups])
        if layer.zeros is not None:
            shard.zeros.copy_(layer.zeros[groups])
        if shard.bias is not None:
            shard.bias.copy_(layer.bias)
    return shard


def _shard_rows_by_group(layer, rank: int, world: int):
    """:func:`shard_row` of an act-order layer: checkpoint rows ``[rank * k, (rank + 1) * k)`` in that
    order, each row's codes moved from its prepared (group-sorted) place, its group the prepared
    place // G."""
    from exactfuse.ops.w4a16.packing import pack_rows, unpack_rows

    K, N = layer.in_features, layer.out_features
    k = _check_world("shard_row: in_features", K, rank, world, 8)
    G = K if layer.group_size == -1 else layer.group_size
    perm = layer.perm.to(torch.int64)
    place = torch.empty_like(perm)
    place[perm] = torch.arange(K, device=perm.device)  # checkpoint row -> prepared row
    mine = place[rank * k : (rank + 1) * k]
    shard = _sharded_like(layer, k, N, group_size=layer.group_size, bias=layer.bias is not None and rank == 0,
                          groups=layer.scales.shape[0])  # fmt: skip
    with torch.no_grad():
        shard.qweight.copy_(pack_rows(unpack_rows(layer.qweight).index_select(0, mine)))
        shard.scales.copy_(layer.scales)
        if layer.zeros is not None:
            shard.zeros.copy_(layer.zeros)
        shard.group_index.copy_(mine // G)
        if shard.bias is not None:
            shard.bias.copy_(layer.bias)
    return shard


__all__ = ["gelu_and_mul_sparse", "merged_row_stats", "shard_column", "shard_row"]
