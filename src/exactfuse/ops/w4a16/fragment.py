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

The scales and zero points of each group are repacked beside it, in the activation dtype:
``scales [groups, N / 16, 8, 8]``: for tile row ``r``: ``s_r, s_r, s_{r+8}, s_{r+8}, MAGIC + z_r`` twice
and ``MAGIC + z_{r+8}`` twice: the four 32-bit pairs the dequantization multiplies and subtracts.
``MAGIC + z`` (at most 143 or 1039) is exact in the dtype. A chunk lies in one group: the group size
is a multiple of 64 (or one group spans K).

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


def pack_scales(scales: torch.Tensor, zeros: torch.Tensor | None) -> torch.Tensor:
    """``scales [groups, N]`` (fp16/bf16) and true zero points ``zeros [groups, N]`` (or None: 8) ->
    ``[groups, N/16, 8, 8]`` in ``scales``' dtype (module docstring)."""
    groups, N = scales.shape
    z = torch.full_like(scales, SYMMETRIC_ZERO) if zeros is None else zeros.to(scales.dtype)
    zz = z + MAGIC[scales.dtype]  # exact: an integer below 2^11
    s, zz = scales.view(groups, N // TILE_N, 2, 8), zz.view(groups, N // TILE_N, 2, 8)  # [g, tile, half, r]
    parts = (s[:, :, 0], s[:, :, 0], s[:, :, 1], s[:, :, 1], zz[:, :, 0], zz[:, :, 0], zz[:, :, 1], zz[:, :, 1])
    return torch.stack(parts, dim=-1).contiguous()


def unpack_scales(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of :func:`pack_scales`: ``(scales [groups, N], zeros [groups, N] uint8)``."""
    groups, tiles = packed.shape[:2]
    s = torch.stack((packed[..., 0], packed[..., 2]), dim=2).reshape(groups, tiles * TILE_N)
    zz = torch.stack((packed[..., 4], packed[..., 6]), dim=2).reshape(groups, tiles * TILE_N)
    return s, (zz.float() - MAGIC[packed.dtype]).to(torch.uint8)


def pack(
    qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, perm: torch.Tensor | None = None
) -> FragmentW4A16:
    """The prepared GPTQ-order tensors (:class:`~exactfuse.ops.w4a16.packing.PreparedW4A16`, groups of a
    multiple of 64 rows or one group) in the fragment layout."""
    if scales.dtype not in FLOAT_DTYPES:
        raise TypeError(f"fragment.pack: scales must be float16 or bfloat16, got {scales.dtype}")
    K, N = qweight.shape[0] * PACK, qweight.shape[1]
    if reason := layout_unsupported(K, N, scales.shape[0]):
        raise ValueError(f"fragment.pack: no fragment layout for this weight: {reason}")
    return FragmentW4A16(pack_codes(unpack_rows(qweight)), pack_scales(scales, zeros), perm)


def unpack(words: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(qweight [K/8, N], scales [groups, N], zeros [groups, N] uint8)`` in GPTQ order."""
    s, z = unpack_scales(scales)
    return pack_rows(unpack_codes(words)), s, z


def dequantize(words: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The ``[K, N]`` weight in ``scales``' dtype: ``((MAGIC + q) - (MAGIC + z)) * s``, each step exact but
    the last, rounded once (the spec's ``(q - z) * s`` in the dtype)."""
    q = unpack_codes(words)
    K, N = q.shape
    groups, dtype = scales.shape[0], scales.dtype
    pairs = scales[..., 0::2]  # [groups, tile, r, 4]: s_r, s_{r+8}, MAGIC + z_r, MAGIC + z_{r+8}
    s = torch.stack((pairs[..., 0], pairs[..., 1]), dim=2).reshape(groups, N)
    zz = torch.stack((pairs[..., 2], pairs[..., 3]), dim=2).reshape(groups, N)
    rows = torch.arange(K, device=q.device) // (K // groups)
    return ((q.to(dtype) + MAGIC[dtype]) - zz[rows]) * s[rows]
