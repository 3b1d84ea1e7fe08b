"""The fused W4A16 tile: 4-bit weights dequantized in registers, fused into a tl.dot GEMM (M <= 128;
``heuristics`` has the measurements), launched by ``launch.py``.

:func:`w4a16_gemm_kernel` computes one ``[BM, BN]`` output tile over one
slice of K. Without split-K it rounds and stores the output itself. With split-K
(deterministic mode, the default) each slice writes its fp32 partial to a workspace
``[S, M, N]`` and counts its arrival on the tile's counter; the last slice to arrive
sums the S partials in the fixed order s = 0, 1, ... and stores the output, so results
are bitwise reproducible run to run in one launch. With ``deterministic=False`` slices
``atomic_add`` into a zeroed ``[M, N]`` fp32 buffer instead (summation order varies run
to run) and ``splitk.w4a16_splitk_reduce_kernel`` rounds it in a second launch.

Dequantization matches the native spec bit for bit: ``(q - z)`` as an fp32
integer times the fp32 scale is exact, then one rounding to the activation
dtype. The dot accumulates in fp32; the output is rounded once, then ``+ bias``
is added in fp32 and rounded again, as eager ``matmul(a, W) + bias`` rounds.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.w4a16.dequant import dequant_kn_tile
from exactfuse.ops.w4a16.splitk import finish_tile


@triton.jit(do_not_specialize=["M", "groups"])
def w4a16_gemm_kernel(
    p_a,
    p_qw,
    p_s,
    p_z,
    p_perm,
    p_bias,
    p_out,
    p_ws,
    p_count,
    M,
    N,
    K,
    stride_am,
    K_PER_SPLIT,
    GROUP: tl.constexpr,
    GROUPS_PER_TILE: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
    HAS_PERM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SPLIT: tl.constexpr,
    ATOMIC: tl.constexpr,
    FIXUP: tl.constexpr,
    EVEN_K: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    p_gi,
    groups,
    HAS_GROUP_INDEX: tl.constexpr,
):
    """One ``[BM, BN]`` tile of ``a[:, perm] @ W`` over K slice ``program_id(1)``.

    p_a: ``[M, K]`` rows ``stride_am`` apart, unit last stride, fp16/bf16.
    p_qw: ``[K/8, N]`` int32 contiguous, k at bits ``4 * (k % 8)`` of row ``k // 8``.
    p_s / p_z: ``[K/GROUP, N]`` scales (a's dtype) / uint8 zero points, contiguous; with
    HAS_GROUP_INDEX ``[groups, N]``, row ``k``'s being ``p_gi[k]`` (``[K]`` int32/int64).
    p_perm: ``[K]`` int column of ``a`` for each prepared K row. p_bias: ``[N]``.
    p_out: ``[M, N]`` in a's dtype. p_ws: the fp32 workspace ``[S, M, N]`` (SPLIT) or
    ``[M, N]`` (SPLIT and ATOMIC). p_count: int32 arrival counters, one per output tile,
    zero on entry and left zero (SPLIT, not ATOMIC). constexpr: GROUP (a power of two; one
    group of all K is passed as next_pow2(K)), GROUPS_PER_TILE (BK // GROUP when
    a tile spans several groups, else 1), the feature flags, tile sizes.
    """
    i_mn = tl.program_id(0)
    i_s = tl.program_id(1)
    # Grouped ordering: GROUP_M row tiles share a column tile of W in L2.
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    first_m = (i_mn // width) * GROUP_M
    rows = tl.minimum(num_m - first_m, GROUP_M)
    i_m = first_m + (i_mn % width) % rows
    i_n = (i_mn % width) // rows
    if INT64_INDEX:
        i_m = i_m.to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    o_n = i_n * BN + tl.arange(0, BN)
    m_m = o_m < M
    m_n = o_n < N
    DT = p_a.dtype.element_ty

    k_start = i_s * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_start, k_end, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        o_ka = tl.load(p_perm + o_k, mask=m_k, other=0) if HAS_PERM else o_k
        p_ab = p_a + o_m[:, None] * stride_am + o_ka[None, :]
        if HAS_PERM:  # a perm entry outside [0, K) reads 0, never outside a's row
            b_a = tl.load(p_ab, mask=m_m[:, None] & (m_k & (o_ka >= 0) & (o_ka < K))[None, :], other=0.0)
        elif EVEN_K:
            b_a = tl.load(p_ab, mask=m_m[:, None], other=0.0)
        else:
            b_a = tl.load(p_ab, mask=m_m[:, None] & m_k[None, :], other=0.0)
        b_w = dequant_kn_tile(p_qw, p_s, p_z, p_gi, k0, o_n, m_n, N, K, groups, GROUP, GROUPS_PER_TILE, HAS_ZEROS,
                              HAS_GROUP_INDEX, EVEN_K, BK, BN)  # fmt: skip
        b_w = b_w.to(DT)
        acc = tl.dot(b_a, b_w, acc)

    m_mn = m_m[:, None] & m_n[None, :]
    finish_tile(acc, p_out, p_bias, p_ws, p_count, i_mn, i_s, o_m, o_n, m_mn, M, N, HAS_BIAS, SPLIT, ATOMIC, FIXUP)
