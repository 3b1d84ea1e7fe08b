"""W4A16 dequantization in Triton: the tile both paths share and the dense path.

:func:`dequant_kn_tile` is the spec's dequantization of one ``[BK, BN]`` tile of the prepared
weight; the fused GEMM (``tile_kernel.py``) feeds it to ``tl.dot``, and :func:`w4a16_dequant_kernel`
stores it into a dense weight for :func:`dense_gemm`, the configuration the heuristic picks
above M = 128 (``heuristics.py`` has the measurements).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from exactfuse.ops.w4a16.heuristics import TileConfig
from exactfuse.registry.platform import interpreter_enabled
from exactfuse.utils import empty


@triton.jit
def _unpack_kn_tile(p_qw, k0, o_n, m_n, N, K, EVEN_K: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr):
    """The 4-bit codes of prepared rows ``k0 .. k0 + BK`` and columns ``o_n``: ``[BK, BN]`` int32 (0 past K
    when not EVEN_K, and outside ``m_n``)."""
    o_j = tl.arange(0, BK // 8)
    m_r = (k0 // 8 + o_j) < K // 8
    m_q = m_n[None, :] if EVEN_K else m_r[:, None] & m_n[None, :]
    # [BK/8, 1, BN] words -> [BK/8, 8, BN] nibbles -> [BK, BN]: row 8r + j is nibble j of word r. The
    # words are loaded as a 3-D tile so that the load's layout (consecutive columns per thread) carries
    # through the unpack to the shared-memory stores of the MMA operand: vector stores, 38 STS against
    # 133 for a 2-D load broadcast to 3-D (decode tile, Triton 3.6, sweeps/sass_w4a16_load3d_swap_ab.txt);
    # side by side 0.93 the time at M <= 16, 0.74 at M = 32, 0.84-0.86 at M 64-128 (sweeps/w4a16_load3d_ab.txt).
    p_q = p_qw + (k0 // 8 + o_j)[:, None, None] * N + o_n[None, None, :]
    b_q = tl.load(p_q, mask=m_q[:, None, :], other=0)
    return tl.reshape((b_q >> (tl.arange(0, 8) * 4)[None, :, None]) & 0xF, (BK, BN))


@triton.jit
def dequant_kn_tile(
    p_qw,
    p_s,
    p_z,
    p_gi,
    k0,
    o_n,
    m_n,
    N,
    K,
    groups,
    GROUP: tl.constexpr,
    GROUPS_PER_TILE: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
    HAS_GROUP_INDEX: tl.constexpr,
    EVEN_K: tl.constexpr,
    BK: tl.constexpr,
    BN: tl.constexpr,
):
    """``(q - z) * s`` in fp32 (exact) for prepared rows ``k0 .. k0 + BK`` and columns ``o_n``: ``[BK, BN]``.

    Rounding it to the activation dtype gives the spec's dequantized weight. Words past K (not EVEN_K)
    and columns outside ``m_n`` read as 0. With HAS_GROUP_INDEX, row ``k`` takes scale (and zero) row
    ``p_gi[k]`` of ``groups`` (a scale of 0 outside ``[0, groups)``) instead of ``k // GROUP``. Pointers
    and the constexprs as in :func:`w4a16_gemm_kernel`.
    """
    b_q = _unpack_kn_tile(p_qw, k0, o_n, m_n, N, K, EVEN_K, BK, BN)
    if HAS_GROUP_INDEX:
        o_k = k0 + tl.arange(0, BK)
        o_g = tl.load(p_gi + o_k, mask=o_k < K, other=-1).to(tl.int64)
        m_g = ((o_g >= 0) & (o_g < groups))[:, None] & m_n[None, :]
        # the offsets stay contiguous along N (no tl.where on them: it hides that from the compiler, and
        # each scale became a scalar load); the mask keeps a row outside [0, groups) from reading
        p_g = o_g[:, None] * N + o_n[None, :]
        b_s = tl.load(p_s + p_g, mask=m_g, other=0.0).to(tl.float32)
        b_z = tl.load(p_z + p_g, mask=m_g, other=8).to(tl.int32) if HAS_ZEROS else 8
    elif GROUPS_PER_TILE == 1:
        o_g = k0 // GROUP
        b_s = tl.load(p_s + o_g * N + o_n, mask=m_n, other=0.0).to(tl.float32)[None, :]
        b_z = tl.load(p_z + o_g * N + o_n, mask=m_n, other=0).to(tl.int32)[None, :] if HAS_ZEROS else 8
    else:
        o_g = k0 // GROUP + tl.arange(0, GROUPS_PER_TILE)
        m_g = (o_g < K // GROUP)[:, None] & m_n[None, :]
        b_s = tl.load(p_s + o_g[:, None] * N + o_n[None, :], mask=m_g, other=0.0).to(tl.float32)
        b_s = tl.reshape(tl.broadcast_to(b_s[:, None, :], (GROUPS_PER_TILE, GROUP, BN)), (BK, BN))
        if HAS_ZEROS:
            b_z = tl.load(p_z + o_g[:, None] * N + o_n[None, :], mask=m_g, other=0).to(tl.int32)
            b_z = tl.reshape(tl.broadcast_to(b_z[:, None, :], (GROUPS_PER_TILE, GROUP, BN)), (BK, BN))
        else:
            b_z = 8
    return (b_q - b_z).to(tl.float32) * b_s


@triton.jit(do_not_specialize=["groups"])
def w4a16_dequant_kernel(
    p_qw,
    p_s,
    p_z,
    p_gi,
    p_w,
    N,
    K,
    groups,
    GROUP: tl.constexpr,
    GROUPS_PER_TILE: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
    HAS_GROUP_INDEX: tl.constexpr,
    EVEN_K: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    BK: tl.constexpr,
    BN: tl.constexpr,
):
    """Dense weight ``p_w [K, N]`` (the scales' dtype, contiguous) = the spec's dequantization, one
    ``[BK, BN]`` tile per program; the ``dense`` configuration multiplies it with ``torch.matmul``.
    """
    k0 = tl.program_id(0) * BK
    if INT64_INDEX:
        k0 = k0.to(tl.int64)
    o_n = tl.program_id(1) * BN + tl.arange(0, BN)
    m_n = o_n < N
    b_w = dequant_kn_tile(p_qw, p_s, p_z, p_gi, k0, o_n, m_n, N, K, groups, GROUP, GROUPS_PER_TILE, HAS_ZEROS,
                          HAS_GROUP_INDEX, EVEN_K, BK, BN)  # fmt: skip
    o_k = k0 + tl.arange(0, BK)
    m_w = (o_k < K)[:, None] & m_n[None, :]
    tl.store(p_w + o_k[:, None] * N + o_n[None, :], b_w.to(p_w.dtype.element_ty), mask=m_w)


def dequantize_dense(
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    G: int,
    cfg: TileConfig,
    group_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """The spec's dense ``[K, N]`` weight in the scales' dtype (prepared row order), one ``[cfg.BK, cfg.BN]``
    tile per program; with ``group_index``, each row's group from it."""
    K, N = qweight.shape[0] * 8, qweight.shape[1]
    w = empty((K, N), scales.dtype, scales.device)
    grid = (triton.cdiv(K, cfg.BK), triton.cdiv(N, cfg.BN))
    per_row = group_index is not None
    torch.library.wrap_triton(w4a16_dequant_kernel)[grid](
        qweight,
        scales,
        zeros if zeros is not None else qweight,
        group_index if per_row else qweight,
        w,
        N,
        K,
        scales.shape[0],
        GROUP=max(G, 1),
        GROUPS_PER_TILE=cfg.BK // G if 0 < G < cfg.BK else 1,
        HAS_ZEROS=zeros is not None,
        HAS_GROUP_INDEX=per_row,
        EVEN_K=K % cfg.BK == 0,
        INT64_INDEX=max(K, scales.shape[0]) * N >= 2**31,
        BK=cfg.BK,
        BN=cfg.BN,
        num_warps=cfg.num_warps,
    )
    return w


@triton.jit
def fragment_dequant_kernel(
    p_words, p_s, p_z, p_w, N, chunks, group_chunks, HAS_ZEROS: tl.constexpr, CB: tl.constexpr, TN: tl.constexpr,
):  # fmt: skip
    """Dense weight ``p_w [K, N]`` (the scales' dtype, contiguous) from the fragment layout (``fragment.py``):
    16-column tiles ``TN program_id(0) ..`` by chunks ``CB program_id(1) ..`` of 64 rows a program, stored as
    rows of ``16 TN`` columns.

    p_words: ``[N/16, K/64, 32, 4]`` int32; p_s: ``[groups, N]`` scales, contiguous (a group is
    ``group_chunks`` chunks); p_z: ``[groups, N/8]`` int32 zero words, column ``8 j + i`` in nibble ``i`` of
    word ``j`` (read only with HAS_ZEROS; zero point 8 without). Word ``[tile, c, 4 r + qq, j]``, nibble
    ``4 e + 2 h + b`` is the code of row ``k = 64 c + 16 qq + 4 j + 2 h + e`` and column
    ``n = 16 tile + r + 8 b``, whose zero point is nibble ``r`` of zero word ``2 tile + b`` (``n // 8``).
    ``((2^23 + q) - (2^23 + z)) * s`` in fp32, each ``2^23 + q`` the code OR-ed into 2^23's bits (no integer
    conversion), is exact but the product, rounded once to the dtype: ``fragment.dequantize``'s bits
    (``((MAGIC + q) - (MAGIC + z)) * s`` in the dtype, whose steps are exact but the product's rounding).
    HAS_ZEROS, CB and TN are constexpr.
    """
    t0 = tl.program_id(0) * TN
    c0 = tl.program_id(1) * CB
    o_t = tl.arange(0, TN)[:, None, None, None, None]
    o_c = tl.arange(0, CB)[None, :, None, None, None]
    o_r = tl.arange(0, 8)[None, None, :, None, None]
    o_q = tl.arange(0, 4)[None, None, None, :, None]
    o_j = tl.arange(0, 4)[None, None, None, None, :]
    m_w = (t0 + o_t < N // 16) & (c0 + o_c < chunks)
    b_words = tl.load(p_words + (((t0 + o_t) * chunks + c0 + o_c) * 32 + o_r * 4 + o_q) * 4 + o_j, mask=m_w, other=0)
    b_code = (b_words[:, :, :, :, :, None] >> (tl.arange(0, 8) * 4)) & 0xF  # [t, c, r, qq, j, nibble]
    b_code = tl.reshape(b_code, [TN, CB, 8, 4, 4, 2, 2, 2])  # nibble 4 e + 2 h + b
    b_code = tl.reshape(tl.permute(b_code, [1, 3, 4, 6, 5, 0, 7, 2]), [CB, 64, 16 * TN])  # [c] x [k] x [n]
    o_g = ((c0 + tl.arange(0, CB)) // group_chunks)[:, None, None]
    o_n = (t0 * 16 + tl.arange(0, 16 * TN))[None, None, :]
    m_s = (o_g < (chunks + group_chunks - 1) // group_chunks) & (o_n < N)
    b_s = tl.load(p_s + o_g * N + o_n, mask=m_s, other=0.0).to(tl.float32)  # [CB, 1, 16 TN]
    if HAS_ZEROS:
        b_zw = tl.load(p_z + o_g * (N // 8) + o_n // 8, mask=m_s, other=0)
        b_z = (((b_zw >> (o_n % 8 * 4)) & 0xF) | 0x4B000000).to(tl.float32, bitcast=True)
    else:
        b_z = 8388616.0  # 2^23 + 8
    value = ((b_code | 0x4B000000).to(tl.float32, bitcast=True) - b_z) * b_s
    o_k = (c0 * 64 + tl.arange(0, CB * 64))[:, None]
    o_n = t0 * 16 + tl.arange(0, 16 * TN)[None, :]
    m = (o_k < chunks * 64) & (o_n < N)
    tl.store(p_w + o_k.to(tl.int64) * N + o_n, tl.reshape(value, [CB * 64, 16 * TN]).to(p_w.dtype.element_ty), mask=m)


# a program of fragment_dequant_kernel: CHUNKS chunks of 64 rows by TILES 16-column tiles, [128, 64] values,
# stored as 128-byte rows
FRAGMENT_DEQUANT_CHUNKS = 2
FRAGMENT_DEQUANT_TILES = 4


def dense_from_fragment(words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None) -> torch.Tensor:
    """The ``[K, N]`` weight of the fragment layout (``words [N/16, K/64, 32, 4]`` int32, ``scales [groups, N]``
    fp16/bf16, ``zeros [groups, N/8]`` int32 or None) in ``scales``' dtype, in one kernel (the bits of
    ``fragment.dequantize``, the spec's)."""
    tiles, chunks = words.shape[:2]
    scales = scales.contiguous()
    w = empty((chunks * 64, tiles * 16), scales.dtype, scales.device)
    cb, tn = FRAGMENT_DEQUANT_CHUNKS, FRAGMENT_DEQUANT_TILES
    torch.library.wrap_triton(fragment_dequant_kernel)[(triton.cdiv(tiles, tn), triton.cdiv(chunks, cb))](
        words, scales, zeros.contiguous() if zeros is not None else words, w, tiles * 16, chunks,
        chunks // scales.shape[0], HAS_ZEROS=zeros is not None, CB=cb, TN=tn,
    )  # fmt: skip
    return w


@triton.jit
def gather_columns_kernel(p_a, p_perm, p_order, p_out, K, stride_a_m, stride_a_k, HAS_PERM: tl.constexpr,
                          HAS_ORDER: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Row ``program_id(0)`` of ``out = a[:, perm[order]]`` (``perm`` / ``order`` the identity where absent),
    ``BLOCK`` columns a program: 0 where an entry of ``perm`` is outside [0, K); ``order`` is a permutation."""
    m = tl.program_id(0).to(tl.int64)
    o_k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m_k = o_k < K
    col = o_k.to(tl.int64)
    if HAS_ORDER:
        col = tl.load(p_order + o_k, mask=m_k, other=0).to(tl.int64)
    if HAS_PERM:
        col = tl.load(p_perm + col, mask=m_k, other=0).to(tl.int64)
    ok = m_k & (col >= 0) & (col < K)
    v = tl.load(p_a + m * stride_a_m + col * stride_a_k, mask=ok, other=0)
    tl.store(p_out + m * K + o_k, v, mask=m_k)


def permuted_columns(a: torch.Tensor, perm: torch.Tensor | None, order: torch.Tensor | None = None) -> torch.Tensor:
    """``a[:, perm[order]]`` (``perm`` or ``order`` None: the identity) as a new contiguous tensor, 0 where an
    entry of ``perm`` is outside [0, K) (as the fused kernels read it): the act-order activations of the paths
    that do not gather in the kernel, and the wgmma kernel's k order (``order``, a permutation). One kernel
    where Triton runs, torch's index ops elsewhere."""
    M, K = a.shape
    if not (a.is_cuda or interpreter_enabled()):
        index = torch.arange(K, device=a.device) if order is None else order.to(torch.int64)
        if perm is not None:
            index = perm.to(torch.int64)[index]
        return torch.where((index >= 0) & (index < K), a.index_select(1, index.clamp(0, K - 1)), 0)
    out = empty((M, K), a.dtype, a.device)
    if M == 0 or K == 0:
        return out
    block = min(1024, triton.next_power_of_2(K))
    torch.library.wrap_triton(gather_columns_kernel)[(M, triton.cdiv(K, block))](
        a, perm if perm is not None else a, order if order is not None else a, out, K, a.stride(0), a.stride(1),
        HAS_PERM=perm is not None, HAS_ORDER=order is not None, BLOCK=block,
    )  # fmt: skip
    return out


def packed_dense_gemm(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """``w4a16_gemm_packed`` as the ``dense`` configuration: the fragment layout dequantized into a
    ``[K, N]`` buffer (:func:`dense_from_fragment`), then the spec's ``torch.matmul`` (+ bias): bitwise
    equal to native, at the cost of ``2 * K * N`` transient bytes."""
    w = dense_from_fragment(words, scales, zeros)
    if perm is not None:
        a = permuted_columns(a, perm)
    out = torch.matmul(a, w)
    return out if bias is None else out + bias


def dense_gemm(
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
    G: int,
    cfg: TileConfig,
    group_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``dense`` configuration: dequantize W into a ``[K, N]`` buffer, then the spec's own
    ``torch.matmul`` (+ bias): bitwise equal to native, at the cost of ``2 * K * N`` transient bytes.
    """
    w = dequantize_dense(qweight, scales, zeros, G, cfg, group_index)
    if perm is not None:
        a = permuted_columns(a, perm)
    out = torch.matmul(a, w)
    return out if bias is None else out + bias
