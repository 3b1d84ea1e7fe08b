"""Launch choice of the gated-activation kernel (``triton.act_and_mul_kernel``): a tile of the output width
``D`` alone, and num_warps by the launch's size when that is a concrete number (docs/heuristics.md has the
sweeps behind each number). The backward kernel (``triton.act_and_mul_backward_kernel``) takes the same tile
and warps on its output width, without the flat index: not swept for the backward yet.
"""

from __future__ import annotations

from exactfuse.utils import next_power_of_2

TILE_ELEMENTS = 1024  # outputs per program
SMALL_TILE_ELEMENTS = 2**20  # launches of fewer outputs use 8 warps, larger ones 4
TRACED_WARPS = 8
FLAT_MIN_ELEMENTS = 2**24  # launches of at least this many outputs take the flat index
FLAT_BLOCK = 1024  # outputs per program of the flat index


def act_and_mul_config(D: int, T: int | None = None) -> tuple[int, int, int]:
    """``(BT, BD, num_warps)`` for ``T`` rows of ``D`` outputs; ``T = None`` for a traced call.

    A program covers 1024 outputs: ``BD`` spans the row up to 1024 columns and narrow rows stack ``BT``
    rows per program, so d = 1..31 does not launch one tiny program per row. Widths whose padded block
    would mask more than 1/8 of the row take the largest power of two dividing ``D`` instead, when it is
    >= 256 (d = 768: four rows of BD = 256 per program, no column masked).

    Launches of fewer than 2^20 outputs take 8 warps, larger ones 4: 4 warps at T <= 16 take 1.05-1.34x
    the time of 8, 8 warps at large T 1.05-1.08x the time of 4. A traced call (symbolic ``T``) must not
    compare ``T`` with a number, so it takes 8 warps for every ``T``: the smaller of the two losses.
    """
    BD = min(next_power_of_2(D), TILE_ELEMENTS)
    low = D & -D  # the largest power of two dividing D
    if low >= 256 and (-D % BD) * 8 > D:
        BD = low
    warps = TRACED_WARPS if T is None else 8 if T * D < SMALL_TILE_ELEMENTS else 4
    return max(1, TILE_ELEMENTS // BD), BD, warps


def flat_index(D: int, T: int | None = None, fast_math: bool = True) -> bool:
    """Whether a launch of ``T`` rows of ``D`` outputs takes the flat index (``BD = FLAT_BLOCK``
    consecutive outputs a program, 1-D grid) instead of the ``[BT, BD]`` tile: eager launches of at least
    2^24 outputs whose activation takes a proven fast formula (``fast_math``). With the fast SiLU the flat
    index takes 0.95-0.99x the tile's time there (T4096-d4096 .. T32768-d14336, bf16: 639.8 against 670.6
    µs at T32768-d14336, Inductor 640.2) and 1.01-1.06x below it (T256, T4096-d768); with the exact math
    it is no faster than the tile (sweeps/act_and_mul_gap_T4096_32768.txt,
    sweeps/act_and_mul_small_t_gap.txt). A traced call (``T = None``) keeps the tile: one trace serves
    every T, and the tile's loss at large T is smaller than the flat index's at small T.
    """
    return fast_math and T is not None and T * D >= FLAT_MIN_ELEMENTS
