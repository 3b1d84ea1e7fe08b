"""A wgmma kernel over ``w4a16_gemm_packed``'s fragment layout (Gluon, sm_90a) for 17-128 rows of ``a``
(``packed.launch_packed_wgmma``; the op routes 33-128 rows of large layers to it,
``heuristics.packed_wgmma_config``): the same ring, producer and stream-K grid as the ``mma.sync`` kernel
(``packed_kernel.py``), with the weights dequantized in registers straight into wgmma's register A operand
and the activations read by wgmma from the ring.

``out^T = W^T a^T``: A is the weight, ``[16 W T, 64]`` a 64-row chunk (W consumer warps of T 16-column tiles
each), B the activations' ``[64, BM]`` slot, the accumulator ``[16 W T, BM]`` fp32. A lane's four words of a
chunk (``fragment.py``) hold, after ``mma.fragment_step``'s exact dequantization, the values wgmma's A
layout (``DotOperandLayout(0, NVMMA v3, k_width 2)``) gives that lane: rows ``r`` and ``r + 8`` of its tile
(lane ``4 r + qq``), MMA k-positions ``kappa = 16 j + 8 h + 2 qq + e`` for word ``j`` and nibble
``4 e + 2 h + b`` (row ``r + 8 b``). So the operand is built with no shuffle; the price is that position
``kappa`` stands for the layout's ``k = 16 qq + 4 j + 2 h + e``, so the activations are read in that order:
the launcher passes ``a`` with each chunk's columns permuted (``packed.wgmma_columns``), once a call, for
every CTA and tile.

Accumulator row ``16 W t + 16 w + i`` (wgmma's warps-along-rows order, T repeats) is column ``16 (w T + t) +
i`` of the unit's tile group: warp ``w`` dequantizes tiles ``w T .. w T + T - 1``, as in the ``mma.sync``
kernel's slot views (``packed_smem.py``), which this kernel reads the same way.

With GROUPS 2 the two warpgroups of that 8-warp consumer are two partitions (the default one and a worker, 4
warps each): warpgroup ``g`` reads warps ``4 g .. 4 g + 3``'s part of each slot (the slot's views cut to them),
waits for its own wgmmas each step and releases the slot alone (two arrivals a slot), so one dequantizes while
the other's wgmmas run, with no wgmma in flight while its own warpgroup writes registers; each finishes its own
half of a unit's columns (a stream-K counter a unit and warpgroup). The sums are those of the 8-warp consumer.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from exactfuse.ops.w4a16.mma import _barrier, _record, _store_out, _unstack, dequant_lines
from exactfuse.ops.w4a16.packed_kernel import _cta_range, _finish, _piece, _producer, _records
from exactfuse.ops.w4a16.packed_smem import _ring, _view, words_view


def _wide_dequant_asm(magic: int, ty: str) -> str:
    """``mma.dequant_lines`` on word $8 with scale pairs $9/$10 and zero pairs $11/$12 (rows r, r + 8), its four
    pairs given back as eight 16-bit values $0..$7, pair ``t``'s lower k-position first."""
    body = dequant_lines(magic, ty, "$8", ("$9", "$10"), ("$11", "$12"), ("v0", "v1", "v2", "v3"))
    unpack = [f"mov.b32 {{${2 * t}, ${2 * t + 1}}}, v{t};" for t in range(4)]
    return "\n".join(["{", ".reg .b32 u0, u1, u2, v0, v1, v2, v3;", *body, *unpack, "}"])


_WIDE_BF16 = gl.constexpr(_wide_dequant_asm(0x4300, "bf16x2"))
_WIDE_FP16 = gl.constexpr(_wide_dequant_asm(0x6400, "f16x2"))
_WIDE_CONSTRAINTS = gl.constexpr(",".join(["=h"] * 8 + ["r"] * 5))
# the activations' slot, [U, BM, 32] int32 pairs with the 128-byte swizzle, seen as [U, BM, 64] 16-bit values
B_SMEM = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2))


