"""The kernel of ``w4a16_gemm_packed`` (Gluon, sm_90a): a warp-specialized, persistent, stream-K GEMM over the
fragment layout (``fragment.py``: the words, the compact scales and zero points).

A producer warp issues TMA copies of each step's words, scales, zero points and activations into a ring of
``STAGES`` shared-memory slots (a "ready" and an "empty" mbarrier a slot); the consumer warps read a slot
with 16-byte shared loads, build the fragment records (``s_r, s_r8, MAGIC + z_r, MAGIC + z_r8``) in
registers, then dequantize and multiply with ``mma.fragment_step``: per word 3 shifts and 4 ``lop3`` give
``MAGIC + q``, 4 ``sub`` (exact) and 4 ``mul`` (one rounding: the spec's ``(q - z) * s`` bit for bit) make
the ``mma.sync.m16n8k16`` operand. The grid is persistent and stream-K: the work units' (tile group, row
block) K steps, laid end to end, are cut into one equal contiguous share a CTA, so every SM streams the same
number of weight bytes whatever the layer's shape (``heuristics.stream_k`` picks the grid); a unit cut
between CTAs is summed by the last of its pieces to arrive, in the CTAs' order (K order): deterministic.
With a programmatic dependent launch the producer issues the first ring of weights before
``griddepcontrol.wait`` (they do not depend on the previous kernel), the activations after.

Slots: words ``[TILES num_warps, UNROLL, 128]`` int32 (a lane's four words of a chunk are 16 contiguous
bytes, a warp's 512: conflict-free without a swizzle), scales ``[1 or UNROLL, 16 TILES num_warps]`` (16-bit)
and zero points ``[1 or UNROLL, 2 TILES num_warps, at least 128 bytes]`` (int32 words of eight nibbles), one
box each when a step lies in one group, and activations ``[UNROLL, 8 BLOCKS, 32]`` int32 with the 128-byte
swizzle (two rows of a quarter-warp's 16-byte loads fall in different banks). The consumer views each slot
through a ``SharedLinearLayout`` (``packed_smem.py``) that maps it onto ``fragment_step``'s register tensors
(``[R, TILES, UNROLL, 4]`` and ``[R, BLOCKS, UNROLL, 4]``, R = 32 num_warps); lanes and warps that read the
same scales, zero points or activations load them as a broadcast.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from exactfuse.ops.w4a16.mma import (
    _DEQUANT_BF16,
    _DEQUANT_FP16,
    _MMA_BF16,
    _MMA_FP16,
    _barrier,
    _store_out,
    fragment_step,
)
from exactfuse.ops.w4a16.packed_smem import _ring, _view, acts_view, scales_view, words_view, zeros_view

# a TMA load into shared memory: ``async_load`` from Triton 3.7, ``async_copy_global_to_shared`` before
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


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
def _load_weights(w_desc, s_desc, z_desc, w_slot, s_slot, z_slot, bar, i, steps, n_groups,
                  GROUP_CHUNKS: gl.constexpr, T_CTA: gl.constexpr, UNROLL: gl.constexpr, SAME_GROUP: gl.constexpr,
                  HAS_ZEROS: gl.constexpr):  # fmt: skip
    """Step ``i`` of the units laid end to end: its words, scales and zero points into a slot, by TMA."""
    c = (i % steps) * UNROLL
    pid_n = (i // steps) % n_groups
    _tma_load(w_desc, [pid_n * T_CTA, c, 0], bar, w_slot)
    for j in gl.static_range(1 if SAME_GROUP else UNROLL):
        g = (c + j) // GROUP_CHUNKS
        _tma_load(s_desc, [g, pid_n * T_CTA * 16], bar, s_slot.slice(j, 1))
        if HAS_ZEROS:
            _tma_load(z_desc, [g, pid_n * T_CTA * 2], bar, z_slot.slice(j, 1))


@gluon.jit
def _load_acts(a_desc, a_slot, bar, i, steps, n_groups, BLOCKS: gl.constexpr, UNROLL: gl.constexpr):
    """Step ``i``'s activations into a slot, by TMA."""
    _tma_load(a_desc, [(i % steps) * UNROLL, (i // steps) // n_groups * BLOCKS * 8, 0], bar, a_slot)


@gluon.jit
def _producer(
    w_desc, s_desc, z_desc, a_desc, w_ring, s_ring, z_ring, a_ring, ready, empty_bars, n_groups, steps, total,
    GROUP_CHUNKS: gl.constexpr, T_CTA: gl.constexpr, BLOCKS: gl.constexpr, UNROLL: gl.constexpr,
    STAGES: gl.constexpr, SAME_GROUP: gl.constexpr, HAS_ZEROS: gl.constexpr, PDL: gl.constexpr,
):  # fmt: skip
    """One warp: each step's words, scales, zero points and activations into the next free slot, by TMA, in the
    order the consumers take them (this CTA's share of the steps). With ``PDL`` the first ring's weights go out
    before the wait for the previous kernel (they do not depend on it), its activations after."""
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    ZW: gl.constexpr = T_CTA * 2 if T_CTA * 2 >= 32 else 32
    BYTES: gl.constexpr = (4 * T_CTA * UNROLL * 128 + RU * (T_CTA * 32 + (4 * ZW if HAS_ZEROS else 0))
                           + 4 * UNROLL * BLOCKS * 8 * 32)  # fmt: skip
    begin, end = _cta_range(total)
    ahead = gl.minimum(end - begin, STAGES if PDL else 0)  # fresh slots filled around the wait
    for i in range(begin, begin + ahead):
        bar = ready.index(i - begin)
        mbarrier.expect(bar, BYTES)
        _load_weights(w_desc, s_desc, z_desc, w_ring.index(i - begin), s_ring.index(i - begin),
                      z_ring.index(i - begin), bar, i, steps, n_groups, GROUP_CHUNKS, T_CTA, UNROLL, SAME_GROUP,
                      HAS_ZEROS)  # fmt: skip
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
        _load_weights(w_desc, s_desc, z_desc, w_ring.index(slot), s_ring.index(slot), z_ring.index(slot), bar, i,
                      steps, n_groups, GROUP_CHUNKS, T_CTA, UNROLL, SAME_GROUP, HAS_ZEROS)  # fmt: skip
        _load_acts(a_desc, a_ring.index(slot), bar, i, steps, n_groups, BLOCKS, UNROLL)
        slot += 1
        if slot == STAGES:
            slot = 0
            phase ^= 1
    if PDL:
        _gdc_launch_dependents()


@gluon.jit
def _records(s_slot, z_slot, R: gl.constexpr, TILES: gl.constexpr, U: gl.constexpr, RU: gl.constexpr,
             HAS_ZEROS: gl.constexpr, MAGIC: gl.constexpr, num_warps: gl.constexpr, GROUP: gl.constexpr = 0,
             GROUPS: gl.constexpr = 1):  # fmt: skip
    """``fragment_step``'s scale records ``[R, T, U, 4]`` (``s_r, s_r8, MAGIC + z_r, MAGIC + z_r8``, each a
    32-bit pair of one 16-bit value) built from a slot's compact scales and zero points: lane ``4 row + q``
    of warp ``w`` takes columns ``row`` and ``row + 8`` of its tiles. With GROUPS > 1 the slot holds the tiles
    of GROUPS partitions of ``num_warps`` warps each, and these are partition GROUP's: the whole slot's views
    cut to its warps (a cut view keeps the slot's row stride where a step spans groups, RU > 1)."""
    L6: gl.constexpr = gl.BlockedLayout(
        [1, 1, 1, TILES, RU, 2], [1, 8, 4, 1, 1, 1], [num_warps, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1, 0]
    )
    L4: gl.constexpr = gl.BlockedLayout([1, TILES, RU, 2], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    W: gl.constexpr = num_warps * GROUPS
    full = gl.full([num_warps, 8, 4, TILES, RU, 2], 0, gl.int32, layout=L6)
    s_view = _view(s_slot, gl.int16, [W, 8, 1, TILES, RU, 2], scales_view(W, TILES, RU))
    if GROUPS > 1:
        s_view = s_view.slice(GROUP * num_warps, num_warps)
    s16 = s_view.load(L6)
    s = gl.broadcast(s16.to(gl.int32) & 0xFFFF, full)[0]
    s = gl.convert_layout(gl.reshape(s, [R, TILES, RU, 2]), L4)
    if HAS_ZEROS:
        z_view = _view(z_slot, gl.int32, [W, 1, 1, TILES, RU, 2], zeros_view(W, TILES, RU))
        if GROUPS > 1:
            z_view = z_view.slice(GROUP * num_warps, num_warps)
        zw = z_view.load(L6)
        zw = gl.convert_layout(gl.reshape(gl.broadcast(zw, full)[0], [R, TILES, RU, 2]), L4)
        row = gl.arange(0, R, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L4))))
        shift = gl.expand_dims(gl.expand_dims(gl.expand_dims((row % 32) // 4 * 4, 1), 2), 3)
        z = MAGIC + ((zw >> shift) & 0xF)
    else:
        z = gl.full([R, TILES, RU, 2], MAGIC + 8, gl.int32, layout=L4)
    pairs = gl.join(s, z) * 0x10001  # [R, T, RU, 2 (row, row + 8), 2 (s, z)]: each value in both halves
    rec = gl.reshape(gl.permute(pairs, [0, 1, 2, 4, 3]), [R, TILES, RU, 4])
    if RU != U:  # one group a step: the same record for every chunk
        rec = gl.broadcast(rec, gl.full([R, TILES, U, 4], 0, gl.int32, layout=rec.type.layout))[0]
    return rec


@gluon.jit
def _operands(w_slot, s_slot, z_slot, a_slot, R: gl.constexpr, TILES: gl.constexpr, BLOCKS: gl.constexpr,
              U: gl.constexpr, RU: gl.constexpr, HAS_ZEROS: gl.constexpr, MAGIC: gl.constexpr,
              num_warps: gl.constexpr, GROUP: gl.constexpr, GROUPS: gl.constexpr):  # fmt: skip
    """A slot's words and scale records ``[R, T, U, 4]`` and activations ``x0``, ``x1`` ``[R, B, U, 4]`` in the
    register layouts ``fragment_step`` takes, by shared loads: ``w_slot`` these warps' words, the records of
    partition GROUP of GROUPS (:func:`_records`)."""
    LWU: gl.constexpr = gl.BlockedLayout([1, TILES, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    LAU: gl.constexpr = gl.BlockedLayout([1, BLOCKS, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    words = _view(w_slot, gl.int32, [R, TILES, U, 4], words_view(num_warps, TILES, U)).load(LWU)
    recs = _records(s_slot, z_slot, R, TILES, U, RU, HAS_ZEROS, MAGIC, num_warps, GROUP, GROUPS)
    recs = gl.convert_layout(recs, LWU)
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
    w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N, n_groups, steps, total,
    HAS_BIAS: gl.constexpr, BLOCKS: gl.constexpr, TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr,
    SAME_GROUP: gl.constexpr, HAS_ZEROS: gl.constexpr, PIECES: gl.constexpr, W: gl.constexpr, WARP: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    """Consumer warps ``WARP .. WARP + num_warps`` of ``W`` (all of them in one partition, or each its own):
    each unit's piece of this CTA's share as ``fragment_step`` from their part of the ring, then its epilogue."""
    DT: gl.constexpr = p_out.dtype.element_ty
    DEQUANT: gl.constexpr = _DEQUANT_BF16 if gl.bfloat16 == DT else _DEQUANT_FP16
    MMA: gl.constexpr = _MMA_BF16 if gl.bfloat16 == DT else _MMA_FP16
    MAGIC: gl.constexpr = 0x4300 if gl.bfloat16 == DT else 0x6400  # fragment.MAGIC's bits: 128, 1024
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
                w_ring.index(slot).slice(WARP * TILES, num_warps * TILES),
                s_ring.index(slot),
                z_ring.index(slot),
                a_ring.index(slot),
                R,
                TILES,
                BLOCKS,
                U,
                RU,
                HAS_ZEROS,
                MAGIC,
                num_warps,
                WARP // num_warps,  # the records of these warps: partition WARP of W one-warp ones (PER_WARP)
                W // num_warps,
            )
            # The slot goes back once every consumer warp has read it: the barrier orders the partition's loads
            # before its thread 0's arrival (the empty barrier counts one a partition; one warp's: no CTA barrier)
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
                  n_groups, LT, LB, R, TILES, BLOCKS, HAS_BIAS, PIECES, W, WARP, num_warps)  # fmt: skip


@gluon.jit
def _epilogue(
    acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, u, s0, s1, begin, steps, total, n_groups,
    LT: gl.constexpr, LB: gl.constexpr, R: gl.constexpr, TILES: gl.constexpr, BLOCKS: gl.constexpr,
    HAS_BIAS: gl.constexpr, PIECES: gl.constexpr, W: gl.constexpr, WARP: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """A unit's piece: stored (with the bias) when it is the whole unit; else kept in this CTA's workspace
    slot (0: the unit it began in, 1: the unit it ends in) and, by the last piece to arrive, the unit's
    pieces summed in K order (the CTAs' order), rounded and stored."""
    pid_n = u % n_groups
    pid_m = u // n_groups
    o_row = gl.arange(0, R, layout=gl.SliceLayout(1, LT))
    lane_t = gl.expand_dims(o_row % 32, 1)
    tile = gl.expand_dims((pid_n * W + WARP + o_row // 32) * TILES, 1) + gl.expand_dims(
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
        COLS: gl.constexpr = 16 * TILES * W
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
        count = p_count + u * (W // num_warps) + WARP // num_warps  # a counter a unit and partition
        arrived = gl.atomic_add(count, 1, sem="acq_rel", scope="gpu")
        if arrived == last - first:
            _finish(p_out, p_bias, p_ws, at, o_m, o_n, M, N, u, first, last, steps, total, ROWS * COLS, HAS_BIAS,
                    PIECES)  # fmt: skip
            _finish(p_out, p_bias, p_ws, at + COLS, o_m + 1, o_n, M, N, u, first, last, steps, total,
                    ROWS * COLS, HAS_BIAS, PIECES)  # fmt: skip
            _finish(p_out, p_bias, p_ws, at + 8, o_m, o_n + 8, M, N, u, first, last, steps, total, ROWS * COLS,
                    HAS_BIAS, PIECES)  # fmt: skip
            _finish(p_out, p_bias, p_ws, at + COLS + 8, o_m + 1, o_n + 8, M, N, u, first, last, steps, total,
                    ROWS * COLS, HAS_BIAS, PIECES)  # fmt: skip
            gl.store(count, 0)


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


@gluon.jit(do_not_specialize=["M", "n_groups", "steps", "total"])
def w4a16_packed_kernel(
    w_desc, s_desc, z_desc, a_desc, p_bias, p_out, p_ws, p_count, M, N, n_groups, steps, total,
    GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, HAS_ZEROS: gl.constexpr, BLOCKS: gl.constexpr,
    TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr, PIECES: gl.constexpr, PDL: gl.constexpr,
    PER_WARP: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``a @ W``, stream-K: the units (``16 TILES num_warps`` columns by ``8 BLOCKS`` rows, tile groups fastest)
    have ``steps`` steps of ``UNROLL`` chunks of 64 rows each; laid end to end they are ``total`` steps, and
    CTA ``c`` of ``P`` takes steps ``c total // P`` to ``(c + 1) total // P`` (a unit cut between CTAs is
    finished by its last piece to arrive, at most ``PIECES`` of them, in a fixed order: deterministic).
    Descriptors: w_desc over words ``[N/16, K/64, 128]`` (box ``[T num_warps, U, 128]``), s_desc over the
    scales ``[groups, N]`` as int16 (box ``[1, 16 T num_warps]``), z_desc (with HAS_ZEROS) over the zero
    points ``[groups, N/8]`` int32, eight nibbles a word, column ``8 j + i`` in nibble ``i`` of word ``j`` (box
    ``[1, 2 T num_warps]``; without, every zero point is 8), a_desc over activations as ``[K/64, M, 32]`` int32
    pairs (box ``[U, 8 B, 32]``, 128-byte swizzle; rows past M read as zeros). ``p_ws``: two fp32 slots of
    ``8 BLOCKS x 16 T num_warps`` a CTA; ``p_count``: a zeroed int32 counter a unit (with PER_WARP four, one a
    consumer warp), left zeroed. PER_WARP: each of the 4 consumer warps a partition of its own that releases
    its part of a slot alone (no CTA-wide barrier before a slot's release), the producer in the default
    partition's 4 warps."""
    T_CTA: gl.constexpr = TILES * num_warps  # num_warps consumer warps, in one partition or (PER_WARP) one each
    SAME_GROUP: gl.constexpr = GROUP_CHUNKS % UNROLL == 0
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    w_ring, s_ring, z_ring, a_ring, ready, empty_bars = _ring(
        STAGES, T_CTA, UNROLL, RU, HAS_ZEROS, BLOCKS * 8, 4 if PER_WARP else 1
    )
    if PER_WARP:  # the producer in the 4 warps of the default partition, 4 one-warp consumer partitions
        gl.static_assert(num_warps == 4, "PER_WARP takes 4 consumer warps")
        gl.warp_specialize(
            [
                (_producer, (w_desc, s_desc, z_desc, a_desc, w_ring, s_ring, z_ring, a_ring, ready, empty_bars,
                             n_groups, steps, total, GROUP_CHUNKS, T_CTA, BLOCKS, UNROLL, STAGES, SAME_GROUP,
                             HAS_ZEROS, PDL)),
                (_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N,
                             n_groups, steps, total, HAS_BIAS, BLOCKS, TILES, UNROLL, STAGES, SAME_GROUP, HAS_ZEROS,
                             PIECES, 4, 0, 1)),
                (_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N,
                             n_groups, steps, total, HAS_BIAS, BLOCKS, TILES, UNROLL, STAGES, SAME_GROUP, HAS_ZEROS,
                             PIECES, 4, 1, 1)),
                (_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N,
                             n_groups, steps, total, HAS_BIAS, BLOCKS, TILES, UNROLL, STAGES, SAME_GROUP, HAS_ZEROS,
                             PIECES, 4, 2, 1)),
                (_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N,
                             n_groups, steps, total, HAS_BIAS, BLOCKS, TILES, UNROLL, STAGES, SAME_GROUP, HAS_ZEROS,
                             PIECES, 4, 3, 1)),
            ],
            [1, 1, 1, 1],
            [232, 232, 232, 232],
        )  # fmt: skip
    else:  # the consumers in the default partition, the producer a one-warp worker
        gl.warp_specialize(
            [
                (_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N,
                             n_groups, steps, total, HAS_BIAS, BLOCKS, TILES, UNROLL, STAGES, SAME_GROUP, HAS_ZEROS,
                             PIECES, num_warps, 0, num_warps)),
                (_producer, (w_desc, s_desc, z_desc, a_desc, w_ring, s_ring, z_ring, a_ring, ready, empty_bars,
                             n_groups, steps, total, GROUP_CHUNKS, T_CTA, BLOCKS, UNROLL, STAGES, SAME_GROUP,
                             HAS_ZEROS, PDL)),
            ],
            [1],
            [24],
        )  # fmt: skip
