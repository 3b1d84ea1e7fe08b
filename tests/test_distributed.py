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
