"""Static launch heuristic of the W4A16 GEMM: tile by M bucket, split-K to fill the GPU.

``select_config`` picks the first bucket of :data:`BUCKETS` that holds M and a split-K count for it
(:func:`choose_split`); above M = 128 the dense path (:func:`dense_config`: dequantize, then cuBLAS).
M = 1 and 2 run the CUDA-core GEMV (``gemv.py``), 3 <= M <= 128 the fused dequantize + tl.dot tile
(``tile_kernel.py``); on sm_90, M 2-128 run the multi-stage Gluon tile (:func:`staged_config`, ``staged.py``)
where its arguments fit. docs/heuristics.md gives each bucket's sweep, its ratios against the alternatives and
the variants measured and rejected, with the files under benchmarks/results/h200/sweeps/ that hold them.
The op is opaque to torch.compile, so this choice runs per call on the runtime M. ``w4a16_gemm_packed``'s
kernel takes :func:`packed_config` and its persistent grid from :func:`stream_k`.

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


# The rows the packed kernel serves. Its 4-block tile against the layout dequantized and cuBLAS (the path
# above) at M 32-128, bf16: 2.6-9.3x faster (benchmarks/results/h100/sweeps/w4a16_packed_wgmma.txt)
PACKED_KERNEL_MAX_M = 128
# The layers W4A16Linear's layout="auto" holds in the fragment layout: K N of at least this many weights. Side by
# side on an H100 at M 1-16 (bf16, each layout's op as it routes): 1.10-1.46x w4a16_gemm on 4096 x 14336, 14336 x
# 4096 and 8192² (2^25.8 to 2^26 weights), 0.92-1.10x on 4096² (2^24), 0.66-0.78x on 4096 x 1024
# (benchmarks/results/h100/sweeps/w4a16_packed_routed.txt)
FRAGMENT_LAYOUT_MIN_WEIGHTS = 2**25
PACKED_WEIGHT_BYTES_AN_SM = 48 * 1024  # the packed kernel's ring: weights in flight an SM
PACKED_MAX_STAGES = 16


def packed_config(M: int, N: int, K: int, groups: int) -> dict | None:
    """Launch arguments of ``w4a16_gemm_packed``'s kernel (``packed.launch_packed``), None where it does not
    take the layer (N not a multiple of 64: four consumer warps of whole 16-column tiles). Four consumer
    warps of 2 tiles each where N allows (else 1), one block of 8 rows up to M = 8, 2 up to 16, then 4;
    2 chunks of 64 rows a step where the chunks and a group's chunks divide by 2 (else 1), and a ring deep
    enough for :data:`PACKED_WEIGHT_BYTES_AN_SM` (3 to 16 slots). Measured on eight layers (4096 x 4096 to
    28672 x 8192) at M 1-16 against the register-pipelined kernel it replaced and cuBLAS:
    benchmarks/results/h100/sweeps/w4a16_ws_compact.txt; the 4-block tile at M 32-128 on two of them:
    h100/sweeps/w4a16_packed_wgmma.txt (docs/heuristics.md)."""
    n_tiles, chunks = N // 16, K // 64
    if n_tiles % 4:
        return None
    tiles = 2 if n_tiles % 8 == 0 else 1
    group_chunks = chunks // groups
    unroll = 2 if chunks % 2 == 0 and group_chunks % 2 == 0 else 1
    stages = max(3, min(PACKED_MAX_STAGES, -(-PACKED_WEIGHT_BYTES_AN_SM // (4 * tiles * unroll * 512))))
    blocks = 1 if M <= 8 else 2 if M <= 16 else 4
    return {"tiles": tiles, "blocks": blocks, "unroll": unroll, "stages": stages}


# The wgmma kernel (``packed_wgmma_kernel.py``, each step waiting for its own wgmmas) against the mma.sync
# kernel's 4-block tile, bf16 on an H100: at M 64 26.2 against 36.1 µs on 4096 x 14336 and 30.4 against
# 36.2 on 8192², at M 128 52.0 against 64.1 on 4096 x 14336, but 18.2 against 14.0 at M 64 on 4096²
# (benchmarks/results/h100/sweeps/w4a16_packed_wgmma.txt)
PACKED_WGMMA_MIN_M = 33
PACKED_WGMMA_MIN_WEIGHTS = 2**25  # K N from which it serves: 4096 x 14336 and 8192² above, 4096² below
# (rows a unit, 16-column tiles a consumer warp, ring slots, consumer warps a partition, consumer partitions) up
# to 64 rows and above; above 64, two 4-warp partitions (one dequantizes while the other's wgmmas run) against
# one 8-warp partition, bf16 on an H200: 30.3 against 37.2 µs at 4096 x 14336, 39.8 against 49.4 at 8192²
# (benchmarks/results/h200/sweeps/w4a16_packed_wgmma.txt)
PACKED_WGMMA_TILES = {64: (64, 2, 6, 4, 1), 128: (128, 1, 4, 4, 2)}


def packed_wgmma_config(M: int, N: int, K: int, groups: int) -> dict | None:
    """Launch arguments of the wgmma kernel (``packed.launch_packed_wgmma``) where it serves ``M`` rows of a
    ``K x N`` layer: :data:`PACKED_WGMMA_MIN_M` to :data:`PACKED_KERNEL_MAX_M` rows of a layer of at least
    :data:`PACKED_WGMMA_MIN_WEIGHTS` weights, tiled as measured (:data:`PACKED_WGMMA_TILES`: two chunks a
    step, so K's chunks and a group's chunks even; above 64 rows two consumer partitions, returned as
    ``groups``, not the quantization ``groups`` taken here); else None (the mma.sync kernel's tile)."""
    if not PACKED_WGMMA_MIN_M <= M <= PACKED_KERNEL_MAX_M or K * N < PACKED_WGMMA_MIN_WEIGHTS:
        return None
    rows, tiles, stages, warps, partitions = PACKED_WGMMA_TILES[64 if M <= 64 else 128]
    chunks = K // 64
    if (N // 16) % (tiles * warps * partitions) or chunks % 2 or (chunks // groups) % 2:
        return None
    return {"rows": rows, "tiles": tiles, "unroll": 2, "stages": stages, "warps": warps, "groups": partitions}


# What a piece of a unit (a share's end inside a unit) costs, in 64-row chunks of streaming: the partial
# sums' stores, the release fence and atomic, and the last piece's sum (about 2 µs on an H100, 8-10 chunks'
# time: benchmarks/results/h100/sweeps/w4a16_ws.txt, split 8 against split 1)
PIECE_CHUNKS = 8


def shares(units: int, steps: int, grid: int) -> list[tuple[int, int]]:
    """Each CTA's (steps, pieces) when ``units`` units of ``steps`` steps, laid end to end, are cut into
    ``grid`` equal contiguous shares (the packed kernel's ``c total // P``); pieces: the units the share
    holds only part of."""
    total = units * steps
    out = []
    for c in range(grid):
        begin, end = c * total // grid, (c + 1) * total // grid
        units_held = range(begin // steps, (end + steps - 1) // steps)
        parts = sum(
            max(begin, u * steps) > u * steps or min(end, (u + 1) * steps) < (u + 1) * steps for u in units_held
        )
        out.append((end - begin, parts))
    return out


@functools.cache  # a pure function of four sizes, asked every launch
def stream_k(units: int, steps: int, unroll: int, ctas: int) -> tuple[int, int]:
    """The packed kernel's (grid, the most pieces a unit is cut into): of the grids that cut every unit into
    the same number of pieces (``units`` times a divisor of ``steps``, at most ``ctas``) and the whole of
    ``ctas`` (stream-K), the one whose busiest CTA streams the fewest chunks, each piece counted as
    :data:`PIECE_CHUNKS` more (ties: the smaller grid)."""
    total = units * steps
    grids = {units * s for s in range(1, steps + 1) if steps % s == 0 and units * s <= ctas} | {min(ctas, total)}

    def cost(grid: int) -> int:
        return max(n * unroll + PIECE_CHUNKS * parts for n, parts in shares(units, steps, grid))

    grid = min(sorted(grids), key=cost)
    first = [((u * steps + 1) * grid - 1) // total for u in range(units)]
    last = [((u + 1) * steps * grid - 1) // total for u in range(units)]
    return grid, max(b - a + 1 for a, b in zip(first, last, strict=True))
