"""The fragment-layout W4A16 kernel (Gluon, sm_90): each lane dequantizes its own words straight into
``mma.sync.m16n8k16`` operands, no shuffles and no shared memory.

The weight is the A operand of ``out^T = W^T a^T`` (``fragment.py`` has the layout): every warp owns
one 16-column tile of ``N`` and walks its K split 64 rows (one chunk) at a time, ``U`` chunks a loop
step, the next step's words, activations and scales loaded before this step's are used. Per word (8
weights): 3 shifts and 4 ``lop3`` give ``MAGIC + q`` in four 16-bit pairs, 4 ``sub`` (``- (MAGIC + z)``,
exact) and 4 ``mul`` (times the scale, one rounding: the spec's ``(q - z) * s`` in the dtype, bit for
bit) make the operand, and one MMA (two for 16 rows of ``a``) multiplies it by 8 rows of activations
(B operand: lane ``l`` holds row ``l // 4``). Products are exact and summed in fp32 by the tensor core,
each word into its own accumulator; the accumulators are summed once, after the loop.

An output tile of ``MMA_N`` (8 or 16) rows of ``a`` and ``16 NW`` columns belongs to one program per K
split. With split-K each split stores its fp32 partial in a ``[S, M, N]`` workspace and the last split
to arrive (``ops/splitk.py``'s arrival counters) sums them in split order and rounds (+ bias):
deterministic, the result does not depend on the arrival order.
"""

from __future__ import annotations

import torch

from exactfuse.ops.splitk import arrival_counters
from exactfuse.ops.w4a16.dequant import permuted_columns
from exactfuse.ops.w4a16.fragment import CHUNK_K, TILE_N
from exactfuse.ops.w4a16.heuristics import fragment_config
from exactfuse.ops.w4a16.staged import HAS_GLUON, wgmma_unavailable
from exactfuse.registry.platform import interpreter_enabled
from exactfuse.utils import empty, num_sms

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier


def _chunk_asm(magic: int, ty: str, mma_type: str, blocks: int) -> str:
    """One lane's four words of a chunk ($w0..$w3, k-steps j = 0..3) dequantized with scale pairs $sr/$s8
    and zero pairs $zr/$z8 into the A registers, each followed by ``blocks`` MMAs (B registers $b0/$b1 of
    step j and block i) accumulated in place: C in, D out."""
    n_out = 4 * blocks
    w = [f"${n_out + j}" for j in range(4)]
    sr, s8, zr, z8 = (f"${n_out + 4 + i}" for i in range(4))
    b0 = n_out + 8  # block i, step j: $(b0 + 8 i + 2 j), $(b0 + 8 i + 2 j + 1)
    c0 = b0 + 8 * blocks
    pair = f"0x{magic:04x}{magic:04x}"
    lines = ["{", ".reg .b32 t0, t1, t2, t3, u0, u1, u2;"]
    lines += [f"mov.b32 ${i}, ${c0 + i};" for i in range(n_out)]
    for j in range(4):
        lines += [
            f"shr.u32 u0, {w[j]}, 4;",
            f"shr.u32 u1, {w[j]}, 8;",
            f"shr.u32 u2, {w[j]}, 12;",
            f"lop3.b32 t0, {w[j]}, 0x000f000f, {pair}, 0xea;",
            f"lop3.b32 t1, u0, 0x000f000f, {pair}, 0xea;",
            f"lop3.b32 t2, u1, 0x000f000f, {pair}, 0xea;",
            f"lop3.b32 t3, u2, 0x000f000f, {pair}, 0xea;",
            f"sub.rn.{ty} t0, t0, {zr};",
            f"sub.rn.{ty} t1, t1, {z8};",
            f"sub.rn.{ty} t2, t2, {zr};",
            f"sub.rn.{ty} t3, t3, {z8};",
            f"mul.rn.{ty} t0, t0, {sr};",
            f"mul.rn.{ty} t1, t1, {s8};",
            f"mul.rn.{ty} t2, t2, {sr};",
            f"mul.rn.{ty} t3, t3, {s8};",
        ]
        for i in range(blocks):
            d = ", ".join(f"${4 * i + t}" for t in range(4))
            b = f"${b0 + 8 * i + 2 * j}, ${b0 + 8 * i + 2 * j + 1}"
            mma = f"mma.sync.aligned.m16n8k16.row.col.f32.{mma_type}.{mma_type}.f32"
            lines.append(f"{mma} {{{d}}}, {{t0, t1, t2, t3}}, {{{b}}}, {{{d}}};")
    lines.append("}")
    return "\n".join(lines)


