"""A warp-specialized, stream-K W4A16 decode kernel (Gluon, sm_90a), its launch rule and launcher: a prototype
that ``probe_w4a16_ws.py`` checks and times beside the shipped fragment kernel.

``w4a16_ws_kernel`` computes what ``mma.w4a16_fragment_kernel`` computes, from the same inputs (fragment
layout words, scale records, activations, optional bias), with the same dequantization and products, but
moves the operands and deals the work differently: a producer warp issues TMA copies of each step's words,
scale records and activations into a ring of ``STAGES`` shared-memory slots (a "ready" and an "empty"
mbarrier a slot) and the consumer warps read them with 16-byte shared loads, then dequantize and multiply
exactly as the shipped kernel's ``fragment_step`` does (reused). The grid is persistent and stream-K: the
work units' (tile group, row block) K steps, laid end to end, are cut into one equal contiguous share a
CTA, so every SM streams the same number of weight bytes whatever the layer's shape; a unit cut between
CTAs is summed by the last of its pieces to arrive, in the CTAs' order (K order): deterministic, though not
the split-K kernel's bits (its pieces differ). The grid (``stream_k``) is every SM, or fewer CTAs where that
cuts each unit into the same number of pieces and the busiest CTA's chunks, each piece's cost counted, are
fewer (whole units a CTA at 4096 x 14336: a piece costs about 2 µs).

Slots (int32): words ``[TILES num_warps, UNROLL, 128]`` (a lane's four words of a chunk are 16 contiguous
bytes, a warp's 512: conflict-free without a swizzle), scale records ``[1 or UNROLL, TILES num_warps, 32]``
(one box when a step lies in one group) and activations ``[UNROLL, 8 BLOCKS, 32]`` with the 128-byte swizzle
(two rows of a quarter-warp's 16-byte loads fall in different banks). The consumer views each slot through a
``SharedLinearLayout`` that maps it onto the shipped kernel's register tensors (``[R, TILES, UNROLL, 4]``
and ``[R, BLOCKS, UNROLL, 4]``, R = 32 num_warps), lanes and warps that read the same records or
activations loading them as a broadcast.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16.dequant import permuted_columns
from exactfuse.ops.w4a16.mma import (
    _DEQUANT_BF16,
    _DEQUANT_FP16,
    _MMA_BF16,
    _MMA_FP16,
    _barrier,
    _store_out,
    fragment_step,
)
from exactfuse.utils import empty

# a TMA load into shared memory: ``async_load`` from Triton 3.7, ``async_copy_global_to_shared`` before
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
WORDS_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
RECS_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
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
def recs_view(warps, tiles, units):
    """Records slot ``[RU, W T, 32]`` as ``[W, 8, 1, T, RU, 4]`` (lane ``4 row + q``; q reads the same record)."""
    bases = [_unit(6, 5, 1), _unit(6, 5, 2)] + [_unit(6, 1, 1 << i) for i in range(3)]
    bases += [_unit(6, 3, 1 << i) for i in range(_bits(tiles))] + [_unit(6, 0, 1 << i) for i in range(_bits(warps))]
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


@gluon.jit
def _cta_range(total):
    """This CTA's stream-K share ``[begin, end)`` of the ``total`` steps, the units' steps laid end to end:
    ``c total // P`` to ``(c + 1) total // P`` (never empty: the grid is at most ``total`` CTAs)."""
    c = gl.program_id(0)
    p = gl.num_programs(0)
    return c * total // p, (c + 1) * total // p


@gluon.jit
def _piece(u, begin, end, steps):
    """The steps ``[s0, s1)`` of unit ``u`` that fall in ``[begin, end)``."""
    return gl.maximum(begin, u * steps) - u * steps, gl.minimum(end, (u + 1) * steps) - u * steps


