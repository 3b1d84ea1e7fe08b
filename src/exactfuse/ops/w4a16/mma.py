"""The fragment-layout W4A16 kernel (Gluon, sm_90): each lane dequantizes its own words straight into
``mma.sync.m16n8k16`` operands, no shuffles and no shared memory.

The weight is the A operand of ``out^T = W^T a^T`` (``fragment.py`` has the layout): every warp owns
``TILES`` 16-column tiles of ``N`` and walks its K split ``UNROLL`` 64-row chunks a step, the next step's
words, scale records and activations (16-byte loads) issued before this step's are used, so that a warp
keeps a step of every operand in flight. Per word (8 weights): 3 shifts and 4
``lop3`` give ``MAGIC + q`` in four 16-bit pairs, 4 ``sub`` (``- (MAGIC + z)``, exact) and 4 ``mul``
(times the scale, one rounding: the spec's ``(q - z) * s`` in the dtype, bit for bit) make the operand,
which multiplies each of ``BLOCKS`` blocks of 8 rows of activations (the B operand: lane ``l`` holds
row ``l // 4`` of a block), one MMA a block. Products are exact and summed in fp32 by the tensor core,
the four k-steps of a chunk into the same accumulators.

An output tile of ``8 BLOCKS`` rows of ``a`` and ``16 TILES num_warps`` columns belongs to one program
per K split. With split-K each split stores its fp32 partial in a ``[S, M, N]`` workspace and the last
split to arrive (``ops/arrival.py``'s counters) sums them in split order and rounds (+ bias):
deterministic, the result does not depend on the arrival order. The launch rule is
``heuristics.fragment_config``. Above ``heuristics.DENSE_ABOVE_M`` rows (``w4a16_gemm``'s boundary for its dense
path) the provider dequantizes the layout in one kernel (``dequant.dense_from_fragment``) and multiplies with
``torch.matmul``, as the spec does, bit for bit.
"""

from __future__ import annotations

import torch

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16.dequant import packed_dense_gemm, permuted_columns
from exactfuse.ops.w4a16.fragment import CHUNK_K, TILE_N
from exactfuse.ops.w4a16.heuristics import DENSE_ABOVE_M, fragment_config
from exactfuse.ops.w4a16.staged import HAS_GLUON, wgmma_unavailable
from exactfuse.registry.platform import interpreter_enabled
from exactfuse.utils import empty, num_sms

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier


def _dequant_asm(magic: int, ty: str) -> str:
    """One word ($4) dequantized with scale pairs $5/$6 (rows r, r + 8) and zero pairs $7/$8 into the four
    A registers of its MMA k-step ($0..$3): ``((MAGIC | q) - (MAGIC + z)) * s``, two weights an instruction."""
    pair = f"0x{magic:04x}{magic:04x}"
    return "\n".join(
        [
            "{",
            ".reg .b32 u0, u1, u2;",
            "shr.u32 u0, $4, 4;",
            "shr.u32 u1, $4, 8;",
            "shr.u32 u2, $4, 12;",
            f"lop3.b32 $0, $4, 0x000f000f, {pair}, 0xea;",
            f"lop3.b32 $1, u0, 0x000f000f, {pair}, 0xea;",
            f"lop3.b32 $2, u1, 0x000f000f, {pair}, 0xea;",
            f"lop3.b32 $3, u2, 0x000f000f, {pair}, 0xea;",
            f"sub.rn.{ty} $0, $0, $7;",
            f"sub.rn.{ty} $1, $1, $8;",
            f"sub.rn.{ty} $2, $2, $7;",
            f"sub.rn.{ty} $3, $3, $8;",
            f"mul.rn.{ty} $0, $0, $5;",
            f"mul.rn.{ty} $1, $1, $6;",
            f"mul.rn.{ty} $2, $2, $5;",
            f"mul.rn.{ty} $3, $3, $6;",
            "}",
        ]
    )


def _mma_asm(mma_type: str) -> str:
    """``D ($0..$3) = A ($4..$7) B ($8, $9) + C ($10..$13)``: one m16n8k16 MMA, fp32 accumulators."""
    return (
        f"mma.sync.aligned.m16n8k16.row.col.f32.{mma_type}.{mma_type}.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
    )


