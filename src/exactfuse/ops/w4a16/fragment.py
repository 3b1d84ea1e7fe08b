"""The fragment layout: 4-bit weights repacked once so that each lane's 32-bit word is its MMA operand.

``mma.sync.m16n8k16`` multiplies a 16 x 16 A tile held by a warp's 32 lanes, 8 values a lane in four
16-bit pairs: lane ``l`` holds rows ``r = l // 4`` and ``r + 8`` at columns ``c = 2 (l % 4)``,
``c + 1``, ``c + 8`` and ``c + 9``. The GEMM of ``w4a16_gemm_packed`` computes ``out^T = W^T a^T``,
so the weight is that A operand (rows: output columns ``n``; columns: ``k``) and 8 of its 4-bit codes
fit one int32 word. The layout stores, for every 16 columns of ``N`` (a tile) and every 64 rows of
``K`` (a chunk: four MMA k-steps ``j``), the 32 lanes' words four at a time:

``words [N / 16, K / 64, 32, 4]`` int32: lane ``l``'s word of k-step ``j`` at ``[tile, chunk, l, j]``,
so one 16-byte load gives a lane its four words of a chunk and a warp reads 512 contiguous bytes.

Inside a word, nibble ``i`` (bits ``4i .. 4i + 3``) holds the code of row
``r + 8 (i % 2)`` and k-position ``c + (i >= 4) + 8 ((i % 4) >= 2)``. Masking ``word >> 4t`` with
``0x000f000f`` then leaves the pair of nibbles ``(t, t + 4)`` in the two 16-bit halves: the low half
(the lower k-position) and the high half, exactly the operand register ``t`` of the MMA. OR-ing the
exponent of ``MAGIC`` (128 in bf16, 1024 in fp16, whose unit in the last place is 1) gives
``MAGIC + q`` in each half: one ``lop3`` per two weights and no shuffles.

Which ``k`` a k-position of step ``j`` stands for is a free choice (the MMA sums over it); the layout
takes the one that makes the activations' operand one 16-byte load too, with each step's two B registers
adjacent in it: lane ``l`` with ``q = l % 4`` reads the 16 activations ``64 chunk + 16 q .. + 15`` as eight
pairs, and k-position ``c + e`` (``e`` = 0, 1) of step ``j`` is ``k = 64 chunk + 16 q + 4 j + e`` (pair
``2 j``), ``c + 8 + e`` is ``k + 2`` (pair ``2 j + 1``).

The scales and zero points stay in GPTQ order, compact: 2 bytes a column a group, and half a byte more with
zero points (records of ``s`` and ``MAGIC + z`` laid out as the MMA's registers take them would be 8):

``scales [groups, N]`` in the activation dtype, contiguous: the scales as they are.

``zeros [groups, N / 8]`` int32, or None where every zero point is 8 (symmetric): column ``8 j + i``'s true
zero point (0..15) in nibble ``i`` (bits ``4i .. 4i + 3``) of word ``j`` of its group's row; a word of
``2**31`` or more is stored as its negative two's complement. A GPTQ "v1" zero point of 16 has no nibble:
:func:`pack` refuses it.

The dequantization is ``((MAGIC + q) - (MAGIC + z)) * s`` in the dtype: ``MAGIC + z`` (at most 1039) is
exact and so is the difference, so only the product rounds, once: the spec's ``(q - z) * s``. A chunk lies
in one group: the group size is a multiple of 64 (or one group spans K).

:func:`pack` takes the prepared GPTQ-order tensors of :mod:`~exactfuse.ops.w4a16.packing` (what
``W4A16Linear`` stores) and :func:`unpack` gives them back: exact inverses.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from exactfuse.ops.w4a16.packing import FLOAT_DTYPES, PACK, SYMMETRIC_ZERO, pack_rows, unpack_rows

TILE_N = 16  # output columns of one MMA tile
CHUNK_K = 64  # k rows of one lane's 16-byte load: four MMA k-steps of 16
LANES = 32
STEPS = CHUNK_K // 16  # words a lane loads per chunk
MAGIC = {torch.bfloat16: 128.0, torch.float16: 1024.0}


class FragmentW4A16(NamedTuple):
    """The arguments of ``w4a16_gemm_packed`` after ``a``: see the module docstring."""

    words: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    perm: torch.Tensor | None


def layout_unsupported(K: int, N: int, groups: int) -> str | None:
    """Why a ``[K, N]`` weight with ``groups`` scale rows has no fragment layout (None: it has)."""
    if K % CHUNK_K or N % TILE_N:
        return f"it needs K % {CHUNK_K} == 0 and N % {TILE_N} == 0 (K={K}, N={N})"
    if groups < 1 or K % groups or (groups > 1 and (K // groups) % CHUNK_K):
        return f"its groups must be a multiple of {CHUNK_K} rows, or one group (K={K}, {groups} groups)"
    return None


# k within a chunk is 16 qq + 4 j + 2 h + e and n within a tile is r + 8 b, where lane = 4 r + qq and
# nibble = 4 e + 2 h + b: the layout is a permutation of these axes
_Q_AXES = (5, 0, 7, 1, 2, 4, 3, 6)  # [chunk, qq, j, h, e, tile, b, r] -> [tile, chunk, r, qq, j, e, h, b]


def pack_codes(q: torch.Tensor) -> torch.Tensor:
    """``q [K, N]`` codes 0..15 -> ``words [N/16, K/64, 32, 4]`` int32."""
    K, N = q.shape
    axes = q.reshape(K // CHUNK_K, 4, STEPS, 2, 2, N // TILE_N, 2, 8).permute(_Q_AXES)
    nibbles = axes.reshape(N // TILE_N, K // CHUNK_K, LANES, STEPS, PACK).to(torch.int64)
    word = (nibbles << torch.arange(0, 32, 4, device=q.device, dtype=torch.int64)).sum(-1)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def unpack_codes(words: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`pack_codes`: ``q [K, N]`` int32 codes."""
    tiles, chunks = words.shape[:2]
    nibbles = (words.unsqueeze(-1) >> torch.arange(0, 32, 4, device=words.device, dtype=torch.int32)) & 0xF
    axes = nibbles.reshape(tiles, chunks, 8, 4, STEPS, 2, 2, 2)  # [tile, chunk, r, qq, j, e, h, b]
    inverse = [_Q_AXES.index(i) for i in range(8)]
    return axes.permute(inverse).reshape(chunks * CHUNK_K, tiles * TILE_N).contiguous()