@gluon.jit
def _gdc_wait():
    """``griddepcontrol.wait``: the previous kernel of the stream has finished and its writes are visible (a
    no-op without a programmatic dependent launch)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _gdc_launch_dependents():
    """``griddepcontrol.launch_dependents``: the next kernel of the stream may start once every CTA has said so."""
    gl.inline_asm_elementwise(
        "griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )


@gluon.jit
def _load_weights(w_desc, r_desc, w_slot, r_slot, bar, i, steps, n_groups, GROUP_CHUNKS: gl.constexpr,
                  T_CTA: gl.constexpr, UNROLL: gl.constexpr, SAME_GROUP: gl.constexpr):  # fmt: skip
    """Step ``i`` of the units laid end to end: its words and scale records into a slot, by TMA."""
    c = (i % steps) * UNROLL
    pid_n = (i // steps) % n_groups
    _tma_load(w_desc, [pid_n * T_CTA, c, 0], bar, w_slot)
    if SAME_GROUP:
        _tma_load(r_desc, [c // GROUP_CHUNKS, pid_n * T_CTA, 0], bar, r_slot)
    else:
        for j in gl.static_range(UNROLL):
            _tma_load(r_desc, [(c + j) // GROUP_CHUNKS, pid_n * T_CTA, 0], bar, r_slot.slice(j, 1))


@gluon.jit
def _load_acts(a_desc, a_slot, bar, i, steps, n_groups, BLOCKS: gl.constexpr, UNROLL: gl.constexpr):
    """Step ``i``'s activations into a slot, by TMA."""
    _tma_load(a_desc, [(i % steps) * UNROLL, (i // steps) // n_groups * BLOCKS * 8, 0], bar, a_slot)


@gluon.jit
def _producer(
    w_desc, r_desc, a_desc, w_ring, r_ring, a_ring, ready, empty_bars, n_groups, steps, total,
    GROUP_CHUNKS: gl.constexpr, T_CTA: gl.constexpr, BLOCKS: gl.constexpr, UNROLL: gl.constexpr,
    STAGES: gl.constexpr, SAME_GROUP: gl.constexpr, PDL: gl.constexpr,
):  # fmt: skip
    """One warp: each step's words, records and activations into the next free slot, by TMA, in the order the
    consumers take them (this CTA's share of the steps). With ``PDL`` the first ring's weights go out before
    the wait for the previous kernel (they do not depend on it), its activations after."""
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    BYTES: gl.constexpr = 4 * (T_CTA * UNROLL * 128 + RU * T_CTA * 32 + UNROLL * BLOCKS * 8 * 32)
    begin, end = _cta_range(total)
    ahead = gl.minimum(end - begin, STAGES if PDL else 0)  # fresh slots filled around the wait
    for i in range(begin, begin + ahead):
        bar = ready.index(i - begin)
        mbarrier.expect(bar, BYTES)
        _load_weights(w_desc, r_desc, w_ring.index(i - begin), r_ring.index(i - begin), bar, i, steps, n_groups,
                      GROUP_CHUNKS, T_CTA, UNROLL, SAME_GROUP)  # fmt: skip
    if PDL:
        _gdc_wait()
    for i in range(begin, begin + ahead):
        _load_acts(a_desc, a_ring.index(i - begin), ready.index(i - begin), i, steps, n_groups, BLOCKS, UNROLL)
    slot = ahead % STAGES
    phase = 1 - ahead // STAGES  # a fresh slot's wait for the phase before its first passes at once
    for i in range(begin + ahead, end):
        mbarrier.wait(empty_bars.index(slot), phase)
        bar = ready.index(slot)
        mbarrier.expect(bar, BYTES)
        _load_weights(w_desc, r_desc, w_ring.index(slot), r_ring.index(slot), bar, i, steps, n_groups,
                      GROUP_CHUNKS, T_CTA, UNROLL, SAME_GROUP)  # fmt: skip
        _load_acts(a_desc, a_ring.index(slot), bar, i, steps, n_groups, BLOCKS, UNROLL)
        slot += 1
        if slot == STAGES:
            slot = 0
            phase ^= 1
    if PDL:
        _gdc_launch_dependents()


@gluon.jit
def _operands(w_slot, r_slot, a_slot, R: gl.constexpr, TILES: gl.constexpr, BLOCKS: gl.constexpr,
              U: gl.constexpr, RU: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """A slot's words and records ``[R, T, U, 4]`` and activations ``x0``, ``x1`` ``[R, B, U, 4]`` in the
    shipped kernel's register layouts (``fragment_step``'s inputs), by 16-byte shared loads."""
    LWU: gl.constexpr = gl.BlockedLayout([1, TILES, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    LAU: gl.constexpr = gl.BlockedLayout([1, BLOCKS, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    words = _view(w_slot, gl.int32, [R, TILES, U, 4], words_view(num_warps, TILES, U)).load(LWU)
    L_REC: gl.constexpr = gl.BlockedLayout(
        [1, 1, 1, TILES, RU, 4], [1, 8, 4, 1, 1, 1], [num_warps, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1, 0]
    )
    rec = _view(r_slot, gl.int32, [num_warps, 8, 1, TILES, RU, 4], recs_view(num_warps, TILES, RU)).load(L_REC)
    rec = gl.broadcast(rec, gl.full([num_warps, 8, 4, TILES, RU, 4], 0, gl.int32, layout=L_REC))[0]
    rec = gl.reshape(rec, [R, TILES, RU, 4])
    if RU != U:  # one group a step: the same record for every chunk
        rec = gl.broadcast(rec, gl.full([R, TILES, U, 4], 0, gl.int32, layout=rec.type.layout))[0]
    recs = gl.convert_layout(rec, LWU)
    L_ACT: gl.constexpr = gl.BlockedLayout(
        [1, 1, 1, BLOCKS, U, 8], [1, 8, 4, 1, 1, 1], [num_warps, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1, 0]
    )
    x = _view(a_slot, gl.int32, [1, 8, 4, BLOCKS, U, 8], acts_view(BLOCKS, U)).load(L_ACT)
    x = gl.broadcast(x, gl.full([num_warps, 8, 4, BLOCKS, U, 8], 0, gl.int32, layout=L_ACT))[0]
    x = gl.permute(gl.reshape(x, [R, BLOCKS, U, 2, 4]), [0, 1, 2, 4, 3])
    x0, x1 = gl.split(x)
    return words, recs, gl.convert_layout(x0, LAU), gl.convert_layout(x1, LAU)


@gluon.jit
def _consumer(
    w_ring, r_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N, n_groups, steps, total,
    HAS_BIAS: gl.constexpr, BLOCKS: gl.constexpr, TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr,
    SAME_GROUP: gl.constexpr, PIECES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """The default partition: each unit's piece of this CTA's share as ``fragment_step`` from the ring, then
    its epilogue."""
    DT: gl.constexpr = p_out.dtype.element_ty
    DEQUANT: gl.constexpr = _DEQUANT_BF16 if gl.bfloat16 == DT else _DEQUANT_FP16
    MMA: gl.constexpr = _MMA_BF16 if gl.bfloat16 == DT else _MMA_FP16
    R: gl.constexpr = 32 * num_warps
    U: gl.constexpr = UNROLL
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    LW: gl.constexpr = gl.BlockedLayout([1, TILES, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    LA: gl.constexpr = gl.BlockedLayout([1, BLOCKS, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    L3: gl.constexpr = gl.BlockedLayout([1, TILES, BLOCKS], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    LT: gl.constexpr = gl.SliceLayout(2, L3)
    LB: gl.constexpr = gl.SliceLayout(1, L3)
    slot = 0
    phase = 0
    begin, end = _cta_range(total)
    for u in range(begin // steps, (end + steps - 1) // steps):
        s0, s1 = _piece(u, begin, end, steps)
        acc0 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc1 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc2 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc3 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        for _ in range(s0, s1):
            mbarrier.wait(ready.index(slot), phase)
            words, recs, x0, x1 = _operands(
                w_ring.index(slot), r_ring.index(slot), a_ring.index(slot), R, TILES, BLOCKS, U, RU, num_warps
            )
            # The slot goes back once every warp has read it: the barrier orders the shared loads before
            # thread 0's arrival (Triton adds another before the next wait).
            _barrier()
            mbarrier.arrive(empty_bars.index(slot))
            acc0, acc1, acc2, acc3 = fragment_step(
                words, recs, x0, x1, acc0, acc1, acc2, acc3, LW, LA, LT, LB, U, DEQUANT, MMA
            )
            slot += 1
            if slot == STAGES:
                slot = 0
                phase ^= 1
        _epilogue(acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, u, s0, s1, begin, steps, total,
                  n_groups, LT, LB, R, TILES, BLOCKS, HAS_BIAS, PIECES, num_warps)  # fmt: skip


@gluon.jit
def _epilogue(
    acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, u, s0, s1, begin, steps, total, n_groups,
    LT: gl.constexpr, LB: gl.constexpr, R: gl.constexpr, TILES: gl.constexpr, BLOCKS: gl.constexpr,
    HAS_BIAS: gl.constexpr, PIECES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """A unit's piece: stored (with the bias) when it is the whole unit; else kept in this CTA's workspace
    slot (0: the unit it began in, 1: the unit it ends in) and, by the last piece to arrive, the unit's
    pieces summed in K order (the CTAs' order), rounded and stored."""
    pid_n = u % n_groups
    pid_m = u // n_groups
    o_row = gl.arange(0, R, layout=gl.SliceLayout(1, LT))
    lane_t = gl.expand_dims(o_row % 32, 1)
    tile = gl.expand_dims((pid_n * num_warps + o_row // 32) * TILES, 1) + gl.expand_dims(
        gl.arange(0, TILES, layout=gl.SliceLayout(0, LT)), 0
    )
    block = gl.expand_dims(gl.arange(0, BLOCKS, layout=gl.SliceLayout(0, LB)), 0)
    lane_b = gl.expand_dims(gl.convert_layout(o_row % 32, gl.SliceLayout(1, LB), assert_trivial=True), 1)
    o_n = gl.broadcast(gl.expand_dims(tile * 16 + lane_t // 4, 2), acc0)[0]
    o_m = gl.broadcast(gl.expand_dims((pid_m * BLOCKS + block) * 8 + (lane_b % 4) * 2, 1), acc0)[0]
    if (s0 == 0) & (s1 == steps):
        _store_out(acc0, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS)
        _store_out(acc1, p_out, p_bias, o_m + 1, o_n, M, N, HAS_BIAS)
        _store_out(acc2, p_out, p_bias, o_m, o_n + 8, M, N, HAS_BIAS)
        _store_out(acc3, p_out, p_bias, o_m + 1, o_n + 8, M, N, HAS_BIAS)
    else:
        ROWS: gl.constexpr = 8 * BLOCKS
        COLS: gl.constexpr = 16 * TILES * num_warps
        at = (o_m - pid_m * ROWS) * COLS + o_n - pid_n * COLS  # the outputs' offsets in a slot
        p = gl.num_programs(0)
        mine = p_ws + (gl.program_id(0) * 2 + (u != begin // steps).to(gl.int32)) * (ROWS * COLS)
        gl.store(mine + at, acc0)
        gl.store(mine + at + COLS, acc1)
        gl.store(mine + at + 8, acc2)
        gl.store(mine + at + COLS + 8, acc3)
        _barrier()
        first = ((u * steps + 1) * p - 1) // total  # the CTAs whose shares hold the unit's first and last steps
        last = ((u + 1) * steps * p - 1) // total
        arrived = gl.atomic_add(p_count + u, 1, sem="acq_rel", scope="gpu")
        if arrived == last - first:
            _finish(p_out, p_bias, p_ws, at, o_m, o_n, M, N, u, first, last, steps, total, ROWS * COLS, HAS_BIAS,
                    PIECES)  # fmt: skip
            _finish(p_out, p_bias, p_ws, at + COLS, o_m + 1, o_n, M, N, u, first, last, steps, total,
                    ROWS * COLS, HAS_BIAS, PIECES)  # fmt: skip
            _finish(p_out, p_bias, p_ws, at + 8, o_m, o_n + 8, M, N, u, first, last, steps, total, ROWS * COLS,
                    HAS_BIAS, PIECES)  # fmt: skip
            _finish(p_out, p_bias, p_ws, at + COLS + 8, o_m + 1, o_n + 8, M, N, u, first, last, steps, total,
                    ROWS * COLS, HAS_BIAS, PIECES)  # fmt: skip
            gl.store(p_count + u, 0)


@gluon.jit
def _finish(p_out, p_bias, p_ws, at, o_m, o_n, M, N, u, first, last, steps, total, SLOT: gl.constexpr,
            HAS_BIAS: gl.constexpr, PIECES: gl.constexpr):  # fmt: skip
    """Unit ``u``'s pieces of these outputs (CTAs ``first`` .. ``last``, at most ``PIECES``) summed in the
    CTAs' order (a masked piece adds +0.0, which leaves any sum as it is, -0.0 aside), rounded and stored."""
    p = gl.num_programs(0)
    acc = gl.load(p_ws + (first * 2 + (u != (first * total // p) // steps).to(gl.int32)) * SLOT + at,
                  cache_modifier=".cg")  # fmt: skip
    for i in gl.static_range(1, PIECES):  # independent loads: in flight together
        cta = first + i
        slot = cta * 2 + (u != (cta * total // p) // steps).to(gl.int32)
        acc += gl.load(p_ws + slot * SLOT + at, mask=cta <= last, other=0.0, cache_modifier=".cg")
    _store_out(acc, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS)


@gluon.jit(do_not_specialize=["M"])
def w4a16_ws_kernel(
    w_desc, r_desc, a_desc, p_bias, p_out, p_ws, p_count, M, N, n_groups, steps, total,
    GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, BLOCKS: gl.constexpr, TILES: gl.constexpr,
    UNROLL: gl.constexpr, STAGES: gl.constexpr, PIECES: gl.constexpr, PDL: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``a @ W``, stream-K: the units (``16 TILES num_warps`` columns by ``8 BLOCKS`` rows, tile groups fastest)
    have ``steps`` steps of ``UNROLL`` chunks of 64 rows each; laid end to end they are ``total`` steps, and
    CTA ``c`` of ``P`` takes steps ``c total // P`` to ``(c + 1) total // P`` (a unit cut between CTAs is
    finished by its last piece to arrive, at most ``PIECES`` of them, in a fixed order: deterministic).
    Descriptors: w_desc over words ``[N/16, K/64, 128]`` (box ``[T num_warps, U, 128]``), r_desc over records
    ``[groups, N/16, 32]`` int32 (box ``[1, T num_warps, 32]``), a_desc over activations as ``[K/64, M, 32]``
    int32 pairs (box ``[U, 8 B, 32]``, 128-byte swizzle; rows past M read as zeros). ``p_ws``: two fp32 slots
    of ``8 BLOCKS x 16 T num_warps`` a CTA; ``p_count``: a zeroed int32 counter a unit, left zeroed."""
    T_CTA: gl.constexpr = TILES * num_warps
    SAME_GROUP: gl.constexpr = GROUP_CHUNKS % UNROLL == 0
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    w_ring = gl.allocate_shared_memory(gl.int32, [STAGES, T_CTA, UNROLL, 128], WORDS_SMEM)
    r_ring = gl.allocate_shared_memory(gl.int32, [STAGES, RU, T_CTA, 32], RECS_SMEM)
    a_ring = gl.allocate_shared_memory(gl.int32, [STAGES, UNROLL, BLOCKS * 8, 32], ACTS_SMEM)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=1)
    gl.warp_specialize(
        [
            (_consumer, (w_ring, r_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N, n_groups,
                         steps, total, HAS_BIAS, BLOCKS, TILES, UNROLL, STAGES, SAME_GROUP, PIECES, num_warps)),
            (_producer, (w_desc, r_desc, a_desc, w_ring, r_ring, a_ring, ready, empty_bars, n_groups, steps, total,
                         GROUP_CHUNKS, T_CTA, BLOCKS, UNROLL, STAGES, SAME_GROUP, PDL)),
        ],
        [1],
        [24],
    )  # fmt: skip


def ws_config(M: int, N: int, K: int, tiles=0, unroll=2, stages=0, warps=4, per_sm=1) -> dict:
    """``launch_ws``'s arguments: one block of 8 rows up to M = 8, two to 16; 2 tiles a warp where N allows,
    ``unroll`` chunks a step, ``per_sm`` CTAs of ``warps`` consumer warps an SM and the ring deep enough for
    48 KB of weights an SM (at most 16 slots)."""
    n_tiles = N // 16
    tiles = tiles or (2 if n_tiles % (2 * warps) == 0 else 1)
    stages = stages or max(3, min(16, -(-48 * 1024 // (warps * tiles * unroll * 512 * per_sm))))
    return {"tiles": tiles, "blocks": 1 if M <= 8 else 2, "unroll": unroll, "stages": stages, "warps": warps,
            "per_sm": per_sm}  # fmt: skip


# What a piece of a unit (a share's end inside a unit) costs, in 64-row chunks of streaming: the partial
# sums' stores, the release fence and atomic, and the last piece's sum (about 2 µs on an H100, 8-10 chunks'
# time: benchmarks/results/h100/sweeps/w4a16_ws.txt, split 8 against split 1)
PIECE_CHUNKS = 8


def shares(units: int, steps: int, grid: int) -> list[tuple[int, int]]:
    """Each CTA's (steps, pieces) when ``units`` units of ``steps`` steps, laid end to end, are cut into
    ``grid`` equal contiguous shares (``w4a16_ws_kernel``'s ``c total // P``); pieces: the units the share
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


def stream_k(units: int, steps: int, unroll: int, ctas: int) -> tuple[int, int]:
    """(grid, the most pieces a unit is cut into): of the grids that cut every unit into the same number of
    pieces (``units`` times a divisor of ``steps``, at most ``ctas``) and the whole of ``ctas`` (stream-K),
    the one whose busiest CTA streams the fewest chunks, each piece counted as :data:`PIECE_CHUNKS` more
    (ties: the smaller grid)."""
    total = units * steps
    grids = {units * s for s in range(1, steps + 1) if steps % s == 0 and units * s <= ctas} | {min(ctas, total)}

    def cost(grid: int) -> int:
        return max(n * unroll + PIECE_CHUNKS * parts for n, parts in shares(units, steps, grid))

    grid = min(sorted(grids), key=cost)
    first = [((u * steps + 1) * grid - 1) // total for u in range(units)]
    last = [((u + 1) * steps * grid - 1) // total for u in range(units)]
    return grid, max(b - a + 1 for a, b in zip(first, last, strict=True))


def launch_ws(a, words, scales, perm, bias, *, tiles, blocks, unroll, stages, warps=4, per_sm=1, pdl=False):
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` by ``w4a16_ws_kernel``: ``launch_fragment``'s contract,
    persistent (at most ``per_sm`` CTAs an SM), deterministic on a given GPU; ``pdl``: a programmatic
    dependent launch, the first weights read while the previous kernel of the stream finishes."""
    if perm is not None:
        a = permuted_columns(a, perm)
    if a.stride(1) != 1 or a.stride(0) % 8 or a.data_ptr() % 16:
        a = a.contiguous() if a.shape[1] % 8 == 0 and a.data_ptr() % 16 == 0 else a.clone()
    M = a.shape[0]
    n_tiles, chunks = words.shape[:2]
    N, groups, t_cta = n_tiles * 16, scales.shape[0], warps * tiles
    if chunks % unroll or n_tiles % t_cta:
        raise ValueError(f"unroll={unroll}, {t_cta} tiles a CTA do not divide {chunks} chunks, {n_tiles} tiles")
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    a32 = a.view(torch.int32)
    acts = a32.as_strided((chunks, M, 32), (32, a32.stride(0), 1))  # [chunk, row, pair]
    w_desc = TensorDescriptor.from_tensor(words.view(n_tiles, chunks, 128), [t_cta, unroll, 128], WORDS_SMEM)
    r_desc = TensorDescriptor.from_tensor(scales.view(torch.int32).view(groups, n_tiles, 32), [1, t_cta, 32], RECS_SMEM)
    a_desc = TensorDescriptor.from_tensor(acts, [unroll, 8 * blocks, 32], ACTS_SMEM)
    n_groups, m_blocks, steps = n_tiles // t_cta, -(-M // (8 * blocks)), chunks // unroll
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid, pieces = stream_k(n_groups * m_blocks, steps, unroll, sms * per_sm)
    ws = torch.empty((grid, 2, 8 * blocks, 16 * t_cta), dtype=torch.float32, device=a.device)
    counts = arrival_counters(a.device, n_groups * m_blocks)
    w4a16_ws_kernel[(grid,)](
        w_desc, r_desc, a_desc, bias if bias is not None else out, out, ws, counts, M, N, n_groups, steps,
        n_groups * m_blocks * steps, GROUP_CHUNKS=chunks // groups, HAS_BIAS=bias is not None, BLOCKS=blocks,
        TILES=tiles, UNROLL=unroll, STAGES=stages, PIECES=pieces, PDL=pdl, num_warps=warps,
        maxnreg=register_cap(warps, per_sm), launch_pdl=pdl,
    )  # fmt: skip
    return out


def register_cap(warps: int, per_sm: int) -> int | None:
    """The registers a thread (``maxnreg``) that let ``per_sm`` CTAs share an SM's 65,536: a CTA is ``warps``
    consumer warps and the producer's warp group (4 warps, given back to 24 registers a thread by
    ``setmaxnreg``, which hands them to the consumers); None at one CTA an SM (the compiler's choice)."""
    if per_sm == 1:
        return None
    return 65536 // (per_sm * 32 * (warps + 4)) // 8 * 8
