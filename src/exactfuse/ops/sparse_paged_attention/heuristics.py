"""Launch choice of ``sparse_paged_attention``: token tile, split count and warps.

The split count depends on the row count, so the op is opaque to torch.compile (its launcher runs per
call; ``docs/compiler.md``). Nothing here is autotuned.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactfuse.utils import next_power_of_2

MAX_SPLITS = 64
PROGRAMS_PER_SM = 4  # programs wanted in flight per SM before a row is split
# Tokens a tile: 64 while a cache row (D x the cache's element size) is at most 256 bytes, else 32. For
# bf16 that is D <= 128. An fp8 cache at D = 256 takes 64 tokens where rows run in several waves (no
# split: 1.14x the 32-token tile at rows 1024) and 32 where the rows are split over one wave (1.20x at
# rows 64, (24, 2); sweeps/sparse_attention_config_e4m3_pairs.txt).
BLOCK_N_SMALL_ROW, BLOCK_N_LARGE_ROW = 64, 32
SMALL_ROW_BYTES = 256
WIDE_HEAD_DIM = 128  # above it, a split fp8 row takes BLOCK_N_LARGE_ROW
FEW_PROGRAMS_BLOCK_N = 64  # tokens a tile when the launch has fewer programs than SMs (8 warps)
# The next tile's slots loaded while a tile is computed (``prefetch_slots``) hold more registers: they pay
# where a K tile is at most this many bytes (fp8, 1.00-1.08x faster) and in a launch of fewer programs than
# SMs (1.04-1.06x at one row), and cost occupancy elsewhere (bf16 rows 64: 1.25-1.40x slower; fp8 D 256 at
# 64 tokens: 1.08x slower); sweeps/sparse_attention_prefetch.txt, sparse_attention_prefetch_e4m3.txt.
PREFETCH_TILE_BYTES = 8192


@dataclass(frozen=True)
class AttentionConfig:
    """``block_n`` tokens a tile, ``num_splits`` programs per (row, KV head), ``num_warps`` per program;
    ``fixup``: the last split to arrive merges in the same launch (else a second launch merges);
    ``prefetch_slots``: a tile's indices and page-table entries are loaded while the one before is computed
    (the same tokens in the same order: the same bits).

    The second launch's shape (``num_splits > 1`` without ``fixup``; the same arithmetic in the same split
    order whatever they are, so the same bits): ``merge_group`` splits whose loads it issues together
    (``None``: ``merge.MERGE_GROUP``; at least ``num_splits``: every split's in one go, up to
    ``merge.MAX_MERGE_GROUP`` a group),
    ``merge_block_d`` head-dim columns a merge program takes (``None``: all ``D``; grid
    ``(rows, Hq, D // merge_block_d)``), ``merge_warps``; ``pdl``: the merge is a programmatic dependent
    launch (SM 9.0+; a plain launch under the interpreter): it starts while the partial kernel runs, loads
    the gate, then waits for the partials (``griddepcontrol.wait``), so the launch gap between the two
    kernels is hidden."""

    block_n: int
    num_splits: int
    num_warps: int = 4
    num_stages: int = 2
    fixup: bool = False
    prefetch_slots: bool = False
    merge_group: int | None = None
    merge_block_d: int | None = None
    merge_warps: int = 2
    pdl: bool = False

    def __post_init__(self):
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n must be a power of two >= 16, got {self.block_n}")
        if not 1 <= self.num_splits <= MAX_SPLITS:
            raise ValueError(f"num_splits must be in [1, {MAX_SPLITS}], got {self.num_splits}")
        if self.merge_group is not None and not 1 <= self.merge_group <= MAX_SPLITS:
            raise ValueError(f"merge_group must be in [1, {MAX_SPLITS}] or None, got {self.merge_group}")
        if self.merge_block_d is not None and (
            self.merge_block_d < 16 or self.merge_block_d & (self.merge_block_d - 1)
        ):
            raise ValueError(f"merge_block_d must be a power of two >= 16 or None, got {self.merge_block_d}")


def block_m(group: int) -> int:
    """Query heads per program as a dot's M: the group rounded up to a power of two, at least 16."""
    return max(16, next_power_of_2(group))


def attention_config(
    rows: int, kv_heads: int, head_dim: int, width: int, num_sms: int, kv_bytes: int = 2
) -> AttentionConfig:
    """Split a row's tiles over programs until about ``PROGRAMS_PER_SM * num_sms`` programs run, keeping
    at least two tiles a split. ``kv_bytes``: the cache's element size (1 for fp8). Tiles: 64 tokens
    while a cache row is at most 256 bytes, else 32; a split fp8 row wider than 128 takes 32 too.

    Where even that leaves fewer programs than SMs (a decode of one or a few rows), each program takes
    64-token tiles at 8 warps: more of the cache in flight a program is what such a launch lacks. Such a
    launch, and a K tile of at most :data:`PREFETCH_TILE_BYTES`, loads the next tile's slots ahead. Its
    merge loads every split at once, 64 head-dim columns and 4 warps a program, as a programmatic
    dependent launch (SM 9.0+): 0.90-0.95x the time of the plain merge at one row, the same bits
    (sweeps/sparse_rows1.txt); launches with one program per SM or more keep the plain merge.

    Sweep over the bench grid's shapes (W = 2048; rows 1-4096, (Hq, Hkv) (24, 2) and (64, 4), D 128 and
    256): this rule is within 1.14x of the best (block_n, splits, warps) on every shape, 1.02x geomean
    (benchmarks/results/h200/sweeps/sparse_attention_config.txt); at one row, 64 tokens and 8 warps are
    each shape's best, 1.09-1.20x the 4-warp rule (sweeps/sparse_attention_fixup.txt).
    """
    programs = max(1, rows * kv_heads)
    block_n = BLOCK_N_SMALL_ROW if head_dim * kv_bytes <= SMALL_ROW_BYTES else BLOCK_N_LARGE_ROW
    splits = _splits(programs, width, block_n, num_sms)
    if head_dim > WIDE_HEAD_DIM and block_n != BLOCK_N_LARGE_ROW and splits > 1:  # fp8, D 256, one wave
        block_n = BLOCK_N_LARGE_ROW
        splits = _splits(programs, width, block_n, num_sms)
    if programs * splits >= num_sms:
        prefetch = block_n * head_dim * kv_bytes <= PREFETCH_TILE_BYTES
        return AttentionConfig(block_n, splits, prefetch_slots=prefetch)
    splits = _splits(programs, width, FEW_PROGRAMS_BLOCK_N, num_sms)
    return AttentionConfig(
        FEW_PROGRAMS_BLOCK_N, splits, 8, prefetch_slots=True, merge_group=splits, merge_block_d=64, merge_warps=4,
        pdl=True,
    )  # fmt: skip


def _splits(programs: int, width: int, block_n: int, num_sms: int) -> int:
    """The largest power of two with ``programs * splits <= PROGRAMS_PER_SM * num_sms``, two tiles a split
    at least, at most :data:`MAX_SPLITS`."""
    want = PROGRAMS_PER_SM * num_sms
    splits = 1 if programs >= want else 1 << ((want // programs).bit_length() - 1)  # a power of two, rounded down
    return max(1, min(splits, max(1, -(-width // block_n)) // 2, MAX_SPLITS))


def reachable_configs(
    kv_heads: int, head_dim: int, width: int, num_sms: int, max_rows: int = 1 << 16, kv_bytes: int = 2
):
    """Every configuration :func:`attention_config` chooses for 1..max_rows rows (for warmup and tests)."""
    seen: dict[AttentionConfig, None] = {}
    rows = 1
    while rows <= max_rows:  # the choice changes only where rows * kv_heads crosses want / 2**i
        seen[attention_config(rows, kv_heads, head_dim, width, num_sms, kv_bytes)] = None
        rows += 1 if rows < 4096 else 4096
    return list(seen)