@gluon.jit
def _operand(words, rec, p_out, layout: gl.constexpr, a_layout: gl.constexpr, DEQUANT: gl.constexpr,
             W: gl.constexpr, T: gl.constexpr):  # fmt: skip
    """A chunk's words ``[32 W, T, 4]`` (lane ``32 w + l``, tile, word ``j``) and scale records dequantized into
    wgmma's A operand ``[16 W T, 64]`` (row ``16 W t + 16 w + 8 b + r``, MMA k-position ``16 j + 8 h + 2 qq +
    e``) in ``p_out``'s dtype: a relabelling of the registers, no data movement."""
    sr, s8, zr, z8 = _record(rec, layout)
    ty = p_out.dtype.element_ty  # the dtype itself: a constexpr-wrapped one cannot type the asm
    v = gl.inline_asm_elementwise(DEQUANT, _WIDE_CONSTRAINTS, [words, sr, s8, zr, z8], (ty,) * 8, True, 1)
    # join appends its new axis last: pair t's halves, then b, then h (t = b + 2 h)
    pairs = (gl.join(v[0], v[1]), gl.join(v[2], v[3]), gl.join(v[4], v[5]), gl.join(v[6], v[7]))  # [.., e]
    x = gl.join(gl.join(pairs[0], pairs[1]), gl.join(pairs[2], pairs[3]))  # [32 W, T, 4 j, 2 e, 2 b, 2 h]
    x = gl.reshape(x, [W, 8, 4, T, 4, 2, 2, 2])  # [w, r, qq, t, j, e, b, h]
    x = gl.reshape(gl.permute(x, [3, 0, 6, 1, 4, 7, 2, 5]), [16 * W * T, 64])  # [t, w, b, r] x [j, h, qq, e]
    return gl.convert_layout(x, a_layout, assert_trivial=True)


