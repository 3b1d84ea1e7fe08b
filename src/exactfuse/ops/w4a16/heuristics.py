"""Static launch heuristic of the W4A16 GEMM: tile by M bucket, split-K to fill the GPU.

``select_config`` picks the first bucket of :data:`BUCKETS` that holds M and a split-K count for it
(:func:`choose_split`); above M = 128 the dense path (:func:`dense_config`: dequantize, then cuBLAS).
M = 1 and 2 run the CUDA-core GEMV (``gemv.py``), 3 <= M <= 128 the fused dequantize + tl.dot tile
(``tile_kernel.py``); on sm_90, M 2-128 run the multi-stage Gluon tile (:func:`staged_config`, ``staged.py``)
where its arguments fit. docs/heuristics.md gives each bucket's sweep, its ratios against the alternatives and
the variants measured and rejected, with the files under benchmarks/results/h200/sweeps/ that hold them.
The op is opaque to torch.compile, so this choice runs per call on the runtime M.

Split-K (``split_k`` programs along K per output tile) is used when the output tiles alone give fewer
than ``programs_per_sm`` programs per SM (or leave SMs idle). It keeps at least one BK tile per split
and, with the traffic cap, keeps the fp32 workspace traffic (``8 * split * M * N`` bytes written and
read back) under half the packed weight bytes (``K * N / 2``): ``split <= K / (32 * M)``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from exactfuse.utils import next_power_of_2

H200_SMS = 132
MAX_SPLIT = 32  # the gemv1 rule splits K = 14336 into 28 at N = 4096 (the split its sweep measured)


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
    # Dequantize W to a dense [K, N] buffer with a [BK, BN] tile per program (BM unused), then
    # torch.matmul: the spec's own GEMM, for large M where cuBLAS beats the fused kernel.
    dense: bool = False
    # Deterministic split-K sums the partials in the GEMM's own launch (the last slice to arrive);
    # False: a second launch does (BUCKETS says which bucket uses which).
    fixup: bool = True
    # The CUDA-core kernel (gemv.py) for one or two rows: BM = M, no tl.dot.
    gemv: bool = False
    # The GEMV dequantizes in 16-bit pairs (PTX) where the device has them; False: fp32 arithmetic, as on
    # the interpreter (the same values; tests and scripts/gpu/sweep_w4a16_ab.py compare the two).
    packed_math: bool = True
    # The GEMV loads each row's activations 4 at a time (64-bit loads) where the activations allow it (no
    # act-order permutation, 8-byte aligned rows); False: one load per activation.
    wide_a: bool = True
    # The GEMV loads scales and zero points as a tile in the packed words' layout (one per word); False: one
    # per column, moved into that layout through shared memory (two barriers per K step).
    scale_tile: bool = True
    # The multi-stage Gluon tile for sm_90 (staged.py): out^T = W^T a^T on wgmma, num_stages K steps of
    # packed words and activations in a cp.async ring, BN = BK = 64; fixup as for the tl.dot tiles.
    staged: bool = False


@dataclass(frozen=True)
class Bucket:
    """The fused kernel's tile for ``M <= max_m``, and the split-K rule (:func:`choose_split`) it uses."""

    max_m: int
    name: str
    BM: int
    BN: int
    BK: int
    num_warps: int
    num_stages: int
    programs_per_sm: int
    traffic_cap: bool
    one_wave: bool
    fixup: bool


def _bucket(max_m, name, tile, warps, stages, programs_per_sm, *, cap, one_wave, fixup) -> Bucket:
    return Bucket(max_m, name, *tile, warps, stages, programs_per_sm, cap, one_wave, fixup)


