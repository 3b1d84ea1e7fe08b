"""exactfuse.distributed on two gloo processes (CPU): the sharded op against the single-device native op."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER
from exactfuse.ops.gelu_and_mul_sparse.native import gelu_and_mul_sparse as native_sparse

WORLD = 2
T, D = 512, 1024  # rows, full gate width (d_local = 512)


def _full_input(dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, 2 * D, generator=gen) * torch.rand(T, 1, generator=gen) * 3  # rows of varied scale
    return x.to(dtype)


def _shard(x: torch.Tensor, rank: int) -> torch.Tensor:
    d = D // WORLD
    gate, up = x[:, :D], x[:, D:]
    return torch.cat([gate[:, rank * d : (rank + 1) * d], up[:, rank * d : (rank + 1) * d]], dim=1)


def _worker(rank: int, init_file: str, dtype_name: str, results) -> None:
    from exactfuse import distributed

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        dtype = getattr(torch, dtype_name)
        x = _shard(_full_input(dtype), rank)
        exact = distributed.gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh")
        local = distributed.gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", local_stats=True)
        results[rank] = (exact, local)
    finally:
        dist.destroy_process_group()


def _run(dtype: torch.dtype, tmp_path) -> dict:
    results = mp.Manager().dict()
    mp.start_processes(_worker, args=(str(tmp_path / "init"), str(dtype).removeprefix("torch."), results),
                       nprocs=WORLD, start_method="spawn")  # fmt: skip
    return dict(results)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_exact_stats_match_the_single_device_op_and_local_stats_do_not(dtype, tmp_path):
    results = _run(dtype, tmp_path)
    full = native_sparse(_full_input(dtype), STD_MULTIPLIER, "tanh")
    d = D // WORLD
    same_exact = torch.ones(T, dtype=torch.bool)
    same_local = torch.ones(T, dtype=torch.bool)
    for rank in range(WORLD):
        exact, local = results[rank]
        want = full[:, rank * d : (rank + 1) * d]
        same_exact &= (exact.view(torch.int16) == want.view(torch.int16)).all(dim=1)
        same_local &= (local.view(torch.int16) == want.view(torch.int16)).all(dim=1)
    assert same_exact.float().mean() >= 0.999, f"{int((~same_exact).sum())} of {T} rows differ"
    assert same_local.float().mean() < 0.5  # the engines' shard-local thresholds are another function


def test_bad_input_names_the_argument():
    from exactfuse import distributed

    with pytest.raises(ValueError, match="x_local must be"):
        distributed.gelu_and_mul_sparse(torch.ones(3, 5), STD_MULTIPLIER)
    with pytest.raises(TypeError, match="std_multiplier"):
        distributed.gelu_and_mul_sparse(torch.ones(3, 4), torch.tensor(1.0))


def _w4a16_layer(group_size: int, symmetric: bool, bias: bool):
    from exactfuse.layers import W4A16Linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 64, bias=bias).half()
    return W4A16Linear.from_linear(linear, group_size=group_size, symmetric=symmetric)


def _relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float((out.double() - reference).norm() / reference.norm())


@pytest.mark.parametrize(("group_size", "symmetric", "bias"), [(32, True, True), (64, False, False), (-1, True, True)])
def test_w4a16_shards_reassemble_to_the_layer(group_size, symmetric, bias):
    from exactfuse import distributed

    layer = _w4a16_layer(group_size, symmetric, bias)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(1)).half()
    with torch.no_grad():
        full = layer(x)
        reference = x.double() @ layer.dense_weight().double() + (layer.bias.double() if bias else 0)
        columns = torch.cat([distributed.shard_column(layer, r, 2)(x) for r in range(2)], dim=1)
        shards = [distributed.shard_row(layer, r, 2) for r in range(2)]
        rows = sum(s(x[:, r * 128 : (r + 1) * 128]).float() for r, s in enumerate(shards)).half()
    assert torch.equal(columns, full)  # each output column is computed alone either way
    assert (shards[1].bias is None) and (shards[0].bias is not None) == bias
    assert _relative_error(rows, reference) <= 2 * _relative_error(full, reference)


def test_w4a16_fragment_layout_shards_are_the_gptq_layers_shards():
    from exactfuse import distributed

    gptq = _w4a16_layer(64, False, True)
    frag = _w4a16_layer(64, False, True).repack()
    for shard in (distributed.shard_column, distributed.shard_row):
        for r in range(2):
            want, got = shard(gptq, r, 2), shard(frag, r, 2)
            assert got.layout == "fragment"
            saved = got.state_dict()
            assert all(torch.equal(saved[k], v) for k, v in want.state_dict().items())
    # a shard without a fragment layout (8 output columns, not a multiple of 16) keeps the GPTQ layout
    narrow = distributed.shard_column(frag, 1, 8)
    assert narrow.layout == "gptq"
    assert all(
        torch.equal(narrow.state_dict()[k], v) for k, v in distributed.shard_column(gptq, 1, 8).state_dict().items()
    )


def test_w4a16_sharding_errors_name_the_argument():
    from exactfuse import distributed
    from exactfuse.layers import W4A16Linear

    layer = _w4a16_layer(32, True, False)
    with pytest.raises(ValueError, match="out_features: 64 does not split into 3 shards"):
        distributed.shard_column(layer, 0, 3)
    with pytest.raises(ValueError, match="in_features: 256 does not split into 16 shards of a multiple of 32"):
        distributed.shard_row(layer, 0, 16)
    with pytest.raises(ValueError, match="rank=2, world=2"):
        distributed.shard_row(layer, 2, 2)
    ordered = W4A16Linear(256, 64, group_size=32, act_order=True, dtype=torch.float16)
    assert distributed.shard_column(ordered, 1, 2).perm is not None
    with pytest.raises(ValueError, match="in_features: 256 does not split into 64 shards of a multiple of 8"):
        distributed.shard_row(ordered, 0, 64)
    with pytest.raises(ValueError, match="a group per row already"):
        distributed.shard_row(distributed.shard_row(ordered, 0, 2), 0, 2)


def _act_order_layer(symmetric: bool, bias: bool, group_size: int = 32):
    from exactfuse.layers import W4A16Linear
    from exactfuse.ops.w4a16.packing import quantize_rtn

    gen = torch.Generator().manual_seed(3)
    w = torch.randn(64, 256, generator=gen) / 16
    t = quantize_rtn(w, group_size, symmetric, order=torch.randperm(256, generator=gen), scale_dtype=torch.float16)
    b = torch.randn(64, generator=gen).half() if bias else None
    return W4A16Linear.from_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, b, sym=symmetric)


@pytest.mark.parametrize(("symmetric", "bias", "world"), [(True, True, 2), (False, False, 4)])
def test_w4a16_act_order_row_shards_are_the_layer_s_rows(symmetric, bias, world):
    """A row shard of an act-order layer keeps its checkpoint rows with a group per row: the shards'
    dense weights stacked are the layer's bit for bit, each shard's GEMM is the spec's, and the shards'
    outputs summed meet the GEMM rule against the layer's float64 product."""
    from exactfuse import distributed
    from exactfuse.ops.w4a16 import w4a16_gemm

    layer = _act_order_layer(symmetric, bias)
    assert layer.perm is not None and torch.unique(layer.perm).numel() == 256
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(4)).half()
    k = 256 // world
    with torch.no_grad():
        shards = [distributed.shard_row(layer, r, world) for r in range(world)]
        assert torch.equal(torch.cat([s.dense_weight() for s in shards]), layer.dense_weight())
        for r, s in enumerate(shards):
            assert s.perm is None and s.group_index is not None and s.in_features == k
            assert (s.bias is not None) == (bias and r == 0)
            args = (x[:, r * k : (r + 1) * k].contiguous(), s.qweight, s.scales, s.zeros, None, s.bias,
                    s.group_size, True, s.group_index)  # fmt: skip
            assert torch.equal(s(args[0]), w4a16_gemm.run_provider("native", *args))
        full = layer(x)
        reference = x.double() @ layer.dense_weight().double() + (layer.bias.double() if bias else 0)
        rows = sum(s(x[:, r * k : (r + 1) * k]).float() for r, s in enumerate(shards)).half()
    assert _relative_error(rows, reference) <= 2 * _relative_error(full, reference)
    state = shards[0].state_dict()
    assert state["group_index"].dtype == torch.int32 and state["scales"].shape == layer.scales.shape