@gluon.jit
def _step_operands(w_slot, s_slot, z_slot, p_out, R: gl.constexpr, TILES: gl.constexpr, U: gl.constexpr,
                   RU: gl.constexpr, HAS_ZEROS: gl.constexpr, MAGIC: gl.constexpr, DEQUANT: gl.constexpr,
                   A_OP: gl.constexpr, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                   num_warps: gl.constexpr):  # fmt: skip
    """A slot's ``U`` chunks of words and scale records, by shared loads, dequantized into ``U`` A operands:
    warpgroup ``GROUP``'s tiles of a slot holding ``GROUPS`` warpgroups' (the 8-warp consumer's warps ``4
    GROUP .. 4 GROUP + 3``)."""
    LWU: gl.constexpr = gl.BlockedLayout([1, TILES, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    LW: gl.constexpr = gl.BlockedLayout([1, TILES, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    if GROUPS == 1:
        words = _view(w_slot, gl.int32, [R, TILES, U, 4], words_view(num_warps, TILES, U)).load(LWU)
        recs = _records(s_slot, z_slot, R, TILES, U, RU, HAS_ZEROS, MAGIC, num_warps)
    else:
        W: gl.constexpr = num_warps * GROUPS
        w_view = _view(w_slot, gl.int32, [32 * W, TILES, U, 4], words_view(W, TILES, U))
        words = w_view.slice(GROUP * R, R).load(LWU)
        recs = _records(s_slot, z_slot, R, TILES, U, RU, HAS_ZEROS, MAGIC, num_warps, GROUP, GROUPS)
    recs = gl.convert_layout(recs, LWU)
    w_u = _unstack(words, LW, U)
    rec_u = _unstack(recs, LW, U)
    if U == 1:
        ops = (_operand(w_u[0], rec_u[0], p_out, LW, A_OP, DEQUANT, num_warps, TILES),)
    elif U == 2:
        ops = (
            _operand(w_u[0], rec_u[0], p_out, LW, A_OP, DEQUANT, num_warps, TILES),
            _operand(w_u[1], rec_u[1], p_out, LW, A_OP, DEQUANT, num_warps, TILES),
        )
    else:
        ops = (
            _operand(w_u[0], rec_u[0], p_out, LW, A_OP, DEQUANT, num_warps, TILES),
            _operand(w_u[1], rec_u[1], p_out, LW, A_OP, DEQUANT, num_warps, TILES),
            _operand(w_u[2], rec_u[2], p_out, LW, A_OP, DEQUANT, num_warps, TILES),
            _operand(w_u[3], rec_u[3], p_out, LW, A_OP, DEQUANT, num_warps, TILES),
        )
    return ops


@gluon.jit
def _issue(ops, acts, acc, U: gl.constexpr):
    """The step's ``U`` asynchronous wgmmas, chunk ``c``'s operand times the slot's activations ``c``."""
    for c in gl.static_range(U):
        acc = warpgroup_mma(ops[c], acts.index(c).permute((1, 0)), acc, is_async=True)
    return acc


@gluon.jit
def _retire(acc, ops):
    """Wait for every wgmma in flight: their register operands ``ops`` stay live until then."""
    return warpgroup_mma_wait(0, deps=(acc,) + ops)[0]  # noqa: RUF005 (the JIT takes no starred tuple)


@gluon.jit
def _release(empty_bars, slot):
    """The slot goes back to the producer once every consumer warp's wgmmas have read it: the barrier orders
    that before thread 0's arrival."""
    _barrier()
    mbarrier.arrive(empty_bars.index(slot))


@gluon.jit
def _wgmma_consumer(
    w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count, M, N, n_groups, steps, total,
    HAS_BIAS: gl.constexpr, BM: gl.constexpr, TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr,
    SAME_GROUP: gl.constexpr, HAS_ZEROS: gl.constexpr, PIECES: gl.constexpr, PIPELINED: gl.constexpr,
    GROUP: gl.constexpr, GROUPS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """The consumer warps of a partition (one or two warpgroups), warpgroup ``GROUP`` of ``GROUPS`` partitions
    that share each slot (their tiles side by side, as the 8-warp consumer's warpgroups): each unit's piece of
    this CTA's share, a chunk a wgmma into ``[16 W T, BM]`` fp32, then its epilogue. PIPELINED: a step's wgmmas
    run while the next step's slot is read and dequantized (its slot released a step later), else each step
    waits for its own; each partition releases a slot alone."""
    DT: gl.constexpr = p_out.dtype.element_ty
    DEQUANT: gl.constexpr = _WIDE_BF16 if gl.bfloat16 == DT else _WIDE_FP16
    MAGIC: gl.constexpr = 0x4300 if gl.bfloat16 == DT else 0x6400  # fragment.MAGIC's bits: 128, 1024
    R: gl.constexpr = 32 * num_warps
    U: gl.constexpr = UNROLL
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    ROWS: gl.constexpr = 16 * num_warps * TILES
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BM, 16])  # fmt: skip
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    slot = 0
    phase = 0
    begin, end = _cta_range(total)
    for u in range(begin // steps, (end + steps - 1) // steps):
        s0, s1 = _piece(u, begin, end, steps)
        acc = gl.zeros([ROWS, BM], gl.float32, layout=MMA)
        if PIPELINED:  # the piece's first step issued here, each later one while its predecessor runs
            mbarrier.wait(ready.index(slot), phase)
            ops = _step_operands(w_ring.index(slot), s_ring.index(slot), z_ring.index(slot), p_out, R, TILES, U, RU,
                                 HAS_ZEROS, MAGIC, DEQUANT, A_OP, GROUP, GROUPS, num_warps)  # fmt: skip
            acc = _issue(ops, _view(a_ring.index(slot), DT, [U, BM, 64], B_SMEM), acc, U)
            held = slot
            slot += 1
            if slot == STAGES:
                slot = 0
                phase ^= 1
            for _ in range(s0 + 1, s1):
                mbarrier.wait(ready.index(slot), phase)
                nxt = _step_operands(w_ring.index(slot), s_ring.index(slot), z_ring.index(slot), p_out, R, TILES,
                                     U, RU, HAS_ZEROS, MAGIC, DEQUANT, A_OP, GROUP, GROUPS, num_warps)  # fmt: skip
                acc = _retire(acc, ops)
                _release(empty_bars, held)
                acc = _issue(nxt, _view(a_ring.index(slot), DT, [U, BM, 64], B_SMEM), acc, U)
                ops = nxt
                held = slot
                slot += 1
                if slot == STAGES:
                    slot = 0
                    phase ^= 1
            acc = _retire(acc, ops)
            _release(empty_bars, held)
        else:
            for _ in range(s0, s1):
                mbarrier.wait(ready.index(slot), phase)
                ops = _step_operands(w_ring.index(slot), s_ring.index(slot), z_ring.index(slot), p_out, R, TILES,
                                     U, RU, HAS_ZEROS, MAGIC, DEQUANT, A_OP, GROUP, GROUPS, num_warps)  # fmt: skip
                acc = _issue(ops, _view(a_ring.index(slot), DT, [U, BM, 64], B_SMEM), acc, U)
                acc = _retire(acc, ops)
                _release(empty_bars, slot)
                slot += 1
                if slot == STAGES:
                    slot = 0
                    phase ^= 1
        _wgmma_epilogue(acc, p_out, p_bias, p_ws, p_count, M, N, u, s0, s1, begin, steps, total, n_groups, MMA,
                        ROWS, BM, TILES, HAS_BIAS, PIECES, GROUP, GROUPS, num_warps)  # fmt: skip


@gluon.jit
def _wgmma_epilogue(
    acc, p_out, p_bias, p_ws, p_count, M, N, u, s0, s1, begin, steps, total, n_groups, MMA: gl.constexpr,
    ROWS: gl.constexpr, BM: gl.constexpr, TILES: gl.constexpr, HAS_BIAS: gl.constexpr, PIECES: gl.constexpr,
    GROUP: gl.constexpr, GROUPS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """A unit's piece of warpgroup ``GROUP``'s ``ROWS`` columns (of the unit's ``GROUPS ROWS``): stored (with
    the bias) when it is the whole unit; else kept in this CTA's workspace slot (0: the unit it began in, 1:
    the unit it ends in; each partition its own columns) and, by the last piece to arrive (a counter a unit and
    partition), the unit's pieces of these columns summed in K order (the CTAs' order), rounded and stored
    (``packed_kernel._epilogue``'s protocol)."""
    COLS: gl.constexpr = ROWS * GROUPS  # the unit's columns
    pid_n = u % n_groups
    pid_m = u // n_groups
    row = gl.arange(0, ROWS, layout=gl.SliceLayout(1, MMA))
    # accumulator row 16 W t + 16 w + i is column 16 (w T + t) + i of the partition's columns
    col = GROUP * ROWS + (row // 16 % num_warps * TILES + row // (16 * num_warps)) * 16 + row % 16
    o_n = gl.expand_dims(pid_n * COLS + col, 1)
    o_m = gl.expand_dims(pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, MMA)), 0)
    o_n, o_m = gl.broadcast(o_n, o_m)
    if (s0 == 0) & (s1 == steps):
        _store_out(acc, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS)
    else:
        at = (o_m - pid_m * BM) * COLS + (o_n - pid_n * COLS)  # the outputs' offsets in a slot
        p = gl.num_programs(0)
        gl.store(p_ws + (gl.program_id(0) * 2 + (u != begin // steps).to(gl.int32)) * (BM * COLS) + at, acc)
        _barrier()
        first = ((u * steps + 1) * p - 1) // total  # the CTAs whose shares hold the unit's first and last steps
        last = ((u + 1) * steps * p - 1) // total
        count = p_count + u * GROUPS + GROUP
        arrived = gl.atomic_add(count, 1, sem="acq_rel", scope="gpu")
        if arrived == last - first:
            _wgmma_finish(p_out, p_bias, p_ws, M, N, u, pid_n, pid_m, first, last, steps, total, ROWS, BM,
                          HAS_BIAS, PIECES, GROUP, GROUPS, num_warps)  # fmt: skip
            gl.store(count, 0)


@gluon.jit
def _wgmma_finish(p_out, p_bias, p_ws, M, N, u, pid_n, pid_m, first, last, steps, total, ROWS: gl.constexpr,
                  BM: gl.constexpr, HAS_BIAS: gl.constexpr, PIECES: gl.constexpr, GROUP: gl.constexpr,
                  GROUPS: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """Unit ``u``'s pieces of warpgroup ``GROUP``'s ``ROWS`` columns summed in the CTAs' order, rounded and
    stored (``packed_kernel._finish``), read in a layout of its own that covers ``RB`` rows of ``a`` by the
    ``ROWS`` columns with no thread repeating another's (4 columns a thread, at most 32 threads along them),
    ``RB`` rows at a time: every piece's value is read once."""
    COLS: gl.constexpr = ROWS * GROUPS
    TC: gl.constexpr = 32 if ROWS >= 128 else ROWS // 4  # threads along the columns
    RB: gl.constexpr = 32 // TC * num_warps
    FL: gl.constexpr = gl.BlockedLayout([1, 4], [32 // TC, TC], [num_warps, 1], [1, 0])
    cols = gl.expand_dims(GROUP * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(0, FL)), 0)
    for r0 in gl.static_range(0, BM, RB):
        rows = gl.expand_dims(r0 + gl.arange(0, RB, layout=gl.SliceLayout(1, FL)), 1)
        o_m, o_n = gl.broadcast(pid_m * BM + rows, pid_n * COLS + cols)
        _finish(p_out, p_bias, p_ws, rows * COLS + cols, o_m, o_n, M, N, u, first, last, steps, total, BM * COLS,
                HAS_BIAS, PIECES)  # fmt: skip


# the registers a thread of the second consumer warpgroup (GROUPS = 2): with the producer's warpgroup at 24, the
# default partition's warpgroup gets the rest of the SM's 65,536 (480 - this)
PINGPONG_REGS = gl.constexpr(240)


@gluon.jit(do_not_specialize=["M", "n_groups", "steps", "total"])
def w4a16_packed_wgmma_kernel(
    w_desc, s_desc, z_desc, a_desc, p_bias, p_out, p_ws, p_count, M, N, n_groups, steps, total,
    GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, HAS_ZEROS: gl.constexpr, BM: gl.constexpr,
    TILES: gl.constexpr, UNROLL: gl.constexpr, STAGES: gl.constexpr, PIECES: gl.constexpr, PDL: gl.constexpr,
    PIPELINED: gl.constexpr, GROUPS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``a' @ W``, stream-K over units of ``16 TILES num_warps GROUPS`` columns by ``BM`` rows (tile groups
    fastest), as ``packed_kernel.w4a16_packed_kernel`` (its descriptors, workspace and counters; ``a_desc``'s
    box ``[U, BM, 32]``), where ``a'`` is ``a`` with each chunk's columns in the MMA's k order
    (``packed.wgmma_columns``). GROUPS 1: ``num_warps`` 4 or 8 consumer warps (one or two warpgroups) in the
    default partition, the producer a one-warp worker. GROUPS 2 (``num_warps`` 4, not PIPELINED): two consumer
    warpgroups, each a partition of its own (the default one and a worker) that dequantizes and multiplies its
    half of each slot's tiles, releases the slot alone (two arrivals a slot) and finishes its half of a unit's
    columns (``p_count``: two counters a unit); the results are those of GROUPS 1 with 8 warps, bit for bit.
    PIPELINED: each step's wgmmas in flight while the next step is dequantized."""
    gl.static_assert(GROUPS == 1 or (GROUPS == 2 and num_warps == 4 and not PIPELINED),
                     "two consumer partitions take 4 warps each and the unpipelined steps")  # fmt: skip
    T_CTA: gl.constexpr = TILES * num_warps * GROUPS
    SAME_GROUP: gl.constexpr = GROUP_CHUNKS % UNROLL == 0
    RU: gl.constexpr = 1 if SAME_GROUP else UNROLL
    w_ring, s_ring, z_ring, a_ring, ready, empty_bars = _ring(STAGES, T_CTA, UNROLL, RU, HAS_ZEROS, BM, GROUPS)
    if GROUPS == 1:
        gl.warp_specialize(
            [
                (_wgmma_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count,
                                   M, N, n_groups, steps, total, HAS_BIAS, BM, TILES, UNROLL, STAGES, SAME_GROUP,
                                   HAS_ZEROS, PIECES, PIPELINED, 0, 1, num_warps)),
                (_producer, (w_desc, s_desc, z_desc, a_desc, w_ring, s_ring, z_ring, a_ring, ready, empty_bars,
                             n_groups, steps, total, GROUP_CHUNKS, T_CTA, BM // 8, UNROLL, STAGES, SAME_GROUP,
                             HAS_ZEROS, PDL)),
            ],
            [1],
            [24],
        )  # fmt: skip
    else:  # warpgroup 0 in the default partition, the producer and warpgroup 1 workers
        gl.warp_specialize(
            [
                (_wgmma_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count,
                                   M, N, n_groups, steps, total, HAS_BIAS, BM, TILES, UNROLL, STAGES, SAME_GROUP,
                                   HAS_ZEROS, PIECES, False, 0, 2, 4)),
                (_producer, (w_desc, s_desc, z_desc, a_desc, w_ring, s_ring, z_ring, a_ring, ready, empty_bars,
                             n_groups, steps, total, GROUP_CHUNKS, T_CTA, BM // 8, UNROLL, STAGES, SAME_GROUP,
                             HAS_ZEROS, PDL)),
                (_wgmma_consumer, (w_ring, s_ring, z_ring, a_ring, ready, empty_bars, p_bias, p_out, p_ws, p_count,
                                   M, N, n_groups, steps, total, HAS_BIAS, BM, TILES, UNROLL, STAGES, SAME_GROUP,
                                   HAS_ZEROS, PIECES, False, 1, 2, 4)),
            ],
            [1, 4],
            [24, PINGPONG_REGS],
        )  # fmt: skip
