"""The shared memory of ``w4a16_gemm_packed``'s kernels (``packed_kernel.py``, ``packed_wgmma_kernel.py``): the
ring (:func:`_ring`), its slots' layouts and the ``SharedLinearLayout`` views through which the consumer warps
read a slot as ``mma.fragment_step``'s register tensors (offset bits -> tensor coordinates)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

WORDS_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
SCALES_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
ZEROS_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
ACTS_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=3)


@gluon.constexpr_function
def _bits(n: int) -> int:
    assert n >= 1 and n & (n - 1) == 0, f"{n} is not a power of two"
    return n.bit_length() - 1


@gluon.constexpr_function
def _unit(rank: int, dim: int, value: int) -> list[int]:
    return [value if i == dim else 0 for i in range(rank)]


@gluon.constexpr_function
def words_view(warps, tiles, unroll):
    """Words slot ``[W T, U, 128]`` as ``[R, T, U, 4]`` (row ``r = 32 w + lane``): offset -> coordinates."""
    bases = [_unit(4, 3, 1), _unit(4, 3, 2)] + [_unit(4, 0, 1 << i) for i in range(5)]
    bases += [_unit(4, 2, 1 << i) for i in range(_bits(unroll))] + [_unit(4, 1, 1 << i) for i in range(_bits(tiles))]
    bases += [_unit(4, 0, 32 << i) for i in range(_bits(warps))]
    return gl.SharedLinearLayout(bases)


@gluon.constexpr_function
def scales_view(warps, tiles, units):
    """Scales slot ``[RU, 16 W T]`` (16-bit) as ``[W, 8, 1, T, RU, 2]``: lane ``4 row + q`` reads the scales of
    its tile's columns ``row`` and ``row + 8`` (q reads the same)."""
    bases = [_unit(6, 1, 1 << i) for i in range(3)] + [_unit(6, 5, 1)]
    bases += [_unit(6, 3, 1 << i) for i in range(_bits(tiles))] + [_unit(6, 0, 1 << i) for i in range(_bits(warps))]
    bases += [_unit(6, 4, 1 << i) for i in range(_bits(units))]
    return gl.SharedLinearLayout(bases)


@gluon.constexpr_function
def zeros_view(warps, tiles, units):
    """Zero-point slot ``[RU, max(2 W T, 32)]`` (int32 words of 8 nibbles; a row at least 128 bytes, a TMA
    destination's alignment) as ``[W, 1, 1, T, RU, 2]``: a tile's two words, columns 0-7 and 8-15 (every lane of
    the warp reads them); the words past ``2 W T`` in a row are padding, read by no coordinate (offset bits
    whose basis is zero: a coordinate's offset has them clear)."""
    bases = [_unit(6, 5, 1)] + [_unit(6, 3, 1 << i) for i in range(_bits(tiles))]
    bases += [_unit(6, 0, 1 << i) for i in range(_bits(warps))]
    bases += [[0] * 6 for _ in range(_bits(max(2 * warps * tiles, 32)) - _bits(2 * warps * tiles))]
    bases += [_unit(6, 4, 1 << i) for i in range(_bits(units))]
    return gl.SharedLinearLayout(bases)


@gluon.constexpr_function
def acts_view(blocks, unroll):
    """Activations slot ``[U, 8 B, 32]`` (128-byte swizzle: 16-byte unit ``^= row % 8``) as ``[1, 8, 4, B, U, 8]``:
    lane ``4 row + q`` reads pairs ``8 q ..`` of row ``8 b + row``, pairs 0-3 then 4-7 (``x0``, ``x1``)."""
    bases = [_unit(6, 5, 1), _unit(6, 5, 2), _unit(6, 5, 4), _unit(6, 2, 1), _unit(6, 2, 2)]
    bases += [[0, 1, 0, 0, 0, 4], [0, 2, 1, 0, 0, 0], [0, 4, 2, 0, 0, 0]]  # row bits, with the swizzle's XOR
    bases += [_unit(6, 3, 1 << i) for i in range(_bits(blocks))] + [_unit(6, 4, 1 << i) for i in range(_bits(unroll))]
    return gl.SharedLinearLayout(bases)


@gluon.jit
def _ring(STAGES: gl.constexpr, T_CTA: gl.constexpr, UNROLL: gl.constexpr, RU: gl.constexpr,
          HAS_ZEROS: gl.constexpr, ROWS: gl.constexpr, RELEASES: gl.constexpr):  # fmt: skip
    """The ring's shared memory: words, scales, zero points and activations (``ROWS`` rows of ``a``) a slot,
    a "ready" mbarrier a slot (one TMA transaction) and an "empty" one (``RELEASES`` arrivals)."""
    w_ring = gl.allocate_shared_memory(gl.int32, [STAGES, T_CTA, UNROLL, 128], WORDS_SMEM)
    s_ring = gl.allocate_shared_memory(gl.int16, [STAGES, RU, T_CTA * 16], SCALES_SMEM)
    # a zero-point row: the tile group's 2 T_CTA words, at least 128 bytes (a TMA destination's alignment)
    ZW: gl.constexpr = (T_CTA * 2 if T_CTA * 2 >= 32 else 32) if HAS_ZEROS else 4
    z_ring = gl.allocate_shared_memory(gl.int32, [STAGES, RU, ZW], ZEROS_SMEM)
    a_ring = gl.allocate_shared_memory(gl.int32, [STAGES, UNROLL, ROWS, 32], ACTS_SMEM)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=RELEASES)
    return w_ring, s_ring, z_ring, a_ring, ready, empty_bars


# A shared-memory slot seen through another shape and layout: ``reinterpret`` from Triton 3.7, ``_reinterpret``
# before (the device's Triton 3.6)
if hasattr(gl.shared_memory_descriptor, "reinterpret"):

    @gluon.jit
    def _view(slot, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
        return slot.reinterpret(dtype, shape, layout)

else:

    @gluon.jit
    def _view(slot, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
        return slot._reinterpret(dtype, shape, layout)
