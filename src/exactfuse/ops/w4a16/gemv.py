"""W4A16 GEMV for one or two rows (M <= 2): dequantize on CUDA cores and multiply-add in fp32, no tl.dot.

:func:`w4a16_gemv_kernel` computes ``[BM, BN]`` outputs (BM = 1 or 2) over one K slice. Each program
walks its slice in ``[BK / 8, BN]`` tiles of packed words; each word holds 8 consecutive K rows of one
column (GPTQ order, nibble j = row 8r + j). The 8 nibbles of a word are dequantized together, then
each multiplies its activation and adds to the row's fp32 ``[BK / 8, BN]`` accumulator, summed over
its rows once, after the loop. Split-K and the output store are the fused GEMM's
(``splitk.finish_tile``). ``heuristics`` has the measurements (it serves M <= 2). Where the launcher
allows (``WIDE_A``), each row's activations come 4 to a 64-bit load; with ``SCALE_TILE`` the scales
are loaded in the packed words' layout, one per word, instead of one per column and moved into that
layout through shared memory.

Dequantization is the spec's, bit for bit: ``(q - z)`` exact, times the scale with one rounding to
the activation dtype. With ``PACKED_MATH`` (on the GPU) it runs two weights per instruction in
16-bit pairs (PTX ``sub.rn`` / ``mul.rn`` on bf16x2 or f16x2, sm_90): ``0x4300 | q`` is the bf16
``128 + q`` (fp16: ``0x6400 | q`` is ``1024 + q``), minus ``128 + z`` is ``q - z`` exactly, and a
16-bit multiply rounds the exact product once, as the spec's multiply in the activation dtype does.
The product with the activation is exact in fp32 and accumulated in fp32, as cuBLAS does. Without
``PACKED_MATH`` (the Triton interpreter) the same values come from fp32 arithmetic.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.w4a16.splitk import finish_tile

# One packed word in ($8), its 16-bit scale ($9) and zero point ($10, 0..15); nibbles 0..7 out as fp32 bit
# patterns ($0..$7). Pair t_i holds nibbles i (low half) and i + 4 (high half); s2 and z2 are the scale and
# (magic | z) twice over.
_UNPACK_PAIRS = """
mov.b32 s2, {{$9, $9}};
or.b32 z2, $10, {magic16};
prmt.b32 z2, z2, z2, 0x1010;
shr.u32 u0, $8, 4;
shr.u32 u1, $8, 8;
shr.u32 u2, $8, 12;
lop3.b32 t0, $8, 0x000f000f, {magic}, 0xea;
lop3.b32 t1, u0, 0x000f000f, {magic}, 0xea;
lop3.b32 t2, u1, 0x000f000f, {magic}, 0xea;
lop3.b32 t3, u2, 0x000f000f, {magic}, 0xea;
sub.rn.{ty} t0, t0, z2;
sub.rn.{ty} t1, t1, z2;
sub.rn.{ty} t2, t2, z2;
sub.rn.{ty} t3, t3, z2;
mul.rn.{ty} t0, t0, s2;
mul.rn.{ty} t1, t1, s2;
mul.rn.{ty} t2, t2, s2;
mul.rn.{ty} t3, t3, s2;
"""
_REGS = ".reg .b32 t0, t1, t2, t3, u0, u1, u2, s2, z2;\n"
_DEQUANT_BF16 = tl.constexpr(
    "{\n"
    + _REGS
    + _UNPACK_PAIRS.format(magic16="0x4300", magic="0x43004300", ty="bf16x2")
    + "".join(f"shl.b32 ${i}, t{i}, 16;\nand.b32 ${i + 4}, t{i}, 0xffff0000;\n" for i in range(4))
    + "}"
)
_DEQUANT_F16 = tl.constexpr(
    "{\n"
    + _REGS
    + ".reg .b16 h0, h1, h2, h3, h4, h5, h6, h7;\n"
    + _UNPACK_PAIRS.format(magic16="0x6400", magic="0x64006400", ty="f16x2")
    + "".join(f"mov.b32 {{h{i}, h{i + 4}}}, t{i};\n" for i in range(4))
    + "".join(f"cvt.f32.f16 ${i}, h{i};\n" for i in range(8))
    + "}"
)
_CONSTRAINTS = tl.constexpr(",".join(["=r"] * 8 + ["r", "h", "r"]))


@triton.jit
def _dequant_words(b_q, b_s, b_z, PACKED_MATH: tl.constexpr):
    """The 8 weights of each packed word of ``b_q`` (int32), dequantized with scales ``b_s`` (fp16/bf16) and
    zero points ``b_z`` (int32 or 8), rounded to the scales' dtype and returned as 8 fp32 tensors (nibble
    order). ``b_s`` and ``b_z`` broadcast against ``b_q``."""
    dt = b_s.dtype
    if PACKED_MATH:
        b_s = tl.broadcast_to(b_s, b_q.shape)
        b_z = tl.broadcast_to(b_z, b_q.shape)
        if dt == tl.bfloat16:
            w = tl.inline_asm_elementwise(_DEQUANT_BF16, _CONSTRAINTS, [b_q, b_s, b_z], (tl.int32,) * 8, True, 1)
        else:
            w = tl.inline_asm_elementwise(_DEQUANT_F16, _CONSTRAINTS, [b_q, b_s, b_z], (tl.int32,) * 8, True, 1)
        return (
            w[0].to(tl.float32, bitcast=True),
            w[1].to(tl.float32, bitcast=True),
            w[2].to(tl.float32, bitcast=True),
            w[3].to(tl.float32, bitcast=True),
            w[4].to(tl.float32, bitcast=True),
            w[5].to(tl.float32, bitcast=True),
            w[6].to(tl.float32, bitcast=True),
            w[7].to(tl.float32, bitcast=True),
        )
    else:
        b_sf = b_s.to(tl.float32)
        return (
            (((b_q & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 4) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 8) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 12) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 16) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 20) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 24) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
            ((((b_q >> 28) & 0xF) - b_z).to(tl.float32) * b_sf).to(dt).to(tl.float32),
        )


@triton.jit
def _activation(p_a, p_perm, o_k, m_k, K, HAS_PERM: tl.constexpr, EVEN_K: tl.constexpr):
    """Activations ``p_a[perm[o_k]]`` (``p_a[o_k]`` without HAS_PERM) of one row in fp32; 0 past K."""
    if HAS_PERM:  # a perm entry outside [0, K) reads 0, never outside a's row
        o_ka = tl.load(p_perm + o_k, mask=m_k, other=0)
        return tl.load(p_a + o_ka, mask=m_k & (o_ka >= 0) & (o_ka < K), other=0.0).to(tl.float32)
    o_ka = o_k
    if EVEN_K:
        return tl.load(p_a + o_ka).to(tl.float32)
    return tl.load(p_a + o_ka, mask=m_k, other=0.0).to(tl.float32)


@triton.jit
def _activation_quad(p_a, o_q, m_k, EVEN_K: tl.constexpr):
    """Activations ``4 o_q .. 4 o_q + 3`` of one row (``p_a`` 8-byte aligned) in one 64-bit load each, as
    four fp32 tensors; 0 past K."""
    p_aq = p_a.to(tl.pointer_type(tl.int64))
    q = tl.load(p_aq + o_q) if EVEN_K else tl.load(p_aq + o_q, mask=m_k, other=0)
    lo = q.to(tl.int32)
    hi = (q >> 32).to(tl.int32)
    if p_a.dtype.element_ty == tl.bfloat16:  # a bf16 is the high half of its fp32
        return (
            (lo << 16).to(tl.float32, bitcast=True),
            (lo & -65536).to(tl.float32, bitcast=True),
            (hi << 16).to(tl.float32, bitcast=True),
            (hi & -65536).to(tl.float32, bitcast=True),
        )
    return (
        lo.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),
        (lo >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),
        hi.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),
        (hi >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),
    )


@triton.jit
def _row_multiply_add(
    acc,
    w0,
    w1,
    w2,
    w3,
    w4,
    w5,
    w6,
    w7,
    p_a,
    p_perm,
    m,
    M,
    K,
    o_w,
    m_w,
    stride_am,
    HAS_PERM: tl.constexpr,
    EVEN_K: tl.constexpr,
    WIDE_A: tl.constexpr,
):
    """``acc[r, n] += sum_j a[m, 8 o_w[r] + j] * w_j[r, n]`` for activation row ``m``; a row past M reads row
    0 instead (no mask per element; its outputs are not stored). WIDE_A: the row's activations in 64-bit
    loads (no HAS_PERM; the launcher checks the alignment)."""
    p_am = p_a + tl.minimum(m, M - 1) * stride_am
    if WIDE_A:
        a0, a1, a2, a3 = _activation_quad(p_am, o_w * 2, m_w, EVEN_K)
        a4, a5, a6, a7 = _activation_quad(p_am, o_w * 2 + 1, m_w, EVEN_K)
    else:
        o_k = o_w * 8
        a0 = _activation(p_am, p_perm, o_k, m_w, K, HAS_PERM, EVEN_K)
        a1 = _activation(p_am, p_perm, o_k + 1, m_w, K, HAS_PERM, EVEN_K)
        a2 = _activation(p_am, p_perm, o_k + 2, m_w, K, HAS_PERM, EVEN_K)
        a3 = _activation(p_am, p_perm, o_k + 3, m_w, K, HAS_PERM, EVEN_K)
        a4 = _activation(p_am, p_perm, o_k + 4, m_w, K, HAS_PERM, EVEN_K)
        a5 = _activation(p_am, p_perm, o_k + 5, m_w, K, HAS_PERM, EVEN_K)
        a6 = _activation(p_am, p_perm, o_k + 6, m_w, K, HAS_PERM, EVEN_K)
        a7 = _activation(p_am, p_perm, o_k + 7, m_w, K, HAS_PERM, EVEN_K)
    acc += a0[:, None] * w0
    acc += a1[:, None] * w1
    acc += a2[:, None] * w2
    acc += a3[:, None] * w3
    acc += a4[:, None] * w4
    acc += a5[:, None] * w5
    acc += a6[:, None] * w6
    acc += a7[:, None] * w7
    return acc


@triton.jit(do_not_specialize=["M"])
def w4a16_gemv_kernel(
    p_a,
    p_qw,
    p_s,
    p_z,
    p_perm,
    p_bias,
    p_out,
    p_ws,
    p_count,
    M,
    N,
    K,
    stride_am,
    K_PER_SPLIT,
    GROUP: tl.constexpr,
    GROUPS_PER_TILE: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
    HAS_PERM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SPLIT: tl.constexpr,
    ATOMIC: tl.constexpr,
    FIXUP: tl.constexpr,
    EVEN_K: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    PACKED_MATH: tl.constexpr,
    WIDE_A: tl.constexpr,
    SCALE_TILE: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Rows ``0 .. BM`` (``M <= BM <= 2``) and columns ``program_id(0) * BN ..`` of ``a[:, perm] @ W`` over K slice
    ``program_id(1)``. Pointers, layouts and the other constexprs as in ``tile_kernel.w4a16_gemm_kernel``;
    GROUP is at least 16, so a word never spans two groups. PACKED_MATH: 16-bit pair arithmetic (sm_90 PTX).
    WIDE_A: activations in 64-bit loads (``p_a`` and ``stride_am`` 4-element aligned, no HAS_PERM).
    SCALE_TILE: scales and zero points loaded as a ``[BK / 8, BN]`` tile (one per word). The layout Triton
    gives the word tile can depend on it, and with the layout the order of the fp32 sum over the word rows.
    """
    i_n = tl.program_id(0)
    i_s = tl.program_id(1)
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    o_r = tl.arange(0, BK // 8)
    # The columns again, with their contiguity capped at 4 (16 bytes of packed words, 8 of scales): Triton then
    # loads the [BK / 8, BN] scale tile in the packed words' layout, so the loop needs no shared-memory
    # conversion of the scales (SCALE_TILE; Triton 3.6, bf16, M = 1: 6 barriers in the kernel against 9,
    # sweeps/sass_w4a16_gemv_loads.txt).
    o_c = (o_n // 4) * 4 + o_n % 4
    if INT64_INDEX:
        stride_am = tl.cast(stride_am, tl.int64)

    k_start = i_s * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    acc0 = tl.zeros((BK // 8, BN), dtype=tl.float32)
    acc1 = tl.zeros((BK // 8, BN), dtype=tl.float32)
    for k0 in range(k_start, k_end, BK):
        o_w = k0 // 8 + o_r  # word rows
        m_w = o_w < K // 8
        m_q = m_n[None, :] if EVEN_K else m_w[:, None] & m_n[None, :]
        b_q = tl.load(p_qw + o_w[:, None] * N + o_n[None, :], mask=m_q, other=0)
        if SCALE_TILE:
            # each column's scale (zero) repeated down the word rows, in the words' layout (see o_c)
            o_sz = (o_w * 8 // GROUP)[:, None] * N + o_c[None, :]
            b_s = tl.load(p_s + o_sz, mask=m_q, other=0.0)
            b_z = tl.load(p_z + o_sz, mask=m_q, other=0).to(tl.int32) if HAS_ZEROS else 8
        elif GROUPS_PER_TILE == 1:
            o_g = k0 // GROUP
            b_s = tl.load(p_s + o_g * N + o_n, mask=m_n, other=0.0)[None, :]
            b_z = tl.load(p_z + o_g * N + o_n, mask=m_n, other=0).to(tl.int32)[None, :] if HAS_ZEROS else 8
        else:
            o_g = (o_w * 8) // GROUP
            m_g = m_w[:, None] & m_n[None, :]
            b_s = tl.load(p_s + o_g[:, None] * N + o_n[None, :], mask=m_g, other=0.0)
            b_z = tl.load(p_z + o_g[:, None] * N + o_n[None, :], mask=m_g, other=0).to(tl.int32) if HAS_ZEROS else 8
        w0, w1, w2, w3, w4, w5, w6, w7 = _dequant_words(b_q, b_s, b_z, PACKED_MATH)
        acc0 = _row_multiply_add(
            acc0, w0, w1, w2, w3, w4, w5, w6, w7, p_a, p_perm, 0, M, K, o_w, m_w, stride_am, HAS_PERM, EVEN_K, WIDE_A
        )
        if BM > 1:
            acc1 = _row_multiply_add(
                acc1, w0, w1, w2, w3, w4, w5, w6, w7, p_a, p_perm, 1, M, K, o_w, m_w, stride_am,
                HAS_PERM, EVEN_K, WIDE_A,
            )  # fmt: skip

    # [BM, BN] from the rows' column sums (rows past BM are never selected)
    o_m = tl.arange(0, BM)
    if INT64_INDEX:
        o_m = o_m.to(tl.int64)
    acc = tl.where(o_m[:, None] == 0, tl.sum(acc0, axis=0)[None, :], tl.sum(acc1, axis=0)[None, :])
    m_mn = (o_m < M)[:, None] & m_n[None, :]
    finish_tile(acc, p_out, p_bias, p_ws, p_count, i_n, i_s, o_m, o_n, m_mn, M, N, HAS_BIAS, SPLIT, ATOMIC, FIXUP)