# First match wins; tile = (BM, BN, BK).
BUCKETS: tuple[Bucket, ...] = (
    _bucket(1, "gemv1", (1, 64, 256), 2, 1, 16, cap=True, one_wave=True, fixup=True),
    _bucket(2, "gemv", (2, 64, 128), 2, 1, 8, cap=True, one_wave=True, fixup=True),
    _bucket(16, "decode", (16, 64, 128), 4, 4, 4, cap=True, one_wave=True, fixup=True),
    _bucket(32, "m32", (32, 64, 128), 4, 4, 2, cap=True, one_wave=False, fixup=False),
    _bucket(64, "m64", (64, 64, 64), 4, 4, 8, cap=False, one_wave=False, fixup=False),
    _bucket(128, "m128", (128, 64, 64), 4, 3, 4, cap=False, one_wave=False, fixup=False),
)
DENSE_ABOVE_M = BUCKETS[-1].max_m  # larger M: dense_config()


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
    one_wave: bool = False,
) -> tuple[int, int]:
    """``(split_k, k_per_split)``: the number of K slices per output tile and their length.

    ``programs_per_sm``, ``max_split``, ``traffic_cap`` and ``one_wave`` (round the split down so
    that ``tiles * split`` stays within ``programs_per_sm * num_sms``, instead of up) are the
    rule's knobs (scripts/gpu/sweep_w4a16_tiles.py varies them); the defaults are the rule.
    """
    k_tiles = _cdiv(K, BK)
    tiles = _cdiv(max(M, 1), BM) * _cdiv(N, BN)
    split = 1
    if tiles < programs_per_sm * num_sms // 2 or tiles < num_sms:
        cap = max(1, K // (32 * max(M, 1))) if traffic_cap else k_tiles
        slots = programs_per_sm * num_sms
        want = slots // tiles if one_wave else _cdiv(slots, tiles)
        split = max(1, min(want, k_tiles, cap, max_split))
    iters = _cdiv(k_tiles, split)
    return _cdiv(k_tiles, iters), iters * BK


# Rows the multi-stage Gluon tile takes on sm_90 (staged_config): every tl.dot bucket (M 3-128), where it
# is 1.05-2.24x faster than their tiles (sweeps/w4a16_wgmma_staged.txt, w4a16_wgmma_staged_m8_12.txt),
# and the two-row GEMV's M = 2 (0.80-0.96x its time, sweeps/w4a16_wgmma_staged_m2.txt).
STAGED_M = (2, 128)


@functools.lru_cache(maxsize=4096)
def select_config(M: int, N: int, K: int, group_size: int, num_sms: int = H200_SMS, wgmma: bool = False) -> TileConfig:
    """The tile configuration for ``[M, K] x [K, N]`` with groups of ``group_size`` (-1: all of K).

    Depends on M (the bucket and the split) so it must run per call, outside
    any compiled graph: the op is opaque to torch.compile for this reason.
    Above the last bucket's M: :func:`dense_config`. ``wgmma``: the device runs the staged tile
    (``staged.wgmma_unavailable``), which then serves :data:`STAGED_M`; the launcher falls back to
    :func:`fused_config` where the arguments do not fit it.
    """
    if M > DENSE_ABOVE_M:
        return dense_config()
    if wgmma and STAGED_M[0] <= M <= STAGED_M[1]:
        return staged_config(M, N, K, group_size, num_sms)
    return fused_config(M, N, K, num_sms)


def fused_config(M: int, N: int, K: int, num_sms: int = H200_SMS) -> TileConfig:
    """The fused kernel's configuration: the first bucket that holds M (the last one above it, which
    sweeps use to compare the fused kernel with the dense path), split-K for this M."""
    bucket = next((b for b in BUCKETS if b.max_m >= M), BUCKETS[-1])
    return bucket_config(bucket.name, M, N, K, num_sms)


def bucket_config(name: str, M: int, N: int, K: int, num_sms: int = H200_SMS) -> TileConfig:
    """Bucket ``name``'s configuration for this M, N, K (tests and sweeps force a bucket with it)."""
    b = next(b for b in BUCKETS if b.name == name)
    gemv = name.startswith("gemv")
    if gemv and M > b.BM:
        raise ValueError(f"the {name} bucket takes M <= {b.BM}, got M = {M}")
    BM = next_power_of_2(M) if gemv else b.BM
    BK = min(b.BK, max(16, next_power_of_2(K)))
    split, k_per_split = choose_split(
        M, N, K, BM, b.BN, BK, num_sms, b.programs_per_sm, traffic_cap=b.traffic_cap, one_wave=b.one_wave
    )
    return TileConfig(name, BM, b.BN, BK, b.num_warps, b.num_stages, split, k_per_split, fixup=b.fixup, gemv=gemv)


def staged_config(M: int, N: int, K: int, group_size: int, num_sms: int = H200_SMS) -> TileConfig:
    """The multi-stage Gluon tile's configuration (``staged.py``; :func:`select_config`'s at :data:`STAGED_M`).

    ``BM`` is M's power of two (8 to 128: every M row in one tile), 4 stages. The split is the fewest
    power of two (at most 16) whose programs cover the SMs, each split at least four K steps of whole
    groups, doubled at M <= 64: the best of the six stage, tile and split variants measured
    (sweeps/w4a16_wgmma_staged.txt: at most 1.056x the best variant's time at M 16-64, the best at 128).
    """
    BN = BK = 64
    BM = min(128, max(8, next_power_of_2(M)))
    G = next_power_of_2(K) if group_size == -1 or group_size >= K else group_size

    def whole(split: int) -> bool:
        return K % (split * BK) == 0 and (G >= K or (K // split) % G == 0)

    tiles = _cdiv(N, BN) * _cdiv(max(M, 1), BM)
    split = 1
    while split < 16 and tiles * split < num_sms and whole(2 * split) and K // (2 * split) >= 4 * BK:
        split *= 2
    if M <= 64 and whole(2 * split) and K // (2 * split) >= 4 * BK:
        split *= 2
    # the last split sums a tile's partials where they are at most 64 KB (split x BM <= 256); above, the
    # second launch's reduction spread over the GPU is faster (sweeps/w4a16_staged_fixup_ab.txt)
    return TileConfig("staged", BM, BN, BK, 4, 4, split, K // split, fixup=split * BM <= 256, staged=True)


def dense_config() -> TileConfig:
    """The ``dense`` configuration: a 64 x 128 dequantization tile per program (8 warps), then cuBLAS."""
    return TileConfig("dense", 0, 128, 64, 8, 1, dense=True)


def with_split(config: TileConfig, K: int, split_k: int) -> TileConfig:
    """``config`` with a forced split count (tests and sweeps); every split gets at least one BK tile."""
    k_tiles = _cdiv(K, config.BK)
    iters = _cdiv(k_tiles, max(1, min(split_k, k_tiles)))
    return dataclasses.replace(config, split_k=_cdiv(k_tiles, iters), k_per_split=iters * config.BK)


FRAGMENT_MIN_CHUNKS = 4  # chunks of 64 rows a K split keeps at least (its loads run one chunk ahead)
FRAGMENT_MAX_BLOCKS = 8  # blocks of 8 rows of ``a`` a program multiplies (more rows: more programs)
FRAGMENT_WIDE_TILES = 896  # 16-column tiles from which N counts as wide (N >= 14336)


def fragment_blocks(M: int) -> int:
    """Blocks of 8 rows a program of the fragment kernel takes: ``M / 8`` rounded up to a power of two, at
    most ``FRAGMENT_MAX_BLOCKS``."""
    blocks = 1
    while blocks * 8 < M and blocks < FRAGMENT_MAX_BLOCKS:
        blocks *= 2
    return blocks


@functools.lru_cache(maxsize=4096)
def fragment_config(M: int, N: int, K: int, num_sms: int = H200_SMS) -> dict:
    """Launch arguments of the fragment kernel (``mma.launch_fragment``): 4 warps (fewer where N has fewer
    than 4 16-column tiles), ``fragment_blocks(M)`` blocks of 8 rows.

    One block (M <= 8) up to N = 14336: one tile a warp, the fewest K splits that make 3.5 programs an SM,
    and 4 chunks a step where that is one wave at 4 programs an SM (the registers of a 4-chunk step, 128 at
    one tile, hold 4 programs of 4 warps an SM), else 2. Fit to a sweep of 1, 2 and 4 chunks a step
    (sweeps/w4a16_fragment_unroll.txt): on the four such bench layers at M 1 and 8 it takes the fastest
    swept configuration or one within 1.03x of it, 1.03-1.21x faster than one chunk a step.

    Otherwise one chunk a step, and per warp 1 tile, 2 at one block or at 8 blocks, 4 for wide
    N at 4 blocks; then the fewest K splits (divisors of ``K / 64``, splits of at least
    ``FRAGMENT_MIN_CHUNKS`` chunks) that make 6.5 programs an SM up to 2 blocks, 1.7 from 4 blocks. Fit to
    the sweep over (warps, tiles, split) on the five bench layers at M 1-64 (sweeps/w4a16_fragment.txt):
    at M 1, 8 and 16 it takes the fastest swept configuration or one within 1.06x of it (the 14336-row
    layer's 14 splits were not swept). From M = 32 the kernel is slower than ``w4a16_gemm``'s tiles on
    every layer and the rule is not tuned."""
    tile_cols = N // 16
    blocks = fragment_blocks(M)
    wide = tile_cols >= FRAGMENT_WIDE_TILES
    warps = next(w for w in (4, 2, 1) if tile_cols % w == 0)
    chunks = K // 64
    splits = [s for s in range(1, chunks + 1) if chunks % s == 0 and (s == 1 or chunks // s >= FRAGMENT_MIN_CHUNKS)]
    if blocks == 1 and tile_cols <= FRAGMENT_WIDE_TILES:
        programs = tile_cols // warps
        split = next((s for s in splits if programs * s >= 3.5 * num_sms), splits[-1])
        per_split = chunks // split
        one_wave = programs * split <= 4 * num_sms
        unroll = 4 if one_wave and per_split % 4 == 0 else 2 if per_split % 2 == 0 else 1
        return {"warps": warps, "tiles": 1, "blocks": 1, "split": split, "unroll": unroll}
    want = {1: 2, 2: 1, 4: 4 if wide else 1, 8: 2}[blocks]
    tiles = next(t for t in (4, 2, 1) if t <= want and tile_cols % (warps * t) == 0)
    programs = (tile_cols // (warps * tiles)) * _cdiv(max(M, 1), 8 * blocks)
    target = (6.5 if blocks <= 2 else 1.7) * num_sms
    split = next((s for s in splits if programs * s >= target), splits[-1])
    return {"warps": warps, "tiles": tiles, "blocks": blocks, "split": split, "unroll": 1}  # cached: not mutated
