"""moe_silu_and_mul's launch configurations: the heuristic's choice, every forced mask path and grid order
through the contract, the 2-D grid bit-equal to the flat one."""

import dataclasses

import pytest
import torch

import exactfuse
from exactfuse.ops.moe_silu_and_mul import heuristics as mh
from exactfuse.ops.moe_silu_and_mul import launch as moe_launch
from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul
from exactfuse.utils import needs_int64
from support.moe import LAYOUT, pair


# ----------------------------------------------------------------- heuristic
@pytest.mark.parametrize(
    ("N", "BN"), [(7, 8), (33, 64), (384, 128), (512, 512), (768, 256), (960, 1024), (1536, 512), (3072, 1024)]
)
def test_block_n_divides_n_when_it_can(N, BN):
    assert mh.moe_block_n(N) == BN


@pytest.mark.parametrize("N", [7, 33, 768, 1024, 1536, 2048, 3072, 14336])
def test_launch_config_covers_the_target(N):
    cfg = mh.moe_config(N, 2, False)
    assert max(cfg.BN, mh.TARGET_ELEMENTS) == cfg.BM * cfg.BN and cfg.num_warps == 4
    assert (cfg.BM == 1) == (cfg.BN >= mh.TARGET_ELEMENTS)
    assert cfg.evict_first and cfg.int64_index is None


def test_store_run_matches_the_split_registers():
    assert (mh.store_run(2, True), mh.store_run(4, True), mh.store_run(2, False)) == (4, 2, 0)
    assert mh.moe_config(1024, 2, True).store_run == 4 and mh.moe_config(1024, 2, False).store_run == 0


def test_int64_switch_counts_the_row_stride():
    assert not needs_int64(2**20 - 1, 2048)
    assert needs_int64(2**20 + 8, 2048)  # numel = 2**31 + 16384
    assert needs_int64(3, 2**30)  # 384 elements viewed from a 2**31 buffer
    assert not needs_int64(0, 2**30)


# Every mask path: BM == 1 with and without a full last column tile, BM > 1 with a
# partial last row block, tiny tiles with many programs per row, int64 offsets.
FORCED = {
    "BM1-even": (4, 384, mh.MoeConfig(1, 128, 4)),
    "BM1-tail": (4, 384, mh.MoeConfig(1, 256, 4)),
    "BM4-rows-tail": (7, 100, mh.MoeConfig(4, 64, 4)),
    "BM2-even": (5, 256, mh.MoeConfig(2, 64, 2)),
    "int64-BM1": (3, 128, mh.MoeConfig(1, 128, 4, int64_index=True)),
    "int64-BM4-tail": (7, 100, mh.MoeConfig(4, 64, 4, int64_index=True)),
    "no-hints": (7, 100, mh.MoeConfig(4, 64, 4, evict_first=False, store_run=0)),
    "store-hint": (7, 100, mh.MoeConfig(4, 64, 4, store_run=2)),
    "row-grid-BM1-tail": (4, 384, mh.MoeConfig(1, 256, 4, row_grid=True)),
    "row-grid-BM4-rows-tail": (7, 100, mh.MoeConfig(4, 64, 4, row_grid=True)),
    "row-grid-int64": (7, 100, mh.MoeConfig(4, 64, 4, int64_index=True, row_grid=True)),
}


@pytest.mark.interpreter
@LAYOUT
@pytest.mark.parametrize("name", list(FORCED))
def test_interpreter_forced_configs(name, interleaved):
    M, N, config = FORCED[name]
    split, inter, w = pair(M, N, torch.float32)
    x = inter if interleaved else split
    with exactfuse.poison_outputs():
        out = moe_launch.launch_moe_silu_and_mul(x, w, interleaved, None, config=config)
    result = moe_silu_and_mul.contract_for(torch.float32, "cpu").check(out, moe_silu_and_mul.native(x, w, interleaved))
    assert result.passed, result.summary()


@pytest.mark.interpreter
@LAYOUT
def test_interpreter_row_grid_is_the_flat_grid_bit_for_bit(interleaved):
    """The 2-D grid changes which program computes a tile, not the tile's arithmetic."""
    split, inter, w = pair(7, 100, torch.float16)
    x = inter if interleaved else split
    for config in (mh.MoeConfig(4, 64, 4), mh.MoeConfig(1, 32, 2)):
        flat = moe_launch.launch_moe_silu_and_mul(x, w, interleaved, None, config=config)
        rows = moe_launch.launch_moe_silu_and_mul(
            x, w, interleaved, None, config=dataclasses.replace(config, row_grid=True)
        )
        assert torch.equal(flat.view(torch.int16), rows.view(torch.int16)), config


def test_row_grid_refuses_more_column_tiles_than_the_grid_holds():
    x = torch.zeros(1, 2 * (mh.MAX_COLUMN_TILES + 1))
    with pytest.raises(RuntimeError, match="N = 65536: more than 65535 column tiles"):
        moe_launch.launch_moe_silu_and_mul(x, None, False, None, config=mh.MoeConfig(1, 1, 1, row_grid=True))


def test_rule_takes_the_row_grid_where_the_column_tiles_fit():
    """The 2-D grid is the default (sweeps/moe_grid_order.txt); widths past its second axis launch flat."""
    for n in (7, 768, 3072, 14336):
        assert mh.moe_config(n, 2, False).row_grid, n
    too_wide = (mh.MAX_COLUMN_TILES + 1) * 1024
    config = mh.moe_config(too_wide, 2, False)
    assert config.BN == 1024 and not config.row_grid
