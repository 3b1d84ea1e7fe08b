"""Static launch heuristic of the W4A16 GEMM: tile by M bucket, split-K to fill the GPU.

The tile table is a starting point chosen from first principles, not yet from
a measured sweep on the H200: ``scripts/gpu/sweep_w4a16.py`` measures every
candidate tile per M bucket over the benchmark shapes and prints the table to
put here. The reasoning behind the defaults:

- ``decode`` (M <= 16): tl.dot needs 16 rows, so BM = 16; the GEMM is bound by
  reading 4-bit weights, so BN = 64 / BK = 128 (a 4 KiB packed tile per
  iteration, 4 stages in flight) and split-K supplies the parallelism.
- ``m32`` .. ``m512``: BM grows with M while BN stays 64 so that
  4096-wide layers still give about one tile per SM at M = 128..256.
- ``prefill`` (M > 512): 128 x 128 x 64 tiles, 8 warps, 3 stages: the usual
  compute-bound fp16/bf16 Triton tile on Hopper.

Split-K (``split_k`` programs along K per output tile) is used only when the
output tiles alone leave SMs idle (fewer tiles than SMs). It aims at two
programs per SM, keeps at least one BK tile per split, and caps the fp32
workspace traffic (``8 * split * M * N`` bytes written and read back) at half
the packed weight bytes (``K * N / 2``): ``split <= K / (32 * M)``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from exactfuse.utils import next_power_of_2

H200_SMS = 132
MAX_SPLIT = 16


@dataclass(frozen=True)
class TileConfig:
    """One launch configuration; ``k_per_split`` is a multiple of ``BK``."""

    name: str
    BM: int
    BN: int
    BK: int
    num_warps: int
    num_stages: int
    split_k: int = 1
    k_per_split: int = 0
    # Dequantization arithmetic: "float" (nibble -> int32 -> fp32, scale in fp32,
    # round to the activation dtype) or "magic" (nibble OR'ed into the exponent
    # pattern of 128.0 / 1024.0, subtract and scale in the activation dtype: no
    # int->float or fp32->bf16 conversion instructions). Bitwise the same weights.
    dequant: str = "float"
    # K order of a tile: False unpacks words to rows 8r + j (interleaved); True
    # to rows j * BK/8 + r (nibble-major, a plain reshape) and gathers the
    # activation columns in that order instead. Needs one group per tile.
    nibble_major: bool = False
    # "mma" (tl.dot tiles) or "gemv" (CUDA-core FMAs, M <= BM rows, no tl.dot).
    kernel: str = "mma"


# (max M, name, BM, BN, BK, num_warps, num_stages), first match wins.
BUCKETS: tuple[tuple[int, str, int, int, int, int, int], ...] = (
    (16, "decode", 16, 64, 128, 4, 4),
    (32, "m32", 32, 64, 128, 4, 4),
    (128, "m128", 64, 64, 64, 4, 4),
    (512, "m512", 128, 64, 64, 4, 4),
    (2**62, "prefill", 128, 128, 64, 8, 3),
)
CONFIG_NAMES = tuple(b[1] for b in BUCKETS)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def choose_split(
    M: int,
    N: int,
    K: int,
    BM: int,
    BN: int,
    BK: int,
    num_sms: int,
    programs_per_sm: int = 2,
    max_split: int = MAX_SPLIT,
    traffic_cap: bool = True,
) -> tuple[int, int]:
    """``(split_k, k_per_split)``: the number of K slices per output tile and their length.

    ``programs_per_sm``, ``max_split`` and ``traffic_cap`` are the rule's knobs
    (scripts/gpu/sweep_w4a16_decode.py varies them); the defaults are the rule.
    """
    k_tiles = _cdiv(K, BK)
    tiles = _cdiv(max(M, 1), BM) * _cdiv(N, BN)
    split = 1
    if tiles < programs_per_sm * num_sms // 2 or tiles < num_sms:
        cap = max(1, K // (32 * max(M, 1))) if traffic_cap else k_tiles
        split = max(1, min(_cdiv(programs_per_sm * num_sms, tiles), k_tiles, cap, max_split))
    iters = _cdiv(k_tiles, split)
    return _cdiv(k_tiles, iters), iters * BK


@functools.lru_cache(maxsize=4096)
def select_config(M: int, N: int, K: int, group_size: int, num_sms: int = H200_SMS) -> TileConfig:
    """The tile configuration for ``[M, K] x [K, N]`` with groups of ``group_size`` (-1: all of K).

    Depends on M (the bucket and the split) so it must run per call, outside
    any compiled graph: the op is opaque to torch.compile for this reason.
    """
    name, BM, BN, BK, warps, stages = next(b[1:] for b in BUCKETS if b[0] >= M)
    BK = min(BK, max(16, next_power_of_2(K)))
    split, k_per_split = choose_split(M, N, K, BM, BN, BK, num_sms)
    return TileConfig(name, BM, BN, BK, warps, stages, split, k_per_split)


def with_split(config: TileConfig, K: int, split_k: int) -> TileConfig:
    """``config`` with a forced split count (tests and sweeps); every split gets at least one BK tile."""
    k_tiles = _cdiv(K, config.BK)
    iters = _cdiv(k_tiles, max(1, min(split_k, k_tiles)))
    return dataclasses.replace(config, split_k=_cdiv(k_tiles, iters), k_per_split=iters * config.BK)
