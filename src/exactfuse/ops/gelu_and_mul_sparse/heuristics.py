"""Launch choice of ``gelu_and_mul_sparse``'s Triton kernels (``sparse_gelu_kernel.py``): which kernel runs ``T``
rows of ``D`` outputs, with its block or chunk and num_warps, as a :class:`SparsePlan`.

Eager calls choose by ``T`` and ``D`` (:func:`choose_plan`). A traced call, whose ``T`` is symbolic,
takes :func:`traced_plan`, a choice of ``D`` alone that is correct for every ``T``, so a compiled
graph never guards on the token count. docs/heuristics.md has the sweeps behind every number here.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactfuse.utils import next_power_of_2

MAX_D = 32768  # the widest row the kernels take; wider rows fall back to native (supports_args)
KERNELS = ("whole", "looped", "split")
ROUND_ALL = 63  # every rounding boundary of the eager sequence (triton.ROUND_BOUNDARIES)


@dataclass(frozen=True)
class SparsePlan:
    """One launch: ``kernel`` in :data:`KERNELS`; ``block`` is the whole-row kernel's power-of-two row
    block or the chunked kernels' chunk; ``round_mask`` the rounding boundaries applied (tests turn
    single ones off to show each matters; the op applies all)."""

    kernel: str
    block: int
    num_warps: int
    round_mask: int = ROUND_ALL

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"SparsePlan: kernel must be one of {KERNELS}, got {self.kernel!r}")


# num_warps of the whole-row kernel per block width BD (a program covers max(BD, 1024) elements) and
# load: (few, mid, many) programs, a grid of <= 1, (1, 3) or >= 3 programs per SM. Few rows take more
# warps (a row's reduction latency is the time), many rows fewer. Over 42 swept shapes this table is
# 1.002x the per-shape best geomean (1.027x at worst), a single column 1.026x (docs/heuristics.md).
WARPS_BY_BD = {
    1024: (8, 8, 4),
    2048: (16, 8, 4),
    4096: (16, 16, 8),
    8192: (32, 16, 16),
    16384: (32, 32, 32),
    32768: (32, 32, 32),
}
MID_LOAD = 1

LOOP_CHUNK, LOOP_WARPS = 4096, 16
LOOP_MIN_T, LOOP_MIN_D = 1024, 8192
SPLIT_CHUNK, SPLIT_WARPS = 2048, 8
SPLIT_ABOVE_D, SPLIT_MAX_T = 8192, 16
SPLIT_WIDE_D, SPLIT_WIDE_MAX_T = 16384, 64  # rows the whole-row kernel pads or spills
# The looped kernel asks L2 to keep the gate for its re-reads above this width (its KEEP_GATE):
# d = 32768 0.90-0.91x the time, d = 8192-16384 1.006-1.026x (docs/heuristics.md).
LOOP_KEEP_GATE_ABOVE_D = 16384


def sparse_config(D: int, T: int = 1, num_sms: int = 132) -> tuple[int, int, int]:
    """``(BT, BD, num_warps)`` of the whole-row kernel for ``T`` rows of ``D``.

    ``BD`` spans the whole row; rows narrower than 1024 are stacked ``BT`` to a program so that a
    program covers 1024 elements. ``num_warps`` depends on the width and on how many programs each SM
    gets (:data:`WARPS_BY_BD`).
    """
    if not 1 <= D <= MAX_D:
        raise ValueError(f"gelu_and_mul_sparse: d must be in [1, {MAX_D}] for the Triton kernel, got {D}")
    BD = next_power_of_2(D)
    BT = max(1, 1024 // BD)
    return BT, BD, WARPS_BY_BD[max(BD, 1024)][load_class(-(-T // BT), num_sms)]


def load_class(programs: int, num_sms: int) -> int:
    """0, 1 or 2 for a grid of <= 1, (1, 3) or >= 3 programs per SM (the index into :data:`WARPS_BY_BD`)."""
    return 0 if programs <= num_sms else 1 if programs < 3 * num_sms else 2


def looped_keep_gate(D: int) -> bool:
    """Whether the looped kernel runs with its L2 eviction hints at width ``D``."""
    return D > LOOP_KEEP_GATE_ABOVE_D


def choose_plan(T: int, D: int, num_sms: int = 132) -> SparsePlan:
    """The eager plan for ``T`` rows of ``D`` outputs.

    - ``looped`` for wide rows in large batches (d >= 8192, T >= 1024): at T in {1024, 2048} it takes
      0.96x (d = 8192) to 0.66x (d = 24576) the whole-row kernel's time.
    - ``split`` for wide rows in small batches, where one program per row leaves most SMs idle: d > 8192
      at T <= 16, and d > 16384 at T <= 64 (d = 16384 0.89x, d = 32768 0.57x the whole row's time at
      T in {1, 4, 16, 64}; at d = 8192 it was 1.19x, so the whole row stays there).
    - ``whole`` otherwise.
    """
    if D >= LOOP_MIN_D and T >= LOOP_MIN_T:
        return SparsePlan("looped", LOOP_CHUNK, LOOP_WARPS)
    if D > SPLIT_ABOVE_D and (T <= SPLIT_MAX_T or (D > SPLIT_WIDE_D and T <= SPLIT_WIDE_MAX_T)):
        return SparsePlan("split", SPLIT_CHUNK, SPLIT_WARPS)
    _, BD, warps = sparse_config(D, T, num_sms)
    return SparsePlan("whole", BD, warps)


def traced_plan(D: int) -> SparsePlan:
    """The plan of a traced call (symbolic ``T``): ``D`` alone decides, so one trace serves every ``T``.

    The whole-row kernel at its mid-load warps up to d = 16384, where it is within the eager choices'
    margins at both ends of T (at d = 16384: split 0.89x at T <= 16, looped 0.79x at T >= 1024); the
    split kernels above, whose grid of (rows, chunks) fills the GPU at T = 1 and which pads nothing at
    d = 32768, where the whole row is 2.2x split's time in small batches.
    """
    if D > SPLIT_WIDE_D:
        return SparsePlan("split", SPLIT_CHUNK, SPLIT_WARPS)
    _, BD, _ = sparse_config(D)
    return SparsePlan("whole", BD, WARPS_BY_BD[max(BD, 1024)][MID_LOAD])


def default_plan(kernel: str, T: int, D: int, num_sms: int = 132) -> SparsePlan:
    """``kernel``'s shipped configuration for ``T`` rows of ``D`` (tests and sweeps force a kernel with it)."""
    if kernel == "looped":
        return SparsePlan(kernel, LOOP_CHUNK, LOOP_WARPS)
    if kernel == "split":
        return SparsePlan(kernel, SPLIT_CHUNK, SPLIT_WARPS)
    _, BD, warps = sparse_config(D, T, num_sms)
    return SparsePlan(kernel, BD, warps)


def warmup_batches(D: int, num_sms: int = 132) -> tuple[int, ...]:
    """Batch sizes that between them reach every launch :func:`choose_plan` makes for width ``D``."""
    BT = sparse_config(D)[0]
    return (1, SPLIT_MAX_T + 1, SPLIT_WIDE_MAX_T + 1, BT * (num_sms + 1), BT * 3 * num_sms, LOOP_MIN_T)