def _constraints(blocks: int) -> str:
    return ",".join(["=f"] * (4 * blocks) + ["r"] * (8 + 8 * blocks) + ["f"] * (4 * blocks))


if HAS_GLUON:
    _BF16_1 = gl.constexpr(_chunk_asm(0x4300, "bf16x2", "bf16", 1))
    _BF16_2 = gl.constexpr(_chunk_asm(0x4300, "bf16x2", "bf16", 2))
    _FP16_1 = gl.constexpr(_chunk_asm(0x6400, "f16x2", "f16", 1))
    _FP16_2 = gl.constexpr(_chunk_asm(0x6400, "f16x2", "f16", 2))
    _CONSTRAINTS_1 = gl.constexpr(_constraints(1))
    _CONSTRAINTS_2 = gl.constexpr(_constraints(2))

    @gluon.jit
    def _steps(x, layout: gl.constexpr):
        """``x [R, T, 4]`` (the last dim in one thread) as its four ``[R, T]`` slices in ``layout`` (the
        same registers: a trivial conversion), k-steps 0, 2, 1, 3."""
        y = gl.reshape(x, [x.shape[0], x.shape[1], 2, 2])
        lo, hi = gl.split(y)
        s0, s2 = gl.split(lo)
        s1, s3 = gl.split(hi)
        return (
            gl.convert_layout(s0, layout, assert_trivial=True),
            gl.convert_layout(s2, layout, assert_trivial=True),
            gl.convert_layout(s1, layout, assert_trivial=True),
            gl.convert_layout(s3, layout, assert_trivial=True),
        )

    @gluon.jit
    def _load_step(p_w, p_a32, o_word, o_a, m_a, m_a8, a_half, c, TWO: gl.constexpr):
        """Chunk ``c``'s words ``[R, T, 4]`` and activation pairs ``[R, 1, 4]`` (the block of rows 8..15 too
        with TWO)."""
        words = gl.load(p_w + o_word + c * 128)
        b0 = gl.load(p_a32 + o_a + c * 32, mask=m_a, other=0)
        b1 = gl.load(p_a32 + o_a + (c * 32 + 4), mask=m_a, other=0)
        if TWO:
            b2 = gl.load(p_a32 + o_a + (a_half + c * 32), mask=m_a8, other=0)
            b3 = gl.load(p_a32 + o_a + (a_half + c * 32 + 4), mask=m_a8, other=0)
        else:
            b2 = b0
            b3 = b1
        return words, b0, b1, b2, b3

    @gluon.jit(do_not_specialize=["M"])
    def w4a16_fragment_kernel(
        p_a32, p_w, p_s32, p_bias, p_out, p_ws, p_count, M, N, K, stride_a32, chunks_per_split,
        GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, MMA_N: gl.constexpr,
        TILES: gl.constexpr, num_warps: gl.constexpr,
    ):  # fmt: skip
        """Rows ``MMA_N * program_id(1) ..`` (``MMA_N`` 8 or 16) and columns ``16 TILES num_warps *
        program_id(0) ..`` of ``a @ W`` over K split ``program_id(2)`` (``chunks_per_split`` chunks of 64).

        p_a32: ``[M, K]`` fp16/bf16 viewed as int32 pairs, rows ``stride_a32`` pairs apart (a multiple
        of 4), 16-byte aligned. p_w: ``words [N/16, K/64, 32, 4]`` int32; p_s32: ``scales [groups, N/16,
        8, 8]`` viewed as int32 pairs (``fragment.py``); GROUP_CHUNKS: chunks of a group. p_bias:
        ``[N]`` (HAS_BIAS). p_out: ``[M, N]`` contiguous. SPLIT: p_ws ``[S, M, N]`` fp32 and p_count,
        int32 arrival counters, one per output tile, zero on entry and left zero. Each warp takes TILES
        16-column tiles, which share the activations' registers.
        """
        pid_n = gl.program_id(0)
        pid_m = gl.program_id(1)
        pid_s = gl.program_id(2)
        DT: gl.constexpr = p_out.dtype.element_ty
        TWO: gl.constexpr = MMA_N == 16
        ASM: gl.constexpr = (_BF16_2 if TWO else _BF16_1) if gl.bfloat16 == DT else (_FP16_2 if TWO else _FP16_1)
        CONSTRAINTS: gl.constexpr = _CONSTRAINTS_2 if TWO else _CONSTRAINTS_1
        R: gl.constexpr = 32 * num_warps
        L: gl.constexpr = gl.BlockedLayout([1, TILES, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
        L2: gl.constexpr = gl.SliceLayout(2, L)
        o_row = gl.arange(0, R, layout=gl.SliceLayout(1, L2))
        lane = o_row % 32
        o_t = gl.arange(0, TILES, layout=gl.SliceLayout(0, L2))
        o_j = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, L)))
        tile2 = gl.expand_dims((pid_n * num_warps + o_row // 32) * TILES, 1) + gl.expand_dims(o_t, 0)  # [R, T]
        lane2 = gl.expand_dims(lane, 1)
        lane3 = gl.expand_dims(lane2, 2)
        j3 = gl.expand_dims(gl.expand_dims(o_j, 0), 1)
        chunks = K // 64
        c_begin = pid_s * chunks_per_split
        # word [tile, chunk, lane, j]; activation pair (row l // 4, k = 64 chunk + 16 (l % 4) + 2 j) and
        # + 8; scale record (group, tile, row l // 4)
        o_word = ((gl.expand_dims(tile2, 2) * chunks) * 32 + lane3) * 4 + j3
        m_row = pid_m * MMA_N + lane3 // 4
        m_a = m_row < M
        m_a8 = m_row + 8 < M
        o_a = m_row * stride_a32 + (lane3 % 4) * 8 + j3
        a_half = 8 * stride_a32
        o_s = (tile2 * 8 + lane2 // 4) * 4  # [R, T]; + group * (N / 16) * 32 + t

        acc0 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc1 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc2 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc3 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc4 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc5 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc6 = gl.zeros([R, TILES], gl.float32, layout=L2)
        acc7 = gl.zeros([R, TILES], gl.float32, layout=L2)
        words, b0, b1, b2, b3 = _load_step(p_w, p_a32, o_word, o_a, m_a, m_a8, a_half, c_begin, TWO)
        c_last = c_begin + chunks_per_split - 1
        for c in range(c_begin, c_begin + chunks_per_split):
            # the next chunk's loads before this chunk's math (the last chunk loads itself again: unused)
            nw, n0, n1, n2, n3 = _load_step(p_w, p_a32, o_word, o_a, m_a, m_a8, a_half, gl.minimum(c + 1, c_last), TWO)
            o_g = o_s + (c // GROUP_CHUNKS) * (N // 16) * 32
            sr = gl.load(p_s32 + o_g)
            s8 = gl.load(p_s32 + o_g + 1)
            zr = gl.load(p_s32 + o_g + 2)
            z8 = gl.load(p_s32 + o_g + 3)
            w0, w2, w1, w3 = _steps(words, L2)
            x00, x02, x01, x03 = _steps(gl.broadcast(b0, words)[0], L2)
            x10, x12, x11, x13 = _steps(gl.broadcast(b1, words)[0], L2)
            if TWO:
                y00, y02, y01, y03 = _steps(gl.broadcast(b2, words)[0], L2)
                y10, y12, y11, y13 = _steps(gl.broadcast(b3, words)[0], L2)
                acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = gl.inline_asm_elementwise(
                    ASM, CONSTRAINTS,
                    [w0, w1, w2, w3, sr, s8, zr, z8, x00, x10, x01, x11, x02, x12, x03, x13,
                     y00, y10, y01, y11, y02, y12, y03, y13, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7],
                    (gl.float32,) * 8, True, 1,
                )  # fmt: skip
            else:
                acc0, acc1, acc2, acc3 = gl.inline_asm_elementwise(
                    ASM, CONSTRAINTS,
                    [w0, w1, w2, w3, sr, s8, zr, z8, x00, x10, x01, x11, x02, x12, x03, x13, acc0, acc1, acc2, acc3],
                    (gl.float32,) * 4, True, 1,
                )  # fmt: skip
            words, b0, b1, b2, b3 = nw, n0, n1, n2, n3

        # lane l: rows m0 = 2 (l % 4) (+1), columns n = 16 tile + l // 4 (+8); the second block m0 + 8
        o_n = tile2 * 16 + lane2 // 4
        o_m = pid_m * MMA_N + (lane2 % 4) * 2
        _finish(acc0, p_out, p_bias, p_ws, o_m, o_n, M, N, HAS_BIAS, SPLIT)
        _finish(acc1, p_out, p_bias, p_ws, o_m + 1, o_n, M, N, HAS_BIAS, SPLIT)
        _finish(acc2, p_out, p_bias, p_ws, o_m, o_n + 8, M, N, HAS_BIAS, SPLIT)
        _finish(acc3, p_out, p_bias, p_ws, o_m + 1, o_n + 8, M, N, HAS_BIAS, SPLIT)
        if TWO:
            _finish(acc4, p_out, p_bias, p_ws, o_m + 8, o_n, M, N, HAS_BIAS, SPLIT)
            _finish(acc5, p_out, p_bias, p_ws, o_m + 9, o_n, M, N, HAS_BIAS, SPLIT)
            _finish(acc6, p_out, p_bias, p_ws, o_m + 8, o_n + 8, M, N, HAS_BIAS, SPLIT)
            _finish(acc7, p_out, p_bias, p_ws, o_m + 9, o_n + 8, M, N, HAS_BIAS, SPLIT)
        if SPLIT:
            # Serial fixup, no second launch: the barrier orders every thread's partial before the arrival
            # (released at GPU scope); the last of the tile's S programs to arrive reads the partials past
            # L1 (.cg) after the acquire and sums them in the fixed order s = 0, 1, ...
            _barrier()
            S = gl.num_programs(2)
            tile_id = pid_m * gl.num_programs(0) + pid_n
            arrived = gl.atomic_add(p_count + tile_id, 1, sem="acq_rel", scope="gpu")
            if arrived == S - 1:
                _reduce(p_out, p_bias, p_ws, o_m, o_n, M, N, S, HAS_BIAS)
                _reduce(p_out, p_bias, p_ws, o_m + 1, o_n, M, N, S, HAS_BIAS)
                _reduce(p_out, p_bias, p_ws, o_m, o_n + 8, M, N, S, HAS_BIAS)
                _reduce(p_out, p_bias, p_ws, o_m + 1, o_n + 8, M, N, S, HAS_BIAS)
                if TWO:
                    _reduce(p_out, p_bias, p_ws, o_m + 8, o_n, M, N, S, HAS_BIAS)
                    _reduce(p_out, p_bias, p_ws, o_m + 9, o_n, M, N, S, HAS_BIAS)
                    _reduce(p_out, p_bias, p_ws, o_m + 8, o_n + 8, M, N, S, HAS_BIAS)
                    _reduce(p_out, p_bias, p_ws, o_m + 9, o_n + 8, M, N, S, HAS_BIAS)
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


def gluon_gpu_available() -> bool:
    """A CUDA GPU and a Triton with Gluon's Hopper language, not the interpreter (which runs no Gluon):
    where the fragment kernel's provider can be chosen at all (``packed_supports`` checks the device)."""
    return HAS_GLUON and torch.cuda.is_available() and not interpreter_enabled()


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
    split: int,
    mma_n: int,
) -> torch.Tensor:
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` from the fragment layout. ``split`` divides ``K / 64`` into
    splits; ``words.shape[0]`` (the 16-column tiles) is a multiple of ``warps * tiles``."""
    if perm is not None:
        a = permuted_columns(a, perm)
    if a.stride(1) != 1 or a.stride(0) % 8 or a.data_ptr() % 16:
        a = a.contiguous() if a.shape[1] % 8 == 0 and a.data_ptr() % 16 == 0 else a.clone()
    M, K = a.shape
    n_tiles, chunks = words.shape[:2]
    N = n_tiles * TILE_N
    groups = scales.shape[0]
    group_chunks = chunks // groups
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    grid = (n_tiles // (warps * tiles), -(-M // mma_n), split)
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device) if split > 1 else out
    counts = arrival_counters(a.device, grid[0] * grid[1]) if split > 1 else words
    a32 = a.view(torch.int32)
    b = bias if bias is not None else scales
    w4a16_fragment_kernel[grid](
        a32, words, scales.view(torch.int32), b, out, ws, counts, M, N, K, a.stride(0) // 2,
        chunks // split, GROUP_CHUNKS=group_chunks, HAS_BIAS=bias is not None, SPLIT=split > 1, MMA_N=mma_n,
        TILES=tiles, num_warps=warps,
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
    N, K = words.shape[0] * TILE_N, words.shape[1] * CHUNK_K
    cfg = fragment_config(a.shape[0], N, K, num_sms(a.device))
    return launch_fragment(a, words, scales, perm, bias, **cfg)
