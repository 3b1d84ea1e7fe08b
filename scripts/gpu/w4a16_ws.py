"""A warp-specialized W4A16 decode kernel (Gluon, sm_90a), its launch rule and launcher: a prototype that
``probe_w4a16_ws.py`` checks and times beside the shipped fragment kernel.

``w4a16_ws_kernel`` computes what ``mma.w4a16_fragment_kernel`` computes, from the same inputs (fragment
layout words, scale records, activations, optional bias, the split-K workspace and arrival counters) and
with the same bits at the same K split, but moves the operands differently: a producer warp issues TMA
copies of each step's words, scale records and activations into a ring of ``STAGES`` shared-memory slots
(a "ready" and an "empty" mbarrier a slot) and the consumer warps read them with 16-byte shared loads, then
dequantize and multiply exactly as the shipped kernel's ``fragment_step`` does (reused). The grid is
persistent: one CTA an SM walks its work units (tile group, row block, K split) in a fixed order; the
split-K partials are summed by the last split to arrive, in split order, as the shipped epilogue does.

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
    _reduce,
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
def _decode_unit(unit, n_groups, m_blocks):
    """Work unit -> (tile group, row block, K split): tile groups fastest."""
    rest = unit // n_groups
    return unit % n_groups, rest % m_blocks, rest // m_blocks


@gluon.jit
def _producer(
    w_desc, r_desc, a_desc, w_ring, r_ring, a_ring, ready, empty_bars, n_groups, m_blocks, n_units, chunks_per_split,
    GROUP_CHUNKS: gl.constexpr, T_CTA: gl.constexpr, BLOCKS: gl.constexpr, UNROLL: gl.constexpr,
    STAGES: gl.constexpr, SAME_GROUP: gl.constexpr,
):  # fmt: skip
    """One warp: each step's words, records and activations into the next free slot, by TMA."""
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    BYTES: gl.constexpr = 4 * (T_CTA * UNROLL * 128 + RU * T_CTA * 32 + UNROLL * BLOCKS * 8 * 32)
    slot = 0
    phase = 1  # a fresh slot's wait for the phase before its first passes at once
    for unit in range(gl.program_id(0), n_units, gl.num_programs(0)):
        pid_n, pid_m, pid_s = _decode_unit(unit, n_groups, m_blocks)
        c_begin = pid_s * chunks_per_split
        for c in range(c_begin, c_begin + chunks_per_split, UNROLL):
            mbarrier.wait(empty_bars.index(slot), phase)
            bar = ready.index(slot)
            mbarrier.expect(bar, BYTES)
            _tma_load(w_desc, [pid_n * T_CTA, c, 0], bar, w_ring.index(slot))
            if SAME_GROUP:
                _tma_load(r_desc, [c // GROUP_CHUNKS, pid_n * T_CTA, 0], bar, r_ring.index(slot))
            else:
                for u in gl.static_range(UNROLL):
                    g = (c + u) // GROUP_CHUNKS
                    _tma_load(r_desc, [g, pid_n * T_CTA, 0], bar, r_ring.index(slot).slice(u, 1))
            _tma_load(a_desc, [c, pid_m * BLOCKS * 8, 0], bar, a_ring.index(slot))
            slot += 1
            if slot == STAGES:
                slot = 0
                phase ^= 1


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
    w_ring, r_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N, n_groups, m_blocks, n_units,
    chunks_per_split, split, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, BLOCKS: gl.constexpr,
    TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr, SAME_GROUP: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    """The default partition: every unit's steps as ``fragment_step`` from the ring, then its epilogue."""
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
    for unit in range(gl.program_id(0), n_units, gl.num_programs(0)):
        pid_n, pid_m, pid_s = _decode_unit(unit, n_groups, m_blocks)
        acc0 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc1 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc2 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc3 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        for _ in range(0, chunks_per_split, U):
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
        _epilogue(acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, pid_n, pid_m, pid_s, split, n_groups,
                  LT, LB, R, TILES, BLOCKS, HAS_BIAS, SPLIT, num_warps)  # fmt: skip


@gluon.jit
def _epilogue(
    acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, pid_n, pid_m, pid_s, S, n_groups,
    LT: gl.constexpr, LB: gl.constexpr, R: gl.constexpr, TILES: gl.constexpr, BLOCKS: gl.constexpr,
    HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``mma.fragment_epilogue`` with the unit's indices in place of the program ids: the same stores, the
    same arrival counter a (row block, tile group) and the same split-order sum by the last split."""
    o_row = gl.arange(0, R, layout=gl.SliceLayout(1, LT))
    lane_t = gl.expand_dims(o_row % 32, 1)
    tile = gl.expand_dims((pid_n * num_warps + o_row // 32) * TILES, 1) + gl.expand_dims(
        gl.arange(0, TILES, layout=gl.SliceLayout(0, LT)), 0
    )
    block = gl.expand_dims(gl.arange(0, BLOCKS, layout=gl.SliceLayout(0, LB)), 0)
    lane_b = gl.expand_dims(gl.convert_layout(o_row % 32, gl.SliceLayout(1, LB), assert_trivial=True), 1)
    o_n = gl.broadcast(gl.expand_dims(tile * 16 + lane_t // 4, 2), acc0)[0]
    o_m = gl.broadcast(gl.expand_dims((pid_m * BLOCKS + block) * 8 + (lane_b % 4) * 2, 1), acc0)[0]
    if SPLIT:
        base = p_ws + pid_s * M * N
        gl.store(base + o_m * N + o_n, acc0, mask=o_m < M)
        gl.store(base + (o_m + 1) * N + o_n, acc1, mask=o_m + 1 < M)
        gl.store(base + o_m * N + o_n + 8, acc2, mask=o_m < M)
        gl.store(base + (o_m + 1) * N + o_n + 8, acc3, mask=o_m + 1 < M)
        _barrier()
        tile_id = pid_m * n_groups + pid_n
        arrived = gl.atomic_add(p_count + tile_id, 1, sem="acq_rel", scope="gpu")
        if arrived == S - 1:
            _reduce(p_out, p_bias, p_ws, o_m, o_n, M, N, S, HAS_BIAS)
            _reduce(p_out, p_bias, p_ws, o_m + 1, o_n, M, N, S, HAS_BIAS)
            _reduce(p_out, p_bias, p_ws, o_m, o_n + 8, M, N, S, HAS_BIAS)
            _reduce(p_out, p_bias, p_ws, o_m + 1, o_n + 8, M, N, S, HAS_BIAS)
            gl.store(p_count + tile_id, 0)
    else:
        _store_out(acc0, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS)
        _store_out(acc1, p_out, p_bias, o_m + 1, o_n, M, N, HAS_BIAS)
        _store_out(acc2, p_out, p_bias, o_m, o_n + 8, M, N, HAS_BIAS)
        _store_out(acc3, p_out, p_bias, o_m + 1, o_n + 8, M, N, HAS_BIAS)


@gluon.jit(do_not_specialize=["M"])
def w4a16_ws_kernel(
    w_desc, r_desc, a_desc, p_bias, p_out, p_ws, p_count, M, N, n_groups, m_blocks, n_units, chunks_per_split,
    split, GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, BLOCKS: gl.constexpr,
    TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``a @ W`` over ``n_units = n_groups m_blocks split`` work units, a persistent CTA taking units
    ``program_id(0)``, ``+ num_programs(0)``, ...: a unit is ``16 TILES num_warps`` columns, ``8 BLOCKS`` rows
    and ``chunks_per_split`` chunks of 64 rows (a multiple of UNROLL). Descriptors: w_desc over words
    ``[N/16, K/64, 128]`` (box ``[T num_warps, U, 128]``), r_desc over records ``[groups, N/16, 32]`` int32
    (box ``[1, T num_warps, 32]``), a_desc over activations as ``[K/64, M, 32]`` int32 pairs (box
    ``[U, 8 B, 32]``, 128-byte swizzle; rows past M read as zeros). The rest as ``w4a16_fragment_kernel``."""
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
                         m_blocks, n_units, chunks_per_split, split, HAS_BIAS, SPLIT, BLOCKS, TILES, UNROLL, STAGES,
                         SAME_GROUP, num_warps)),
            (_producer, (w_desc, r_desc, a_desc, w_ring, r_ring, a_ring, ready, empty_bars, n_groups, m_blocks,
                         n_units, chunks_per_split, GROUP_CHUNKS, T_CTA, BLOCKS, UNROLL, STAGES, SAME_GROUP)),
        ],
        [1],
        [24],
    )  # fmt: skip


