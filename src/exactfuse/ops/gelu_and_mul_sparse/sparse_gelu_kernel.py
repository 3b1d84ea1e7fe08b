"""Triton kernels for ``gelu_and_mul_sparse``: row statistics, threshold, GELU and gate.

The whole-row kernel: one program holds ``BT`` whole rows (``BT = 1`` from
``d = 1024`` up) in registers: the gate is read once, reduced to its mean and
standard deviation, thresholded, passed through GELU and multiplied by ``up``;
one store. ``up`` is loaded after the statistics, so it is not live in
registers during the reductions (offline sm_90 compile, Triton 3.9, bf16, 32
warps: 64 registers, no spill at d = 32768, against 24 B of spill with ``up``
loaded next to the gate; Triton 3.6 on the H200 reports 22 registers spilled).

The looped kernel: one row per program in chunks, the gate read three times,
for wide rows in large batches. The split kernels: a row's chunks on separate
programs, statistics first (one launch), then the output (a second launch), for
very wide rows in small batches. ``heuristics.choose_plan`` picks one of
the three and configures it, with the measurements.

Numerics (see ``native.py`` for the eager sequence this mirrors):

- Every eager op on fp16/bf16 returns the activation dtype, so the kernel
  rounds to it at each operation boundary (``_round``; each call names the
  eager op it mirrors). ``ROUND`` is a bit mask of those boundaries, all on in
  the op; tests turn single bits off to show each one changes results.
- The GELU is the gated-activation kernel's ``activation`` (``exactfuse.ops.math``) (ATen's formulas).
- ``mean``: fp32 row sum times ``float(rows) / float(numel)``, as ATen's
  ``mean_kernel_impl`` (a multiply, not a division by ``d``).
- ``std``: ATen runs a fp32 Welford reduction and takes ``sqrt(m2 / n)`` with
  IEEE division and a correctly rounded sqrt (``div_rn``, ``sqrt_rn`` here).
  The kernel forms ``m2`` by a two-pass sum of ``(x - mean)^2`` around the fp32
  mean, in another order: a few fp32 ulp apart, so the rounded std (and the
  mean, summed in another order too) can land on the neighbouring fp16/bf16
  value in rare rows. That is the op's contract (row-bitwise on >= 99.9%).
- ``std * std_multiplier`` uses an explicitly rounded multiply so that the fp32
  path cannot contract it with the following add into an fma (eager runs them
  as two kernels).
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.gelu_and_mul_sparse import heuristics
from exactfuse.ops.math import activation, mul_rn
from exactfuse.registry.platform import interpreter_enabled

# Operation boundaries where eager rounds to the activation dtype (bits of ROUND).
ROUND_MEAN, ROUND_STD, ROUND_SCALED_STD, ROUND_CUTOFF, ROUND_SHIFTED, ROUND_GELU = 1, 2, 4, 8, 16, 32
ROUND_ALL = heuristics.ROUND_ALL
ROUND_BOUNDARIES = {
    "mean": ROUND_MEAN,
    "std": ROUND_STD,
    "std*m": ROUND_SCALED_STD,
    "mean+std*m": ROUND_CUTOFF,
    "gate-cutoff": ROUND_SHIFTED,
    "gelu": ROUND_GELU,
}

# F.relu is clamp_min(x, 0): NaN passes through, otherwise a max with 0, whose
# result for x = -0.0 is the platform's: CUDA's fmaxf is PTX max.f32, the same
# instruction tl.maximum lowers to; the CPU reference (x86 maxps) keeps -0.0,
# while the interpreter's tl.maximum (np.fmax) returns +0.0, so there we select.
if interpreter_enabled():

    @triton.jit
    def _relu(x):
        return tl.where(x < 0.0, 0.0, x)

else:

    @triton.jit
    def _relu(x):
        return tl.where(x != x, x, tl.maximum(x, 0.0))


@triton.jit
def _round(x, DT: tl.constexpr, ENABLED: tl.constexpr):
    """Round fp32 ``x`` to the activation dtype and back when ``ENABLED``."""
    if ENABLED:
        return x.to(DT).to(tl.float32)
    else:
        return x


@triton.jit
def _mean_factor(T, D):
    """ATen's MeanOps factor ``float(rows) / float(numel)`` for a ``[T, D]`` gate: mean = fp32 sum * factor.

    T as a tensor even when Inductor re-emits the kernel with a static T (a Python int).
    """
    T_t = tl.program_id(0) * 0 + T
    return tl.div_rn(T_t.to(tl.float32), (T_t.to(tl.int64) * D).to(tl.float32))


@triton.jit
def _cutoff(b_mean, b_m2, D, std_multiplier, DT: tl.constexpr, ROUND: tl.constexpr):
    """``mean + std * m`` from the fp32 mean and the sum of squared deviations, rounded as eager does."""
    b_mean = _round(b_mean, DT, ROUND & 1)  # mean() returns the dtype
    b_std = _round(tl.sqrt_rn(tl.div_rn(b_m2, D * 1.0)), DT, ROUND & 2)  # std() returns the dtype
    # cutoff = mean + std * m: two eager ops, each rounded.
    # std_multiplier as an fp32 tensor whatever form it arrives in: Inductor's re-emitted
    # kernel passed it as a Python float (which Triton 3.6's libdevice calls reject) in one
    # H200 run and as an fp64 argument in another; eager Triton passes fp32.
    m_std = tl.where(b_std == b_std, std_multiplier, std_multiplier).to(tl.float32)
    b_cut = _round(mul_rn(b_std, m_std), DT, ROUND & 4)  # std * m (fp32 opmath)
    return _round(b_mean + b_cut, DT, ROUND & 8)  # mean + (std * m)


@triton.jit
def _gate_up(b_g, b_u, b_cut, ACTIVATION: tl.constexpr, DT: tl.constexpr, ROUND: tl.constexpr):
    """``gelu(relu(gate - cutoff)) * up`` in DT from the fp32 gate, ``up`` as loaded and the cutoff."""
    b_s = _round(b_g - b_cut, DT, ROUND & 16)  # gate - cutoff
    b_r = _relu(b_s)  # F.relu: exact
    b_a = _round(activation(b_r, ACTIVATION), DT, ROUND & 32)  # F.gelu returns the dtype
    return (b_a * b_u.to(tl.float32)).to(DT)  # * up


@triton.jit(do_not_specialize=["T"])
def gelu_and_mul_sparse_kernel(
    p_x,
    p_y,
    T,
    D,
    stride_x,
    stride_y,
    std_multiplier,
    ACTIVATION: tl.constexpr,
    ROUND: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    INT64_INDEX: tl.constexpr,
):
    """``BT`` rows of ``y = gelu(relu(gate - (mean + std * m))) * up``, each row whole in registers.

    p_x: ``[T, 2D]`` rows ``stride_x`` apart, last dim contiguous.
    p_y: ``[T, D]`` rows ``stride_y`` apart, last dim contiguous.
    std_multiplier: fp32 scalar. constexpr: ACTIVATION (1 erf, 2 tanh), ROUND
    (boundary mask, 63 = all), BT rows per program, BD = next_power_of_2(D),
    INT64_INDEX (row offsets reach 2**31). T is not specialized, so one compile
    serves every batch size of a width class.
    """
    DT: tl.constexpr = p_y.dtype.element_ty
    i_t = tl.program_id(0)
    if INT64_INDEX:
        i_t = i_t.to(tl.int64)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = tl.arange(0, BD)
    m_td = (o_t[:, None] < T) & (o_d[None, :] < D)
    p_g = p_x + o_t[:, None] * stride_x + o_d[None, :]
    b_g = tl.load(p_g, mask=m_td, other=0.0).to(tl.float32)
    # gate.mean(-1), then gate.std(-1, unbiased=False): two-pass around the fp32 mean.
    b_mean = tl.sum(b_g, axis=1) * _mean_factor(T, D)
    b_dx = tl.where(m_td, b_g - b_mean[:, None], 0.0)
    b_cut = _cutoff(b_mean, tl.sum(b_dx * b_dx, axis=1), D, std_multiplier, DT, ROUND)
    # up after the statistics: fewer live registers; loaded with the gate it took 1.02-1.05x the time
    # up to d = 16384 and 1.22x at d = 32768 (docs/heuristics.md)
    b_u = tl.load(p_g + D, mask=m_td, other=0.0)
    b_y = _gate_up(b_g, b_u, b_cut[:, None], ACTIVATION, DT, ROUND)
    tl.store(p_y + o_t[:, None] * stride_y + o_d[None, :], b_y, mask=m_td)


@triton.jit(do_not_specialize=["T"])
def gelu_and_mul_sparse_looped_kernel(
    p_x,
    p_y,
    T,
    D,
    stride_x,
    stride_y,
    std_multiplier,
    ACTIVATION: tl.constexpr,
    ROUND: tl.constexpr,
    BC: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    KEEP_GATE: tl.constexpr = False,
):
    """One row per program in chunks of ``BC``: the same numerics as :func:`gelu_and_mul_sparse_kernel`,
    but the gate is read three times (sum, squared deviations, output; the second and third reads
    partly from L2) instead of being held whole in registers, so no block is padded to a power of
    two and nothing spills at d = 32768. The sums run in another order (per-lane accumulation over
    chunks, then one tree), which the op's row-bitwise contract allows. KEEP_GATE: L2 eviction
    hints that keep the gate for the re-reads (evict_last) and let the last reads and ``up`` go
    first (evict_first); the same results (``heuristics.looped_keep_gate`` says where).
    """
    DT: tl.constexpr = p_y.dtype.element_ty
    KEEP: tl.constexpr = "evict_last" if KEEP_GATE else ""
    LAST: tl.constexpr = "evict_first" if KEEP_GATE else ""
    i_t = tl.program_id(0)
    if INT64_INDEX:
        i_t = i_t.to(tl.int64)
    p_g = p_x + i_t * stride_x
    o_c = tl.arange(0, BC)
    acc = tl.zeros((BC,), dtype=tl.float32)
    for c0 in range(0, D, BC):
        acc += tl.load(p_g + c0 + o_c, mask=c0 + o_c < D, other=0.0, eviction_policy=KEEP).to(tl.float32)
    b_mean = tl.sum(acc, axis=0) * _mean_factor(T, D)
    acc = tl.zeros((BC,), dtype=tl.float32)
    for c0 in range(0, D, BC):
        m_c = c0 + o_c < D
        b_g = tl.load(p_g + c0 + o_c, mask=m_c, other=0.0, eviction_policy=KEEP).to(tl.float32)
        b_dx = tl.where(m_c, b_g - b_mean, 0.0)
        acc += b_dx * b_dx
    b_cut = _cutoff(b_mean, tl.sum(acc, axis=0), D, std_multiplier, DT, ROUND)
    for c0 in range(0, D, BC):
        m_c = c0 + o_c < D
        b_g = tl.load(p_g + c0 + o_c, mask=m_c, other=0.0, eviction_policy=LAST).to(tl.float32)
        b_u = tl.load(p_g + D + c0 + o_c, mask=m_c, other=0.0, eviction_policy=LAST)
        tl.store(p_y + i_t * stride_y + c0 + o_c, _gate_up(b_g, b_u, b_cut, ACTIVATION, DT, ROUND), mask=m_c)


@triton.jit
def gelu_and_mul_sparse_split_stats_kernel(p_x, p_stats, D, stride_x, BC: tl.constexpr, INT64_INDEX: tl.constexpr):
    """First of the split kernels: for chunk ``program_id(1)`` of gate row ``program_id(0)``, the fp32
    sum and the sum of squared deviations around the chunk's own mean, to ``p_stats[t, s, 0:2]``
    (``[T, S, 2]`` fp32 contiguous, ``S = program count along axis 1``).
    """
    i_t, i_s = tl.program_id(0), tl.program_id(1)
    if INT64_INDEX:
        i_t = i_t.to(tl.int64)
    o_c = i_s * BC + tl.arange(0, BC)
    m_c = o_c < D
    b_g = tl.load(p_x + i_t * stride_x + o_c, mask=m_c, other=0.0).to(tl.float32)
    b_sum = tl.sum(b_g, axis=0)
    b_dx = tl.where(m_c, b_g - tl.div_rn(b_sum, tl.minimum(D - i_s * BC, BC).to(tl.float32)), 0.0)
    p_s = p_stats + (i_t * tl.num_programs(1) + i_s) * 2
    tl.store(p_s, b_sum)
    tl.store(p_s + 1, tl.sum(b_dx * b_dx, axis=0))


@triton.jit(do_not_specialize=["T"])
def gelu_and_mul_sparse_split_apply_kernel(
    p_x,
    p_y,
    T,
    D,
    stride_x,
    stride_y,
    std_multiplier,
    p_stats,
    ACTIVATION: tl.constexpr,
    ROUND: tl.constexpr,
    BC: tl.constexpr,
    BS: tl.constexpr,
    INT64_INDEX: tl.constexpr,
):
    """Second of the split kernels: chunk ``program_id(1)`` of row ``program_id(0)`` of the output.

    Every program of a row combines the row's ``S`` chunk statistics in the same fixed order
    (``BS = next_power_of_2(S)``): mean = total sum times ATen's factor, and the squared
    deviations by Chan's rule, ``m2 = sum_s m2_s + n_s (mean_s - mean)^2`` around the fp32
    mean. The sums run in another order than eager's (the op's row-bitwise contract allows
    it), and identically in every program, so the row gets one cutoff. Then the same
    threshold, GELU and gate as the whole-row kernel on the chunk.
    """
    DT: tl.constexpr = p_y.dtype.element_ty
    i_t, i_s = tl.program_id(0), tl.program_id(1)
    if INT64_INDEX:
        i_t = i_t.to(tl.int64)
    S = tl.num_programs(1)
    o_s = tl.arange(0, BS)
    m_s = o_s < S
    p_s = p_stats + (i_t * S + o_s) * 2
    b_sum = tl.load(p_s, mask=m_s, other=0.0)
    b_n = tl.where(m_s, tl.minimum(D - o_s * BC, BC), 1).to(tl.float32)
    b_mean = tl.sum(b_sum, axis=0) * _mean_factor(T, D)
    b_dm = tl.where(m_s, tl.div_rn(b_sum, b_n) - b_mean, 0.0)
    b_m2 = tl.sum(tl.load(p_s + 1, mask=m_s, other=0.0) + b_n * b_dm * b_dm, axis=0)
    b_cut = _cutoff(b_mean, b_m2, D, std_multiplier, DT, ROUND)
    o_c = i_s * BC + tl.arange(0, BC)
    m_c = o_c < D
    p_g = p_x + i_t * stride_x + o_c
    b_g = tl.load(p_g, mask=m_c, other=0.0).to(tl.float32)
    b_u = tl.load(p_g + D, mask=m_c, other=0.0)
    tl.store(p_y + i_t * stride_y + o_c, _gate_up(b_g, b_u, b_cut, ACTIVATION, DT, ROUND), mask=m_c)
