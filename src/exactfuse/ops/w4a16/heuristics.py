"""Static launch heuristic of the W4A16 GEMM: tile by M bucket, split-K to fill the GPU.

The table comes from sweeps on the H200 (Triton 3.6, bf16, group 128, weights
rotated past L2; benchmarks/results/h200/sweeps/sweep_w4a16_decode.*, geomean
over the five benchmark (K, N) shapes):

- ``gemv1`` (M = 1) and ``gemv`` (M = 2): the CUDA-core kernel (``gemv.py``, no tl.dot), BM = M, no
  software pipelining, split-K rounded down to one wave; gemv1 (BN, BK) = (64, 256), 2 warps, 16
  programs per SM; gemv (64, 128), 2 warps, 8 programs per SM. Both dtypes. Session 8's sweeps (with the
  64-bit activation loads and the scale tile; sweeps/sweep_w4a16_decode_gemv_s8a.*, bf16): at M = 1 16.0
  µs for (64, 256) p16w against 17.5 for (64, 128) p8w, faster on all five shapes (0.83-0.96x); at M = 2
  (64, 128) p8w stays (22.1; (64, 64) p8w 22.0). fp16 (sweeps/sweep_w4a16_decode_gemv_fp16_s8{b,c}.*): M
  = 1 17.3 for (64, 256) p16w against 19.5 for (64, 128) p8w; M = 2 22.6 for the GEMV against 26.1 for
  the decode tile at its rule, faster on all five shapes, so fp16 takes the GEMV at M = 2 too (in
  session 7 it took 27.6 against 25.8 there and stayed with the decode tile). Session 7
  (sweeps/sweep_w4a16_decode_gemv_s7a.* and _plain_s7c.*): the GEMV against the decode tile, bf16, M = 1
  17.7 against 26.0 µs, M = 2 22.2 against 26.1; the best GEMV tile at M = 4 took 34.9 against 26.0
  (four fp32 FMAs per weight on top of the dequantization), so M >= 3 stays with the decode tile. A
  register prefetch of the next K step's words was 1.05x the time at M = 1 and 1.31x at M = 2
  (sweeps/sweep_w4a16_prefetch_s7c.txt, git 7ab5887), not kept. Session 8's load changes, time with /
  without, side by side, geomean over the five shapes
  (sweeps/sweep_w4a16_{wide_a,scale_tile,wide_a+scale_tile}_s8{a,b,c}.txt):

  ==========================  ================  ================  =================
  change                      (64, 128) p8w     shipped, M = 1    shipped, M = 2
  ==========================  ================  ================  =================
  64-bit activation loads     0.842 / 0.983     0.957             0.985
  scale tile                  0.963 / 1.020     0.979             1.023
  both against neither        1.010 / 1.002     0.799             0.999
  ==========================  ================  ================  =================

  (the first column at M = 1 / M = 2). The two do not add up: without the scale tile, gemv1's two
  groups per K step make Triton lay the words out as the scales' load (8 columns per thread, not 4;
  TTGIR under Triton 3.9), and in that layout one load per activation is what is slow (at M = 1 the
  shipped gemv1 without either takes 1.25x its time, without the scale tile alone 1.02x, without the
  wide loads alone 1.04x). Registers (Triton 3.6, bf16, BK = 128, M = 1): 72 with both, 96 with neither.
  In fp16, at the shipped configurations (sweeps/sweep_w4a16_{wide_a,scale_tile}_fp16_s8e.txt): 64-bit
  loads 0.854 (M = 1) and 0.797 (M = 2), the scale tile 1.040 and 0.860. The scale tile stays on in all
  four cells: a switch by dtype and M would be a tuning table for 2-4%.
- ``decode`` (3 <= M <= 16): tl.dot needs 16 rows, so BM = 16; BN = 64, BK = 128, 4 warps, 4 stages,
  split-K aiming at 4 programs per SM rounded down to one wave (``one_wave``). Session 6's sweep
  with the 3-D load of the packed words (sweep_w4a16_decode_s6b.*), geomean over the five shapes
  at M in {1, 16}: 26.4 µs against 29.4 for the tile shipped before it, (16, 128, 128) at 3 stages
  and 4 programs per SM (26.8 at 4 per SM without the one-wave rounding; faster or equal on all
  10 shapes). History of that tile: session 2 chose (16, 128, 128) at 4 per SM over the
  first-principles (16, 64, 128) at 2 per SM (34.1 against 36.9 µs); session 4 took it to 3
  stages (sweep_w4a16_decode_s4.*: 32.6 against 34.5 µs, 4 programs per SM instead of 3 by shared
  memory); session 5 found no better tile among 8 warps and smaller blocks
  (sweep_w4a16_decode_tiles_s5g.txt). The 3-D load changed which tile wins.
- Split-K sums its partials in the GEMM's own launch (``fixup``, the last slice to arrive) in
  the decode bucket, and in a second launch above it. Session 4's side-by-side run
  (scripts/gpu/sweep_w4a16_ab.py fixup, sweeps/sweep_w4a16_fixup_s4.txt, bf16, geomean of
  fixup / two-launch time over the five shapes): M = 1 0.974, M = 4 0.974, M = 16 0.998,
  M = 32 1.028, M = 64 1.189, M = 128 1.153 (the larger tiles' serial sum in one program
  outlasts a separate reduction).
- ``m32``: (32, 64, 128), 4 warps, 4 stages, 2 programs per SM. Session 6's sweep (3-D load): 32.1
  µs geomean at M = 32, the best of 4 tiles x 3 rules (next 32.2 at 3 stages).
- ``m64`` (M <= 64): (64, 64, 64), 4 warps, 4 stages, split-K aiming at 8 programs per SM without the
  traffic cap (session 2: 59.3 µs geomean over M in {64, 128} against 65.8 at 2 programs per SM). Until
  session 6 this tile served M up to 128. Session 6 (3-D load, sweep_w4a16_decode_m128_s6d.json) at
  M = 64: 39.4 µs, the best of six tiles x three rules within 3% (4 programs per SM: 38.2; 8 warps or
  BM = 128: 45.6 and more).
- ``m128`` (M <= 128): (128, 64, 64), 4 warps, 3 stages, split-K aiming at 4 programs per SM without
  the traffic cap: one program per column tile of W at M <= 128, so each weight tile is dequantized
  once, not once per 64 rows. Session 6 at M = 128: 54.0 against 64.8 µs for the (64, 64, 64) tile,
  geomean over the five shapes, faster on all five (0.76-0.96x the time); 8 warps 56.7, BN = 128 59.0.
  Not measured between M = 65 and 127, where it masks rows the smaller tile would not compute.
- ``dense`` (M > 128): no fused tile. :func:`~exactfuse.ops.w4a16.dequant.w4a16_dequant_kernel`
  writes the dense ``[K, N]`` weight (a 64 x 128 tile per program, 8 warps), then ``torch.matmul``
  (cuBLAS). Session 8's tile sweep (scripts/gpu/sweep_w4a16_dequant.py,
  sweeps/sweep_w4a16_dequant_s8d.txt, bf16, the kernel alone): 8 warps took 0.917x the time of the 4
  warps shipped before (geomean over the five shapes; faster on all five, 86-89% of the copy
  bandwidth against 73-85%), the best of nine tiles. Session 3's sweep
  (scripts/gpu/sweep_w4a16_paths.py; benchmarks/results/h200/sweeps/sweep_w4a16_paths_s3.*), geomean
  over the five shapes, µs:
  M = 256 83.9 against 138.8 for the fused kernel's (128, 64, 64) tile; M = 512 118 against 215;
  M = 1024 191 against 322 (its (128, 128, 64) tile); M = 4096 651 against 1242 (cuBLAS on a
  dense weight: 631). The dequantization is the difference to cuBLAS: 10.8 µs at M = 256 for
  4096 x 4096, 40 MB moved, about 3.7 TB/s. At M = 128 the two were even then (78.2 against 76.9),
  so the fused kernel keeps M <= 128. Session 6 (sweeps/sweep_w4a16_paths_s6f.txt, m128 tile above
  M = 128): fused 54.5 against dense 78.3 µs at M = 128, 91.7 against 84.4 at M = 192, 91.9
  against 84.4 at M = 256: the boundary stays.
  The dense path costs ``2 * K * N`` transient bytes from the caching allocator per call.

What limits the fused buckets at small M is not the tile and split choice, and not the
dequantization arithmetic (NOTES.md, sessions 3-6), but how the dequantized B tile reaches the MMA.
Loading the packed words as a 3-D tile (session 6, ``dequant_kn_tile``) kept ldmatrix and made the
shared-memory stores vectors: 0.93x the time at M <= 16, 0.74x at M = 32, 0.84-0.86x at M 64-128,
side by side (sweeps/sweep_w4a16_load3d_s6a.txt). Every variant that cut instructions but changed
how the tile reaches the MMA was slower; changes that kept that path moved the time by 1-2%:

- K-major tile (session 3: the W^T tile, prmt/lop3 PTX; 600 SASS instructions per thread and K step
  of the decode tile against 912): M = 1 51.1 against 33.9 µs geomean. Removed.
- 16-bit unpack (session 5: a mask-and-or makes fp16/bf16 ``MAGIC + q`` two nibbles at a time,
  joins keep each thread's columns; 1320 against 1584 SASS instructions per thread and K step on
  Triton 3.6): time with it / without, side by side, geomean over the five shapes: decode 1.685
  (M = 1) and 1.665 (M = 16), m128 1.057, and on the dense path's dequantization 0.997 (M = 256)
  and 1.025 (M = 1024) (sweeps/sweep_w4a16_unpack16_s5.txt). Triton read the B operand back with
  82 plain LDS instead of 28 ldmatrix (sweeps/sass_w4a16_s5.txt). Removed.
- ``q - z`` without int-to-float conversions, by the fp32 ``2^23`` trick (session 5, same smem
  path): time with the trick / with the conversions, geomean over the five shapes, 0.991 at M = 1,
  1.010-1.021 at M = 16-1024 (sweeps/sweep_w4a16_i2f_s5.txt). Not kept.
- A first CUDA-core kernel for M <= 4 (session 5, no tl.dot; sweeps/sweep_w4a16_gemv_s5.txt): 32.8
  against 31.0 µs geomean at M = 1, 1.5x slower at M = 2, 2.3x at M = 4. Triton gave each thread one
  column and scalar activation loads with per-element address arithmetic: 14 instructions per
  weight (Nsight Compute: 26.4M warp instructions at 4096 x 14336). Removed. Session 7's ``gemv``
  bucket differs in three ways: each thread holds whole packed words of a ``[BK / 8, BN]`` tile, the
  8 nibbles of a word meet 8 activation vectors (one per nibble, shared by the row's columns), and the
  dequantization runs in 16-bit pairs (848 SASS instructions for the whole bf16 kernel at M = 1, 64
  registers, against 1088 in fp32 arithmetic; Triton 3.6, sweeps/sass_w4a16_s7a.txt).
- A register cap (session 6, Triton's ``maxnreg`` at git 22de330): the decode tile compiles to 96
  registers without spills (128 uncapped; 80 spills), so 5 programs fit an SM instead of 4. At 4
  programs per SM it changed nothing (26.2 against 26.3 µs geomean); with a split for 8 per SM
  it was 25.6, but per shape from 0.88x to 1.11x the time, the gain coming from the larger split
  on wide N and a loss on N = 4096 (sweeps/sweep_w4a16_decode_maxnreg_s6h.*). m32 at 96 registers:
  45 against 32 µs. Not kept.
- out^T = W^T a^T (session 6, ``swap_ab`` at git 8d25591): the dequantized tile became wgmma's A
  operand (30.7 against 57.3 KB of shared memory), 0.935-0.942x the time at M <= 16 alone but
  1.04-1.06x the 3-D load's time combined with it (sweeps/sweep_w4a16_*swap_ab_s6a.txt). Removed.

Split-K (``split_k`` programs along K per output tile) is used when the output
tiles alone give fewer than ``programs_per_sm`` programs per SM (or leave SMs
idle). It keeps at least one BK tile per split and, with the traffic cap, keeps
the fp32 workspace traffic (``8 * split * M * N`` bytes written and read back)
under half the packed weight bytes (``K * N / 2``): ``split <= K / (32 * M)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator
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
    rule's knobs (scripts/gpu/sweep_w4a16_decode.py varies them); the defaults are the rule.
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


@functools.lru_cache(maxsize=4096)
def select_config(M: int, N: int, K: int, group_size: int, num_sms: int = H200_SMS) -> TileConfig:
    """The tile configuration for ``[M, K] x [K, N]`` with groups of ``group_size`` (-1: all of K).

    Depends on M (the bucket and the split) so it must run per call, outside
    any compiled graph: the op is opaque to torch.compile for this reason.
    Above the last bucket's M: :func:`dense_config`.
    """
    if M > DENSE_ABOVE_M:
        return dense_config()
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


def dense_config() -> TileConfig:
    """The ``dense`` configuration: a 64 x 128 dequantization tile per program (8 warps), then cuBLAS."""
    return TileConfig("dense", 0, 128, 64, 8, 1, dense=True)


def with_split(config: TileConfig, K: int, split_k: int) -> TileConfig:
    """``config`` with a forced split count (tests and sweeps); every split gets at least one BK tile."""
    k_tiles = _cdiv(K, config.BK)
    iters = _cdiv(k_tiles, max(1, min(split_k, k_tiles)))
    return dataclasses.replace(config, split_k=_cdiv(k_tiles, iters), k_per_split=iters * config.BK)


# Lists that record_configs() hands out; launch_w4a16_gemm appends each launch's TileConfig to every one.
RECORDERS: list[list[TileConfig]] = []


@contextlib.contextmanager
def record_configs() -> Iterator[list[TileConfig]]:
    """Within it, every W4A16 launch appends its :class:`TileConfig` to the yielded list.

    For tests that check which configuration a call (eager, compiled, or through a layer) ran. Outside it
    the launch path pays one empty-list test. CUDA-graph replays launch no Python and record nothing.
    """
    seen: list[TileConfig] = []
    RECORDERS.append(seen)
    try:
        yield seen
    finally:
        RECORDERS.remove(seen)
