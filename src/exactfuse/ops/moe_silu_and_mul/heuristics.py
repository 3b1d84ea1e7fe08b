"""Launch choice of the MoE activation kernels (``triton.moe_silu_and_mul_kernel`` and its backward): a
static rule of the row width ``N``, the element size and the layout, never of the row count M, so every
batch size reuses one compile and a traced launch is correct for every M (docs/heuristics.md has the sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass

from exactfuse.utils import next_power_of_2

TARGET_ELEMENTS = 1024  # outputs per program
NUM_WARPS = 4
MAX_COLUMN_TILES = 65535  # CUDA's limit on a grid's second axis: the column tiles of a row_grid launch


@dataclass(frozen=True)
class MoeConfig:
    """One launch of the kernel. ``evict_first``: the gateup loads' eviction hint (each byte is read
    once). ``store_run``: the interleaved store's contiguity hint (0: none, see :func:`store_run`).
    ``int64_index``: ``None`` decides from the sizes (:func:`exactfuse.utils.needs_int64`). ``row_grid``: a 2-D
    grid ``(row blocks, column tiles)`` with the row block fastest, as the gated activations launch (no
    division of the program id; at most 65535 column tiles), instead of the flat column-fastest grid;
    :func:`moe_config` takes the 2-D grid wherever it fits (``sweep moe --grid-order``, docs/heuristics.md)."""

    BM: int
    BN: int
    num_warps: int
    evict_first: bool = True
    store_run: int = 0
    int64_index: bool | None = None
    row_grid: bool = False


def moe_block_n(N: int) -> int:
    """Columns per program: the largest power of two <= 1024 that divides N, if >= 128.

    A dividing ``BN`` makes every tile full (``EVEN_N``: no column mask, no idle lanes): N = 768 -> 256,
    1024 -> 1024, 1536 -> 512, 3072 -> 1024. Widths without such a divisor (960, 33, 7) use
    ``next_power_of_2(N)`` up to 1024 and mask the tail.
    """
    divisor = N & -N if N > 0 else 1
    if divisor >= 128:
        return min(divisor, 1024)
    return min(next_power_of_2(N), 1024)


def store_run(itemsize: int, interleaved: bool) -> int:
    """Contiguity hint for the interleaved store: outputs per 16-byte load of (g, u) pairs.

    After the split a thread holds ``16 / (2 * itemsize)`` consecutive outputs (4 for fp16/bf16, 2 for
    fp32). Left alone, Triton widens the store to 16 bytes through a shared-memory layout conversion;
    the hint stores the split's registers as they are (8-byte stores in bf16, no shared memory).
    """
    return 16 // (2 * itemsize) if interleaved else 0


def moe_config(N: int, itemsize: int, interleaved: bool) -> MoeConfig:
    """The launch for rows of ``N`` outputs: ``BN`` columns (:func:`moe_block_n`) and
    ``BM = 1024 // BN`` rows per program, 4 warps, so wide rows run one row per program (``BM == 1``:
    no masks at all on full tiles) and a thread holds 8 outputs (16-byte accesses in bf16). The 2-D
    ``row_grid`` launch unless N has more column tiles than a grid's second axis holds."""
    BN = moe_block_n(N)
    row_grid = -(-N // BN) <= MAX_COLUMN_TILES
    return MoeConfig(max(1, TARGET_ELEMENTS // BN), BN, NUM_WARPS, store_run=store_run(itemsize, interleaved),
                     row_grid=row_grid)  # fmt: skip


def moe_backward_config(N: int) -> MoeConfig:
    """The backward kernel's launch for rows of ``N`` outputs: the forward's tile (``BN`` from
    :func:`moe_block_n`, ``BM = 1024 // BN`` rows, 4 warps), so a thread holds 8 outputs of each
    gradient; the kernel reads ``BM``, ``BN`` and ``num_warps`` only. Not swept for the backward yet: the
    forward's rule is the starting point."""
    BN = moe_block_n(N)
    return MoeConfig(max(1, TARGET_ELEMENTS // BN), BN, NUM_WARPS)