def ws_split(chunks: int, units_per_split: int, unroll: int, sms: int, max_split: int = 32) -> int:
    """The K split that gives the busiest CTA the fewest chunks (ties: the smaller split, less workspace
    traffic): ``units_per_split`` units a split, dealt round-robin to ``sms`` persistent CTAs."""
    best = None
    for s in range(1, min(chunks, max_split) + 1):
        if chunks % s or (chunks // s) % unroll:
            continue
        key = (-(-units_per_split * s // sms) * (chunks // s), s)
        best = key if best is None or key < best else best
    return best[1]


def ws_config(M: int, N: int, K: int, sms: int, tiles=0, unroll=2, stages=0, warps=4, per_sm=1, split=0) -> dict:
    """``launch_ws``'s arguments: one block of 8 rows up to M = 8, two to 16; 2 tiles a warp where N allows,
    ``unroll`` chunks a step, ``per_sm`` CTAs of ``warps`` consumer warps an SM, the ring deep enough for
    48 KB of weights an SM (at most 16 slots), and ``split`` (0: :func:`ws_split`'s)."""
    blocks = 1 if M <= 8 else 2
    n_tiles = N // 16
    tiles = tiles or (2 if n_tiles % (2 * warps) == 0 else 1)
    slot_words = warps * tiles * unroll * 512
    stages = stages or max(3, min(16, -(-48 * 1024 // (slot_words * per_sm))))
    units = (n_tiles // (warps * tiles)) * -(-M // (8 * blocks))
    split = split or ws_split(K // 64, units, unroll, sms * per_sm)
    return {"tiles": tiles, "blocks": blocks, "unroll": unroll, "stages": stages, "split": split, "warps": warps,
            "per_sm": per_sm}  # fmt: skip


def launch_ws(a, words, scales, perm, bias, *, tiles, blocks, unroll, stages, split, warps=4, per_sm=1):
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` by ``w4a16_ws_kernel``: ``launch_fragment``'s contract (the
    same bits at the same ``split``), persistent (at most ``per_sm`` CTAs an SM)."""
    if perm is not None:
        a = permuted_columns(a, perm)
    if a.stride(1) != 1 or a.stride(0) % 8 or a.data_ptr() % 16:
        a = a.contiguous() if a.shape[1] % 8 == 0 and a.data_ptr() % 16 == 0 else a.clone()
    M = a.shape[0]
    n_tiles, chunks = words.shape[:2]
    N, groups, t_cta = n_tiles * 16, scales.shape[0], warps * tiles
    if chunks % split or (chunks // split) % unroll or n_tiles % t_cta:
        raise ValueError(
            f"split={split}, unroll={unroll}, {t_cta} tiles a CTA do not divide {chunks} chunks, {n_tiles} tiles"
        )
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    a32 = a.view(torch.int32)
    acts = a32.as_strided((chunks, M, 32), (32, a32.stride(0), 1))  # [chunk, row, pair]
    w_desc = TensorDescriptor.from_tensor(words.view(n_tiles, chunks, 128), [t_cta, unroll, 128], WORDS_SMEM)
    r_desc = TensorDescriptor.from_tensor(scales.view(torch.int32).view(groups, n_tiles, 32), [1, t_cta, 32], RECS_SMEM)
    a_desc = TensorDescriptor.from_tensor(acts, [unroll, 8 * blocks, 32], ACTS_SMEM)
    n_groups, m_blocks = n_tiles // t_cta, -(-M // (8 * blocks))
    n_units = n_groups * m_blocks * split
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device) if split > 1 else out
    counts = arrival_counters(a.device, n_groups * m_blocks) if split > 1 else out
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    w4a16_ws_kernel[(min(n_units, sms * per_sm),)](
        w_desc, r_desc, a_desc, bias if bias is not None else out, out, ws, counts, M, N, n_groups, m_blocks,
        n_units, chunks // split, split, GROUP_CHUNKS=chunks // groups, HAS_BIAS=bias is not None,
        SPLIT=split > 1, BLOCKS=blocks, TILES=tiles, UNROLL=unroll, STAGES=stages, num_warps=warps,
        maxnreg=register_cap(warps, per_sm),
    )  # fmt: skip
    return out


def register_cap(warps: int, per_sm: int) -> int | None:
    """The registers a thread (``maxnreg``) that let ``per_sm`` CTAs share an SM's 65,536: a CTA is ``warps``
    consumer warps and the producer's warp group (4 warps, given back to 24 registers a thread by
    ``setmaxnreg``, which hands them to the consumers); None at one CTA an SM (the compiler's choice)."""
    if per_sm == 1:
        return None
    return 65536 // (per_sm * 32 * (warps + 4)) // 8 * 8
