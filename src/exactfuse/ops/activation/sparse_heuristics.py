"""Launch choice of ``gelu_and_mul_sparse``'s Triton kernels (``sparse_triton``): which kernel runs
``T`` rows of ``D`` outputs, its block or chunk and its num_warps. Static rules from sweeps on the
H200; each states its measurements.
"""

from __future__ import annotations

from exactfuse.utils import next_power_of_2

MAX_D = 32768  # the widest row the kernels take; wider rows fall back to native (supports_args)


# num_warps per block width BD (a program covers BT * BD = max(BD, 1024) elements) and load:
# (few, mid, many) programs, i.e. a grid of <= 1, (1, 3) or >= 3 programs per SM. From
# scripts/gpu/sweep_sparse_warps.py on the H200 (Triton 3.6, bf16; session 2 at T in {1, 64, 1024},
# benchmarks/results/h200/sweeps/sweep_sparse_warps*.txt; session 4 at T in {1, 16, ..., 1024}
# for d <= 8192, sweeps/sweep_sparse_warps_s4.txt). Few rows take more warps (a row's reduction
# latency is the time), many rows fewer (more programs share an SM): d = 2048 T = 16 2.25 -> 2.14
# µs at 16 warps; d = 1024 T = 1024 4.43 -> 3.99 at 4; d = 8192 T = 512 10.55 -> 9.89 at 16.
# Over session 4's 42 swept shapes the single table used before (8 / 8 / 16 / 32 / 32 / 32) was
# 1.026x slower than per-shape best geomean, 1.19x at worst (d = 3000, T = 512); this table,
# read from the same run, is 1.002x, 1.027x at worst (d = 2048, T = 512: 4 warps, best 8).
# d = 32768 spills 22 registers a thread at 32 warps (64 registers; 42 at 16 warps, 74 at 8),
# and 32 warps is still the fastest.
WARPS_BY_BD = {
    1024: (8, 8, 4),
    2048: (16, 8, 4),
    4096: (16, 16, 8),
    8192: (32, 16, 16),
    16384: (32, 32, 32),
    32768: (32, 32, 32),
}


def sparse_config(D: int, T: int = 1, num_sms: int = 132) -> tuple[int, int, int]:
    """Static launch heuristic ``(BT, BD, num_warps)`` of the whole-row kernel for ``T`` rows of ``D``.

    ``BD`` spans the whole row; rows narrower than 1024 are stacked ``BT`` to a program so that a
    program covers 1024 elements. ``num_warps`` depends on the width and on how many programs
    each SM gets (:data:`WARPS_BY_BD`): every batch size reuses one of three compiles.
    """
    if not 1 <= D <= MAX_D:
        raise ValueError(f"gelu_and_mul_sparse: d must be in [1, {MAX_D}] for the Triton kernel, got {D}")
    BD = next_power_of_2(D)
    BT = max(1, 1024 // BD)
    return BT, BD, WARPS_BY_BD[max(BD, 1024)][load_class(-(-T // BT), num_sms)]


def load_class(programs: int, num_sms: int) -> int:
    """0, 1 or 2 for a grid of <= 1, (1, 3) or >= 3 programs per SM (the index into :data:`WARPS_BY_BD`)."""
    return 0 if programs <= num_sms else 1 if programs < 3 * num_sms else 2


# The other kernels' (chunk, num_warps) and the batches they serve (choose_kernel has the measurements).
LOOP_CHUNK, LOOP_WARPS = 4096, 16
LOOP_MIN_T, LOOP_MIN_D = 1024, 8192
SPLIT_CHUNK, SPLIT_WARPS = 2048, 8
SPLIT_ABOVE_D, SPLIT_MAX_T = 8192, 16
SPLIT_WIDE_D, SPLIT_WIDE_MAX_T = 16384, 64  # rows the whole-row kernel pads or spills
KERNELS = ("whole", "looped", "split")
# The looped kernel asks L2 to keep the gate for its re-reads above this width (its KEEP_GATE).
# Session 5, side by side in one run (scripts/gpu/probe_sparse_ceiling.py --keep-gate,
# benchmarks/results/h200/sweeps/probe_sparse_keep_gate_s5g.txt, bf16, outputs bitwise equal),
# time with / without: d = 32768 0.911 (T = 1024, 66.8 -> 60.9 µs) and 0.896 (T = 2048,
# 127.2 -> 114.0 µs); d = 8192-16384 1.006-1.026, so not there. No width between 16384 and 32768
# was measured.
LOOP_KEEP_GATE_ABOVE_D = 16384


def looped_keep_gate(D: int) -> bool:
    """Whether the looped kernel runs with its L2 eviction hints at width ``D``."""
    return D > LOOP_KEEP_GATE_ABOVE_D


def choose_kernel(T: int, D: int, num_sms: int = 132) -> tuple[str, int, int]:
    """``(kernel, block, num_warps)`` for ``T`` rows of ``D`` outputs: ``"whole"`` (block = the row's
    power-of-two block, :func:`sparse_config`), ``"looped"`` or ``"split"`` (block = the chunk).

    - ``looped`` for wide rows in large batches (d >= 8192, T >= 1024). Session 3 on the H200
      (benchmarks/results/h200/sweeps/sweep_sparse_loop_s3.txt, bf16, geomean µs over
      T in {1024, 2048}, whole row -> chunk 4096 at 16 warps): d = 8192 26.1 -> 25.1,
      12288 53.0 -> 35.8, 16384 56.6 -> 44.8, 24576 98.6 -> 65.4, 32768 108.4 -> 90.7. Below
      T = 1024 the whole row was as fast or faster up to d = 16384 (d = 16384 T = 64: 5.8
      against 6.8).
    - ``split`` for wide rows in small batches, where one program per row leaves most SMs idle:
      d > 8192 at T <= 16, and d > 16384 at T <= 64. Session 4
      (benchmarks/results/h200/sweeps/sweep_sparse_split_s4.txt, bf16, geomean µs over
      T in {1, 4, 16, 64}, whole row -> chunk 2048 at 8 warps): d = 12288 4.77 -> 4.45, 16384
      4.88 -> 4.35, 24576 8.58 -> 5.08, 32768 8.98 -> 5.08; d = 8192 3.44 -> 4.08 (whole kept).
      At T = 64 the whole row stays faster up to d = 16384 (d = 12288: 5.36 against the best
      chunk's 5.84).
    - ``whole`` otherwise.
    """
    if D >= LOOP_MIN_D and T >= LOOP_MIN_T:
        return "looped", LOOP_CHUNK, LOOP_WARPS
    if D > SPLIT_ABOVE_D and (T <= SPLIT_MAX_T or (D > SPLIT_WIDE_D and T <= SPLIT_WIDE_MAX_T)):
        return "split", SPLIT_CHUNK, SPLIT_WARPS
    _, BD, warps = sparse_config(D, T, num_sms)
    return "whole", BD, warps


def warmup_batches(D: int, num_sms: int = 132) -> tuple[int, ...]:
    """Batch sizes that between them reach every launch :func:`choose_kernel` makes for width ``D``."""
    BT = sparse_config(D)[0]
    return (1, SPLIT_MAX_T + 1, SPLIT_WIDE_MAX_T + 1, BT * (num_sms + 1), BT * 3 * num_sms, LOOP_MIN_T)


# The chunked kernels' shipped (chunk, num_warps), for a forced ``kernel=`` in tests and sweeps.
DEFAULTS = {"looped": (LOOP_CHUNK, LOOP_WARPS), "split": (SPLIT_CHUNK, SPLIT_WARPS)}