def pack_zeros(zeros: torch.Tensor) -> torch.Tensor:
    """True zero points ``zeros [groups, N]`` (0..15) -> zero words ``[groups, N/8]`` int32: column ``8 j + i``
    in nibble ``i`` of word ``j`` (module docstring), whether or not every one is 8."""
    groups, N = zeros.shape
    if N % PACK:
        raise ValueError(f"fragment.pack_zeros: zeros' columns must be a multiple of {PACK}, got {list(zeros.shape)}")
    z = zeros.to(torch.int64)
    if z.numel() and not bool(((z >= 0) & (z <= 15)).all()):
        raise ValueError(
            f"fragment.pack_zeros: zero points must be 0..15 (a nibble), got {int(z.min())}..{int(z.max())}"
        )
    shifts = torch.arange(0, 32, 4, device=zeros.device, dtype=torch.int64)
    word = (z.reshape(groups, N // PACK, PACK) << shifts).sum(-1)  # distinct bits: the sum is the OR
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def unpack_zeros(zeros: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`pack_zeros`: ``[groups, N]`` uint8 zero points."""
    groups, words = zeros.shape
    shifts = torch.arange(0, 32, 4, device=zeros.device, dtype=torch.int32)
    nibbles = (zeros.unsqueeze(-1) >> shifts) & 0xF  # an arithmetic shift: the mask drops the sign's copies
    return nibbles.reshape(groups, words * PACK).to(torch.uint8)


def pack_scales(scales: torch.Tensor, zeros: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GPTQ-order ``scales [groups, N]`` (fp16/bf16) and true zero points ``zeros [groups, N]`` (0..15, or
    None: 8) -> ``(scales [groups, N]`` contiguous, ``zeros [groups, N/8]`` int32 :func:`pack_zeros` words, or
    None where every zero point is 8)."""
    if zeros is None or bool((zeros == SYMMETRIC_ZERO).all()):
        return scales.contiguous(), None
    return scales.contiguous(), pack_zeros(zeros)


def unpack_scales(scales: torch.Tensor, zeros: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of :func:`pack_scales`: ``(scales [groups, N], zeros [groups, N] uint8)``, all 8 where
    ``zeros`` is None."""
    if zeros is None:
        return scales, torch.full(scales.shape, SYMMETRIC_ZERO, dtype=torch.uint8, device=scales.device)
    return scales, unpack_zeros(zeros)


def pack(
    qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, perm: torch.Tensor | None = None
) -> FragmentW4A16:
    """The prepared GPTQ-order tensors (:class:`~exactfuse.ops.w4a16.packing.PreparedW4A16`, groups of a
    multiple of 64 rows or one group, zero points 0..15) in the fragment layout:
    ``w4a16_gemm_packed(a, *pack(qweight, scales, zeros, perm), bias)`` is ``w4a16_gemm``'s product."""
    if scales.dtype not in FLOAT_DTYPES:
        raise TypeError(f"fragment.pack: scales must be float16 or bfloat16, got {scales.dtype}")
    K, N = qweight.shape[0] * PACK, qweight.shape[1]
    if reason := layout_unsupported(K, N, scales.shape[0]):
        raise ValueError(f"fragment.pack: no fragment layout for this weight: {reason}")
    return FragmentW4A16(pack_codes(unpack_rows(qweight)), *pack_scales(scales, zeros), perm)


def unpack(
    words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(qweight [K/8, N], scales [groups, N], zeros [groups, N] uint8)`` in GPTQ order (zeros all 8 where
    ``zeros`` is None)."""
    return pack_rows(unpack_codes(words)), *unpack_scales(scales, zeros)


def dequantize(words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None) -> torch.Tensor:
    """The ``[K, N]`` weight in ``scales``' dtype: ``((MAGIC + q) - (MAGIC + z)) * s``, each step exact but
    the last, rounded once (the spec's ``(q - z) * s`` in the dtype)."""
    q = unpack_codes(words)
    K, dtype = q.shape[0], scales.dtype
    rows = torch.arange(K, device=q.device) // (K // scales.shape[0])
    z = SYMMETRIC_ZERO if zeros is None else unpack_zeros(zeros)[rows].to(dtype)
    return ((q.to(dtype) + MAGIC[dtype]) - (z + MAGIC[dtype])) * scales[rows]