if HAS_GLUON:
    _DEQUANT_BF16 = gl.constexpr(_dequant_asm(0x4300, "bf16x2"))
    _DEQUANT_FP16 = gl.constexpr(_dequant_asm(0x6400, "f16x2"))
    _DEQUANT_CONSTRAINTS = gl.constexpr("=r,=r,=r,=r,r,r,r,r,r")
    _MMA_BF16 = gl.constexpr(_mma_asm("bf16"))
    _MMA_FP16 = gl.constexpr(_mma_asm("f16"))
    _MMA_CONSTRAINTS = gl.constexpr("=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")

    @gluon.jit
    def _steps(x, layout: gl.constexpr):
        """``x [R, C, 4]`` (the last dim in one thread) as its four ``[R, C]`` slices in ``layout`` (the
        same registers: a trivial conversion), k-steps 0, 1, 2, 3."""
        y = gl.reshape(x, [x.shape[0], x.shape[1], 2, 2])
        lo, hi = gl.split(y)  # k-steps (0, 2) and (1, 3)
        s0, s2 = gl.split(lo)
        s1, s3 = gl.split(hi)
        return (
            gl.convert_layout(s0, layout, assert_trivial=True),
            gl.convert_layout(s1, layout, assert_trivial=True),
            gl.convert_layout(s2, layout, assert_trivial=True),
            gl.convert_layout(s3, layout, assert_trivial=True),
        )

    @gluon.jit
    def _mma_step(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, MMA: gl.constexpr):
        """One k-step for every (tile, block) pair: ``a* [R, T, 1]`` (the tile's A registers), ``b* [R, 1,
        B]`` (the block's B registers), ``c* [R, T, B]``."""
        a0 = gl.broadcast(a0, c0)[0]
        a1 = gl.broadcast(a1, c0)[0]
        a2 = gl.broadcast(a2, c0)[0]
        a3 = gl.broadcast(a3, c0)[0]
        b0 = gl.broadcast(b0, c0)[0]
        b1 = gl.broadcast(b1, c0)[0]
        return gl.inline_asm_elementwise(
            MMA, _MMA_CONSTRAINTS, [a0, a1, a2, a3, b0, b1, c0, c1, c2, c3], (gl.float32,) * 4, True, 1
        )

    @gluon.jit
    def _axis(n: gl.constexpr, dim: gl.constexpr, layout: gl.constexpr):
        """``arange(n)`` along ``dim`` of the 4-D ``layout``, size 1 on the other dims."""
        if dim == 0:
            v = gl.arange(0, n, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, layout))))
            out = gl.expand_dims(gl.expand_dims(gl.expand_dims(v, 1), 2), 3)
        elif dim == 1:
            v = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, layout))))
            out = gl.expand_dims(gl.expand_dims(gl.expand_dims(v, 0), 2), 3)
        elif dim == 2:
            v = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, layout))))
            out = gl.expand_dims(gl.expand_dims(gl.expand_dims(v, 0), 1), 3)
        else:
            v = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, layout))))
            out = gl.expand_dims(gl.expand_dims(gl.expand_dims(v, 0), 1), 2)
        return out

    @gluon.jit
    def _unstack(x, layout: gl.constexpr, U: gl.constexpr):
        """``x [R, C, U, 4]`` (all of it in one thread's registers) as its ``U`` slices ``[R, C, 4]`` in
        ``layout``, chunk 0 first (``U`` 1, 2 or 4)."""
        R: gl.constexpr = x.shape[0]
        C: gl.constexpr = x.shape[1]
        if U == 1:
            out = (gl.convert_layout(gl.reshape(x, [R, C, 4]), layout),)
        elif U == 2:
            u0, u1 = gl.split(gl.permute(x, [0, 1, 3, 2]))
            out = (gl.convert_layout(u0, layout), gl.convert_layout(u1, layout))
        else:
            y = gl.permute(gl.reshape(x, [R, C, 2, 2, 4]), [0, 1, 4, 2, 3])  # [R, C, 4, u // 2, u % 2]
            even, odd = gl.split(y)
            u0, u2 = gl.split(even)
            u1, u3 = gl.split(odd)
            out = (
                gl.convert_layout(u0, layout), gl.convert_layout(u1, layout),
                gl.convert_layout(u2, layout), gl.convert_layout(u3, layout),
            )  # fmt: skip
        return out

    @gluon.jit
    def _record(rec, layout: gl.constexpr):
        """A scale record ``[R, T, 4]`` (``s_r, s_r8, MAGIC + z_r, MAGIC + z_r8`` pairs) as four ``[R, T,
        4]`` tensors in ``layout``, each field repeated along the last dim."""
        even, odd = gl.split(gl.reshape(rec, [rec.shape[0], rec.shape[1], 2, 2]))  # (s_r, z_r), (s_r8, z_r8)
        sr, zr = gl.split(even)
        s8, z8 = gl.split(odd)
        return _repeat4(sr, layout), _repeat4(s8, layout), _repeat4(zr, layout), _repeat4(z8, layout)

    @gluon.jit
    def _repeat4(x, layout: gl.constexpr):
        """``x [R, T]`` as ``[R, T, 4]`` in ``layout``, repeated along the last dim."""
        y = gl.expand_dims(gl.convert_layout(x, gl.SliceLayout(2, layout)), 2)
        return gl.broadcast(y, gl.full([x.shape[0], x.shape[1], 4], 0, gl.int32, layout=layout))[0]

    @gluon.jit(do_not_specialize=["M"])
    def w4a16_fragment_kernel(
        p_a32, p_w, p_s32, p_bias, p_out, p_ws, p_count, M, N, K, stride_a32, chunks_per_split,
        GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, BLOCKS: gl.constexpr,
        TILES: gl.constexpr, UNROLL: gl.constexpr, num_warps: gl.constexpr,
    ):  # fmt: skip
        """Rows ``8 BLOCKS program_id(1) ..`` and columns ``16 TILES num_warps program_id(0) ..`` of
        ``a @ W`` over K split ``program_id(2)`` (``chunks_per_split`` chunks of 64 rows, a multiple of
        ``UNROLL``).

        p_a32: ``[M, K]`` fp16/bf16 viewed as int32 pairs, rows ``stride_a32`` pairs apart (a multiple
        of 4), 16-byte aligned. p_w: ``words [N/16, K/64, 32, 4]`` int32; p_s32: ``scales [groups, N/16,
        8, 8]`` viewed as int32 pairs (``fragment.py``); GROUP_CHUNKS: chunks of a group. p_bias:
        ``[N]`` (HAS_BIAS). p_out: ``[M, N]`` contiguous. SPLIT: p_ws ``[S, M, N]`` fp32 and p_count,
        int32 arrival counters, one per output tile, zero on entry and left zero. Each warp takes TILES
        16-column tiles and BLOCKS blocks of 8 rows: a tile's operand, dequantized once, multiplies every
        block's activations, a block's every tile. A step takes UNROLL chunks: their words, scale records
        and activations (16-byte loads) are loaded a step ahead, so that ``UNROLL`` chunks of every
        operand are in flight while the previous ones are multiplied.
        """
        pid_n = gl.program_id(0)
        pid_m = gl.program_id(1)
        pid_s = gl.program_id(2)
        DT: gl.constexpr = p_out.dtype.element_ty
        DEQUANT: gl.constexpr = _DEQUANT_BF16 if gl.bfloat16 == DT else _DEQUANT_FP16
        MMA: gl.constexpr = _MMA_BF16 if gl.bfloat16 == DT else _MMA_FP16
        R: gl.constexpr = 32 * num_warps
        U: gl.constexpr = UNROLL
        LW: gl.constexpr = gl.BlockedLayout([1, TILES, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
        LA: gl.constexpr = gl.BlockedLayout([1, BLOCKS, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
        LWU: gl.constexpr = gl.BlockedLayout([1, TILES, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
        LAU: gl.constexpr = gl.BlockedLayout([1, BLOCKS, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
        L3: gl.constexpr = gl.BlockedLayout([1, TILES, BLOCKS], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
        LT: gl.constexpr = gl.SliceLayout(2, L3)  # [R, T]
        LB: gl.constexpr = gl.SliceLayout(1, L3)  # [R, B]
        chunks = K // 64
        c_begin = pid_s * chunks_per_split
        c_last = c_begin + chunks_per_split - U  # the last step's first chunk
        # word [tile, chunk c + u, lane, j] and scale record [group of c + u, tile, row l // 4, j]: [R, T, U, 4]
        r_w = _axis(R, 0, LWU)
        tile_w = (pid_n * num_warps + r_w // 32) * TILES + _axis(TILES, 1, LWU)
        u_w = _axis(U, 2, LWU)
        j_w = _axis(4, 3, LWU)
        o_word = ((tile_w * chunks) * 32 + r_w % 32) * 4 + j_w + u_w * 128
        o_rec = (tile_w * 8 + (r_w % 32) // 4) * 4 + j_w
        group_stride = (N // 16) * 32
        # activation pair p of row m = 8 (B pid_m + block) + l // 4, k = 64 (c + u) + 16 (l % 4) + 2 p: pairs
        # 0-3, then 4-7 (the second load): [R, B, U, 4]
        r_a = _axis(R, 0, LAU)
        m_a = (pid_m * BLOCKS + _axis(BLOCKS, 1, LAU)) * 8 + (r_a % 32) // 4
        o_a = m_a * stride_a32 + (r_a % 4) * 8 + _axis(4, 3, LAU) + _axis(U, 2, LAU) * 32
        mask_a = gl.broadcast(m_a < M, o_a)[0]

        acc0 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc1 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc2 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        acc3 = gl.zeros([R, TILES, BLOCKS], gl.float32, layout=L3)
        words = gl.load(p_w + o_word + c_begin * 128)
        recs = gl.load(p_s32 + o_rec + ((c_begin + u_w) // GROUP_CHUNKS) * group_stride)
        x0 = gl.load(p_a32 + o_a + c_begin * 32, mask=mask_a, other=0)
        x1 = gl.load(p_a32 + o_a + (c_begin * 32 + 4), mask=mask_a, other=0)
        for c in range(c_begin, c_begin + chunks_per_split, U):
            # the next step's loads before this step's math (the last step loads itself again: unused)
            c_next = gl.minimum(c + U, c_last)
            n_words = gl.load(p_w + o_word + c_next * 128)
            n_recs = gl.load(p_s32 + o_rec + ((c_next + u_w) // GROUP_CHUNKS) * group_stride)
            n_x0 = gl.load(p_a32 + o_a + c_next * 32, mask=mask_a, other=0)
            n_x1 = gl.load(p_a32 + o_a + (c_next * 32 + 4), mask=mask_a, other=0)
            acc0, acc1, acc2, acc3 = fragment_step(
                words, recs, x0, x1, acc0, acc1, acc2, acc3, LW, LA, LT, LB, U, DEQUANT, MMA
            )
            words, recs, x0, x1 = n_words, n_recs, n_x0, n_x1

        fragment_epilogue(
            acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, pid_n * num_warps, pid_m,
            LT, LB, R, TILES, BLOCKS, HAS_BIAS, SPLIT,
        )  # fmt: skip

    @gluon.jit
    def fragment_step(
        words, recs, x0, x1, acc0, acc1, acc2, acc3, LW: gl.constexpr, LA: gl.constexpr, LT: gl.constexpr,
        LB: gl.constexpr, U: gl.constexpr, DEQUANT: gl.constexpr, MMA: gl.constexpr,
    ):  # fmt: skip
        """One kernel step: ``U`` chunks of words ``[R, T, U, 4]``, scale records (the same) and activations
        ``x0``, ``x1`` ``[R, B, U, 4]`` dequantized and multiplied into the four accumulators, chunk by chunk,
        k-step by k-step; the accumulators back."""
        w_u = _unstack(words, LW, U)
        rec_u = _unstack(recs, LW, U)
        x0_u = _unstack(x0, LA, U)
        x1_u = _unstack(x1, LA, U)
        for u in gl.static_range(U):
            sr, s8, zr, z8 = _record(rec_u[u], LW)
            r0, r1, r2, r3 = gl.inline_asm_elementwise(
                DEQUANT, _DEQUANT_CONSTRAINTS, [w_u[u], sr, s8, zr, z8], (gl.int32,) * 4, True, 1
            )
            r0s = _steps(r0, LT)
            r1s = _steps(r1, LT)
            r2s = _steps(r2, LT)
            r3s = _steps(r3, LT)
            # k-step j's B registers are activation pairs 2 j and 2 j + 1: adjacent in one 16-byte load
            xs = _steps(x0_u[u], LB) + _steps(x1_u[u], LB)
            for j in gl.static_range(4):
                acc0, acc1, acc2, acc3 = _mma_step(
                    gl.expand_dims(r0s[j], 2), gl.expand_dims(r1s[j], 2), gl.expand_dims(r2s[j], 2),
                    gl.expand_dims(r3s[j], 2), gl.expand_dims(xs[2 * j], 1), gl.expand_dims(xs[2 * j + 1], 1),
                    acc0, acc1, acc2, acc3, MMA,
                )  # fmt: skip
        return acc0, acc1, acc2, acc3

    @gluon.jit
    def fragment_epilogue(
        acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, warp0, pid_m, LT: gl.constexpr, LB: gl.constexpr,
        R: gl.constexpr, TILES: gl.constexpr, BLOCKS: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr,
    ):  # fmt: skip
        """The accumulators of the program's tiles (``TILES (warp0 + row // 32) ..``) and blocks stored: the
        output, or with SPLIT the split's partial and, for the last split of the tile to arrive, the sum."""
        # lane l: rows m0 = 8 block + 2 (l % 4) (+1), columns n = 16 tile + l // 4 (+8)
        o_row = gl.arange(0, R, layout=gl.SliceLayout(1, LT))
        lane_t = gl.expand_dims(o_row % 32, 1)  # [R, 1] in LT
        tile = gl.expand_dims((warp0 + o_row // 32) * TILES, 1) + gl.expand_dims(
            gl.arange(0, TILES, layout=gl.SliceLayout(0, LT)), 0
        )  # [R, T]
        block = gl.expand_dims(gl.arange(0, BLOCKS, layout=gl.SliceLayout(0, LB)), 0)  # [1, B]
        lane_b = gl.expand_dims(gl.convert_layout(o_row % 32, gl.SliceLayout(1, LB), assert_trivial=True), 1)
        o_n = gl.expand_dims(tile * 16 + lane_t // 4, 2)  # [R, T, 1]
        o_m = gl.expand_dims((pid_m * BLOCKS + block) * 8 + (lane_b % 4) * 2, 1)  # [R, 1, B]
        o_n = gl.broadcast(o_n, acc0)[0]
        o_m = gl.broadcast(o_m, acc0)[0]
        _finish(acc0, p_out, p_bias, p_ws, o_m, o_n, M, N, HAS_BIAS, SPLIT)
        _finish(acc1, p_out, p_bias, p_ws, o_m + 1, o_n, M, N, HAS_BIAS, SPLIT)
        _finish(acc2, p_out, p_bias, p_ws, o_m, o_n + 8, M, N, HAS_BIAS, SPLIT)
        _finish(acc3, p_out, p_bias, p_ws, o_m + 1, o_n + 8, M, N, HAS_BIAS, SPLIT)
        if SPLIT:
            # Serial fixup, no second launch: the barrier orders every thread's partial before the arrival
            # (released at GPU scope); the last of the tile's S programs to arrive reads the partials past
            # L1 (.cg) after the acquire and sums them in the fixed order s = 0, 1, ...
            _barrier()
            S = gl.num_programs(2)
            tile_id = pid_m * gl.num_programs(0) + gl.program_id(0)
            arrived = gl.atomic_add(p_count + tile_id, 1, sem="acq_rel", scope="gpu")
            if arrived == S - 1:
                _reduce(p_out, p_bias, p_ws, o_m, o_n, M, N, S, HAS_BIAS)
                _reduce(p_out, p_bias, p_ws, o_m + 1, o_n, M, N, S, HAS_BIAS)
                _reduce(p_out, p_bias, p_ws, o_m, o_n + 8, M, N, S, HAS_BIAS)
                _reduce(p_out, p_bias, p_ws, o_m + 1, o_n + 8, M, N, S, HAS_BIAS)
                gl.store(p_count + tile_id, 0)

    @gluon.jit
    def _store_out(y, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS: gl.constexpr):
        """Round the fp32 values to the output dtype once (+ bias in fp32, rounded again: eager's
        ``matmul(a, W) + bias``) and store them where ``o_m < M``."""
        DT: gl.constexpr = p_out.dtype.element_ty
        v = y.to(DT)
        if HAS_BIAS:
            v = (v.to(gl.float32) + gl.load(p_bias + o_n).to(gl.float32)).to(DT)
        gl.store(p_out + o_m * N + o_n, v, mask=o_m < M)

    @gluon.jit
    def _finish(y, p_out, p_bias, p_ws, o_m, o_n, M, N, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr):
        """One accumulator's values: the output, or split ``program_id(2)``'s partial."""
        if SPLIT:
            gl.store(p_ws + (gl.program_id(2) * M + o_m) * N + o_n, y, mask=o_m < M)
        else:
            _store_out(y, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS)

    @gluon.jit
    def _reduce(p_out, p_bias, p_ws, o_m, o_n, M, N, S, HAS_BIAS: gl.constexpr):
        """The splits' partials of these outputs summed in split order, rounded and stored."""
        total = gl.load(p_ws + o_m * N + o_n, mask=o_m < M, other=0.0, cache_modifier=".cg")
        for s in range(1, S):
            total += gl.load(p_ws + (s * M + o_m) * N + o_n, mask=o_m < M, other=0.0, cache_modifier=".cg")
        _store_out(total, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS)


def gluon_gpu_supported() -> bool | str:
    """``True`` with a CUDA GPU and a Triton with Gluon's Hopper language, not the interpreter (which runs
    no Gluon): where the fragment kernel's provider can be chosen at all (``packed_supports`` checks the
    device per call); else why not, for the provider's ``supported``."""
    if not HAS_GLUON:
        return "it runs Gluon kernels on sm_90 GPUs, and this Triton has no Gluon Hopper language"
    if interpreter_enabled():
        return "it runs Gluon kernels on sm_90 GPUs, which the Triton interpreter (TRITON_INTERPRET=1) does not run"
    if not torch.cuda.is_available():
        return "it runs Gluon kernels on sm_90 GPUs, and no CUDA GPU is available here"
    return True


def gluon_gpu_available() -> bool:
    """Whether the fragment kernel's provider can be chosen here (:func:`gluon_gpu_supported`)."""
    return gluon_gpu_supported() is True


def fragment_unavailable(a: torch.Tensor) -> str | None:
    """Why ``a``'s device cannot run the fragment kernel (None: it can)."""
    return wgmma_unavailable(a)


def launch_fragment(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
    *,
    warps: int,
    tiles: int,
    blocks: int,
    split: int,
    unroll: int = 1,
) -> torch.Tensor:
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` from the fragment layout. ``split`` divides ``K / 64`` into
    splits of a multiple of ``unroll`` (1, 2 or 4) chunks; ``words.shape[0]`` (the 16-column tiles) is a
    multiple of ``warps * tiles``."""
    if perm is not None:
        a = permuted_columns(a, perm)
    if a.stride(1) != 1 or a.stride(0) % 8 or a.data_ptr() % 16:
        a = a.contiguous() if a.shape[1] % 8 == 0 and a.data_ptr() % 16 == 0 else a.clone()
    M, K = a.shape
    n_tiles, chunks = words.shape[:2]
    N = n_tiles * TILE_N
    groups = scales.shape[0]
    group_chunks = chunks // groups
    if chunks % split or (chunks // split) % unroll:
        raise ValueError(f"split={split}, unroll={unroll}: the {chunks} chunks of K do not divide into them")
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    grid = (n_tiles // (warps * tiles), -(-M // (8 * blocks)), split)
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device) if split > 1 else out
    counts = arrival_counters(a.device, grid[0] * grid[1]) if split > 1 else words
    a32 = a.view(torch.int32)
    b = bias if bias is not None else scales
    w4a16_fragment_kernel[grid](
        a32, words, scales.view(torch.int32), b, out, ws, counts, M, N, K, a.stride(0) // 2,
        chunks // split, GROUP_CHUNKS=group_chunks, HAS_BIAS=bias is not None, SPLIT=split > 1, BLOCKS=blocks,
        TILES=tiles, UNROLL=unroll, num_warps=warps,
    )  # fmt: skip
    return out


assert CHUNK_K == 64 and TILE_N == 16  # the kernel's index arithmetic


def packed_supports(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> bool | str:
    """An sm_90 GPU with Gluon, ``a`` with unit last stride, contiguous layout tensors; else the reason."""
    if reason := fragment_unavailable(a):
        return reason
    if a.stride(1) != 1:
        return f"a has strides {tuple(a.stride())}: the kernel reads rows of a with unit last stride"
    for name, t in (("words", words), ("scales", scales), ("perm", perm), ("bias", bias)):
        if t is not None and not t.is_contiguous():
            return f"{name} has strides {tuple(t.stride())}: the kernel reads it contiguous"
    if words.numel() >= 2**31 or a.shape[0] * max(a.stride(0), words.shape[0] * TILE_N) >= 2**31:
        return "offsets past 2^31 need int64, which the kernel does not take"
    return True


def w4a16_gemm_packed_triton(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    if a.shape[0] > DENSE_ABOVE_M:  # w4a16_gemm's rule: above it the dense weight and cuBLAS
        return packed_dense_gemm(a, words, scales, perm, bias)
    N, K = words.shape[0] * TILE_N, words.shape[1] * CHUNK_K
    cfg = fragment_config(a.shape[0], N, K, num_sms(a.device))
    return launch_fragment(a, words, scales, perm, bias, **cfg)
