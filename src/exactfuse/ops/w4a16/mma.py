"""The ``mma.sync`` building blocks of the fragment layout's W4A16 kernel (``packed_kernel.py``; Gluon,
sm_90): each lane dequantizes its own words straight into ``mma.sync.m16n8k16`` operands, no shuffles.

The weight is the A operand of ``out^T = W^T a^T`` (``fragment.py`` has the layout). Per word (8 weights):
3 shifts and 4 ``lop3`` give ``MAGIC + q`` in four 16-bit pairs, 4 ``sub`` (``- (MAGIC + z)``, exact) and
4 ``mul`` (times the scale, one rounding: the spec's ``(q - z) * s`` in the dtype, bit for bit) make the
operand, which multiplies each of ``BLOCKS`` blocks of 8 rows of activations (the B operand: lane ``l``
holds row ``l // 4`` of a block), one MMA a block. Products are exact and summed in fp32 by the tensor
core, the four k-steps of a chunk into the same accumulators (:func:`fragment_step`).
"""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16.staged import HAS_GLUON, wgmma_unavailable
from exactfuse.registry.platform import interpreter_enabled

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier


def dequant_lines(magic: int, ty: str, word: str, scales: tuple[str, str], zeros: tuple[str, str],
                  out: tuple[str, ...]) -> list[str]:  # fmt: skip
    """The PTX that dequantizes one word (operand ``word``) into its four A registers ``out``: ``((MAGIC | q) -
    (MAGIC + z)) * s``, two weights an instruction, with the scale and zero pairs of rows r and r + 8 (``scales``,
    ``zeros``); ``u0``-``u2`` are scratch registers the caller declares."""
    pair = f"0x{magic:04x}{magic:04x}"
    src = [word, "u0", "u1", "u2"]
    lines = [f"shr.u32 u{i}, {word}, {4 * (i + 1)};" for i in range(3)]
    lines += [f"lop3.b32 {out[t]}, {src[t]}, 0x000f000f, {pair}, 0xea;" for t in range(4)]
    lines += [f"sub.rn.{ty} {out[t]}, {out[t]}, {zeros[t % 2]};" for t in range(4)]
    lines += [f"mul.rn.{ty} {out[t]}, {out[t]}, {scales[t % 2]};" for t in range(4)]
    return lines


def _dequant_asm(magic: int, ty: str) -> str:
    """One word ($4) dequantized with scale pairs $5/$6 (rows r, r + 8) and zero pairs $7/$8 into the four
    A registers of its MMA k-step ($0..$3): :func:`dequant_lines`."""
    body = dequant_lines(magic, ty, "$4", ("$5", "$6"), ("$7", "$8"), ("$0", "$1", "$2", "$3"))
    return "\n".join(["{", ".reg .b32 u0, u1, u2;", *body, "}"])


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
    def _store_out(y, p_out, p_bias, o_m, o_n, M, N, HAS_BIAS: gl.constexpr):
        """Round the fp32 values to the output dtype once (+ bias in fp32, rounded again: eager's
        ``matmul(a, W) + bias``) and store them where ``o_m < M``."""
        DT: gl.constexpr = p_out.dtype.element_ty
        v = y.to(DT)
        if HAS_BIAS:
            v = (v.to(gl.float32) + gl.load(p_bias + o_n).to(gl.float32)).to(DT)
        gl.store(p_out + o_m * N + o_n, v, mask=o_m < M)


def gluon_gpu_supported() -> bool | str:
    """``True`` with a CUDA GPU and a Triton with Gluon's Hopper language, not the interpreter (which runs
    no Gluon): where the packed kernel's provider can be chosen at all (``packed.packed_supports`` checks
    the device per call); else why not, for the provider's ``supported``."""
    if not HAS_GLUON:
        return "it runs Gluon kernels on sm_90 GPUs, and this Triton has no Gluon Hopper language"
    if interpreter_enabled():
        return "it runs Gluon kernels on sm_90 GPUs, which the Triton interpreter (TRITON_INTERPRET=1) does not run"
    if not torch.cuda.is_available():
        return "it runs Gluon kernels on sm_90 GPUs, and no CUDA GPU is available here"
    return True


def fragment_kernel_runs(device: torch.device) -> bool:
    """Whether ``w4a16_gemm_packed``'s kernels run on ``device``: its provider can be chosen here
    (:func:`gluon_gpu_supported`) and the device runs the wgmma kernels (``staged.wgmma_unavailable``)."""
    return gluon_gpu_available() and wgmma_unavailable(device) is None


def gluon_gpu_available() -> bool:
    """Whether the packed kernel's provider can be chosen here (:func:`gluon_gpu_supported`)."""
    return gluon_gpu_supported() is True
