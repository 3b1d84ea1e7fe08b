"""Math functions for Triton kernels that must match eager PyTorch on CUDA.

On the GPU these are the functions ATen's CUDA kernels call: libdevice's
``expf`` and ``tanhf`` (Triton's ``tl.exp`` is the approximate ``ex2.approx``
path and breaks bitwise parity), and ``erff`` as the CUDA toolkit that built
PyTorch evaluates it. CUDA 13.0 changed ``erff``: Triton 3.6 bundles an older
libdevice whose ``__nv_erff`` differs from it in 651,892 of 15M fp32 outputs
(an H200, torch 2.11+cu130, the two evaluated over the same inputs). For PyTorch
built with CUDA >= 13 we evaluate the CUDA 13.0 sequence (read from the PTX
``nvcc -arch=sm_90 -O3`` emits for ``erff``): a degree-6 polynomial in x^2
below |x| = 1.00296, else ``copysign(1 - 2^p(|x|), x)`` with ``ex2.approx.ftz``.

The Triton interpreter cannot call libdevice or inline PTX, so under
``TRITON_INTERPRET=1`` these are numpy-backed stand-ins; results there are
checked against the CPU reference by a looser, declared contract.

The ``fast_*`` helpers below are faster formulas that a kernel may use only for a (formula, dtype)
pair that ``exactfuse.ops.fastmath`` has proven bitwise over all 65,536 16-bit inputs on the GPU at
hand; under the interpreter they run on numpy stand-ins and kernels keep the exact formulas.

Kernels import these names unqualified (``from exactfuse.ops.math import
exact_exp``): Inductor re-emits user Triton kernels with the JIT functions
they reference by name, and cannot follow a module alias (``xm.exp``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from exactfuse.registry.platform import interpreter_enabled

if interpreter_enabled():

    @triton.jit
    def exact_exp(x):
        return tl.exp(x)

    @triton.jit
    def exact_erf(x):
        return tl.erf(x)

    @triton.jit
    def exact_tanh(x):
        # |x| form avoids exp overflow; the interpreter only (see module docstring).
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)

    @triton.jit
    def fast_tanh(x):
        return exact_tanh(x)

    @triton.jit
    def libdevice_tanh(x):
        return exact_tanh(x)

    @triton.jit
    def exp2_ftz(x):
        return tl.exp2(x)

    @triton.jit
    def rcp_approx(x):
        return 1.0 / x

    @triton.jit
    def mul_rn(a, b):
        return a * b  # numpy multiplies and rounds; nothing is fused

    @triton.jit
    def fma_rn(a, b, c):
        return a * b + c  # the callers' products are exact, so this rounds once, as an FMA does

else:
    from triton.language.extra import libdevice

    @triton.jit
    def exact_exp(x):
        return libdevice.exp(x)

    @triton.jit
    def exact_tanh(x):
        """fp32 ``tanhf`` as libdevice evaluates it (``__nv_tanhf``, the PTX Triton 3.6 inlines for
        ``libdevice.tanh``; ATen's CUDA ``tanh`` gives the same bits on every 16-bit input), with its branch
        on ``|x| < 0.6`` replaced by a select: both paths run, each with libdevice's instructions and
        constants, and ``selp`` keeps the one libdevice takes (NaN takes the polynomial, as libdevice's
        ``setp.ltu`` sends it). Branch-free, a thread's elements overlap instead of each running a divergent
        region of its own. tests/ops/test_math.py compares it with :func:`libdevice_tanh` on all 2^32 fp32
        inputs on the GPU."""
        return tl.inline_asm_elementwise(
            """{
            .reg .b32 a, s, p, e, y, sign;
            .reg .pred big, one;
            abs.ftz.f32 a, $1;
            mul.f32 s, $1, $1;
            fma.rn.ftz.f32 p, 0f3C80F082, s, 0fBD563CAE;
            fma.rn.ftz.f32 p, p, s, 0f3E085941;
            fma.rn.ftz.f32 p, p, s, 0fBEAAA9ED;
            fma.rn.ftz.f32 p, p, s, 0f00000000;
            fma.rn.ftz.f32 p, p, $1, $1;
            mul.f32 e, a, 0f4038AA3B;
            ex2.approx.ftz.f32 e, e;
            add.f32 e, e, 0f3F800000;
            rcp.approx.ftz.f32 e, e;
            fma.rn.ftz.f32 y, e, 0fC0000000, 0f3F800000;
            setp.ge.f32 one, a, 0f41102CB4;
            selp.f32 y, 0f3F800000, y, one;
            and.b32 sign, $1, 0x80000000;
            or.b32 y, y, sign;
            setp.ge.f32 big, a, 0f3F19999A;
            selp.f32 $0, y, p, big;
            }""",
            "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1,
        )  # fmt: skip

    @triton.jit
    def libdevice_tanh(x):
        """libdevice's ``tanhf`` as Triton calls it, branch and all: what ``exact_tanh`` is checked against."""
        return libdevice.tanh(x)

    @triton.jit
    def mul_rn(a, b):
        """fp32 ``mul.rn.f32``: a product the compiler does not contract into an FMA with a following add.
        Inline PTX, not libdevice's ``mul_rn``: Triton links libdevice with flush-to-zero on, which makes that
        one ``mul.rn.ftz.f32`` and flushes subnormal factors and products (bf16 and fp32 subnormals), where
        eager's products keep them."""
        return tl.inline_asm_elementwise(
            "mul.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1
        )

    @triton.jit
    def fma_rn(a, b, c):
        """fp32 ``fma.rn.f32``: ``a * b + c`` rounded once. Where fp32 holds the product exactly (two fp16
        values: at most 22 significant bits, magnitudes 2^-48 to 2^32) it is ``c + mul_rn(a, b)`` bit for bit,
        in one instruction instead of two; bf16 products can leave fp32's range or precision, fp32 ones
        always can."""
        return tl.inline_asm_elementwise(
            "fma.rn.f32 $0, $1, $2, $3;", "=f,f,f,f", [a, b, c], dtype=tl.float32, is_pure=True, pack=1
        )

    @triton.jit
    def fast_tanh(x):
        """``tanh.approx.f32``: one MUFU instruction, about 2^-11 relative error."""
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)

    @triton.jit
    def exp2_ftz(x):
        """``ex2.approx.ftz.f32``: ``2^x`` in one MUFU instruction, subnormal results flushed to zero."""
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1
        )

    @triton.jit
    def rcp_approx(x):
        """``rcp.approx.f32``: ``1 / x`` in one MUFU instruction (about 1 ulp), subnormal results kept."""
        return tl.inline_asm_elementwise("rcp.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)

    @triton.jit
    def _erf_cuda13(x):
        """fp32 ``erff`` as CUDA 13.0 evaluates it (same constants, same fma chain)."""
        a = tl.abs(x)
        big = a >= 1.002959966659546
        t = tl.where(big, a, x * x)
        r = tl.where(big, 0.00011219871521461755, 8.483494457323104e-05)
        r = tl.fma(r, t, tl.where(big, -0.0013275252422317863, -0.0008213091641664505))
        r = tl.fma(r, t, tl.where(big, 0.00839653518050909, 0.005213488824665546))
        r = tl.fma(r, t, tl.where(big, -0.04024658352136612, -0.026868773624300957))
        r = tl.fma(r, t, tl.where(big, 0.15950430929660797, 0.11284004896879196))
        r = tl.fma(r, t, tl.where(big, 0.9129176735877991, -0.37612664699554443))
        r = tl.fma(r, t, tl.where(big, 0.6290600299835205, 0.12837915122509003))
        s = tl.where(big, -a, x)
        r = tl.fma(r, s, s)
        one_minus = 1.0 - exp2_ftz(r)
        return tl.where(big, tl.where(x < 0, -one_minus, one_minus), r)

    if int((torch.version.cuda or "0").split(".")[0]) >= 13:

        @triton.jit
        def exact_erf(x):
            return _erf_cuda13(x)

    else:  # PyTorch built with CUDA 12: libdevice's erff (parity not measured here)

        @triton.jit
        def exact_erf(x):
            return libdevice.erf(x)


# ---------------------------------------------------------------- fast formulas (admitted by proof only)
# Triton's ``tl.exp`` is ``ex2.approx.f32`` of ``x * log2(e)`` and its fp32 ``/`` is ``div.full.f32``
# (about 2 ulp); ``tl.div_rn`` is the IEEE division. Which of these reproduce eager PyTorch after the
# rounding to a 16-bit dtype is decided by ``exactfuse.ops.fastmath``'s exhaustive proof, per GPU.


@triton.jit
def fast_silu(x):
    """``x / (1 + exp(-x))`` with ``ex2.approx`` and the approximate division."""
    return x / (1.0 + tl.exp(-x))


@triton.jit
def fix_fp16_silu(x, y):
    """``y`` (a fast SiLU of fp16 ``x``) with eager's fp16 results at the two inputs whose fast quotient lands
    across an fp16 rounding boundary from eager's (-2.7246 and -4.9219, the same two for :func:`fast_silu`
    and :func:`rcp_silu`; ``benchmarks/results/h200/sweeps/fast_activation_proofs.txt``): a correction
    table that ``fastmath.proof`` checks together with every other input."""
    y = tl.where(x == -2.724609375, -0.1676025390625, y)
    return tl.where(x == -4.921875, -0.035614013671875, y)


@triton.jit
def fix_fp16_sigmoid(x, y):
    """``y`` (a fast sigmoid of fp16 ``x``) with eager's fp16 results at the two inputs where the exact fp32
    sigmoid sits on or next to an fp16 rounding tie (0.0068359 and -0.0063477, the same sweeps file)."""
    y = tl.where(x == 0.0068359375, 0.501953125, y)
    return tl.where(x == -0.00634765625, 0.49853515625, y)


@triton.jit
def fast_silu_fp16_fixed(x):
    """:func:`fast_silu` corrected by :func:`fix_fp16_silu`."""
    return fix_fp16_silu(x, fast_silu(x))


@triton.jit
def rcp_silu(x):
    """``x * (1 / (1 + exp(-x)))`` with ``ex2.approx.ftz`` (an exp that flushes leaves ``1 + exp`` as it is) and
    ``rcp.approx.f32``, whose subnormal reciprocals are kept: flushed ones (``rcp.approx.ftz``) zero SiLU at
    x in [-88.7, -87.3], where eager's is a normal number."""
    return x * rcp_sigmoid(x)


@triton.jit
def rcp_sigmoid(x):
    """``1 / (1 + exp(-x))`` with ``ex2.approx.ftz`` and ``rcp.approx.f32`` (:func:`rcp_silu`)."""
    return rcp_approx(1.0 + exp2_ftz(x * -1.4426950408889634))


@triton.jit
def sigmoid_silu(x):
    """``x * sigmoid(x)`` with Triton's ``tl.sigmoid`` (as Inductor writes SiLU)."""
    return x * tl.sigmoid(x)


@triton.jit
def exp_fast_div_silu(x):
    """``x / (1 + exp(-x))`` with libdevice ``expf`` and the approximate division."""
    return x / (1.0 + exact_exp(-x))


@triton.jit
def exp_newton_div_silu(x):
    """``x / (1 + exp(-x))`` with libdevice ``expf``; the approximate quotient ``q = x * (1 / d)``
    refined by one Newton step, ``q + (x - q d) / d``. Where the residual is 0 (``q`` exact, and ``x =
    -0``, whose step would give +0) or NaN (``x = inf``; ``d = inf`` for x < -88.7, where ``q`` is the
    signed zero ``x / inf`` is) ``q`` stays."""
    d = 1.0 + exact_exp(-x)
    r = 1.0 / d
    q = x * r
    e = tl.fma(-q, d, x)
    return tl.where((e == 0.0) | (e != e), q, tl.fma(e, r, q))


@triton.jit
def fast_erf_gelu(x):
    """erf-GELU with Triton's ``tl.erf`` (libdevice ``erff``, not CUDA 13's)."""
    return (x * 0.5) * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def fast_tanh_gelu(x):
    """tanh-GELU with ``tanh.approx.f32``."""
    inner = 0.7978845608028654 * tl.fma(0.044715, x * x * x, x)
    return (0.5 * x) * (1.0 + fast_tanh(inner))


@triton.jit
def sigmoid_tanh_gelu(x):
    """tanh-GELU as ``x / (1 + exp(-2u))`` (``0.5 (1 + tanh u) = sigmoid(2u)``), ``ex2.approx`` and the
    approximate division."""
    inner = 1.5957691216057308 * tl.fma(0.044715, x * x * x, x)
    return x / (1.0 + tl.exp(-inner))


@triton.jit
def activation(x, FORMULA: tl.constexpr):
    """fp32 ``x`` -> fp32 activation by formula id (``fastmath.FORMULAS``): the exact ones (0-2, and 12 for
    sigmoid) evaluated as ATen's CUDA kernels do, the others fast formulas that a kernel takes only where
    proven."""
    if FORMULA == 0:  # SILU
        return tl.div_rn(x, 1.0 + exact_exp(-x))
    elif FORMULA == 1:  # GELU_ERF
        return (x * 0.5) * (1.0 + exact_erf(x * 0.7071067811865476))
    elif FORMULA == 2:  # GELU_TANH
        inner = 0.7978845608028654 * tl.fma(0.044715, x * x * x, x)
        return (0.5 * x) * (1.0 + exact_tanh(inner))
    elif FORMULA == 3:  # SILU_FAST
        return fast_silu(x)
    elif FORMULA == 4:  # SILU_SIGMOID
        return sigmoid_silu(x)
    elif FORMULA == 5:  # SILU_EXP_FAST_DIV
        return exp_fast_div_silu(x)
    elif FORMULA == 6:  # SILU_EXP_NEWTON_DIV
        return exp_newton_div_silu(x)
    elif FORMULA == 7:  # GELU_ERF_LIBDEVICE
        return fast_erf_gelu(x)
    elif FORMULA == 8:  # GELU_TANH_APPROX
        return fast_tanh_gelu(x)
    elif FORMULA == 10:  # SILU_FAST_FP16_FIXED
        return fast_silu_fp16_fixed(x)
    elif FORMULA == 11:  # SILU_RCP
        return rcp_silu(x)
    elif FORMULA == 12:  # SIGMOID: as ATen's CUDA sigmoid
        return tl.div_rn(1.0, 1.0 + exact_exp(-x))
    elif FORMULA == 13:  # SIGMOID_FAST
        return 1.0 / (1.0 + tl.exp(-x))
    elif FORMULA == 14:  # SIGMOID_RCP
        return rcp_sigmoid(x)
    elif FORMULA == 15:  # SILU_RCP_FP16_FIXED
        return fix_fp16_silu(x, rcp_silu(x))
    elif FORMULA == 16:  # SIGMOID_RCP_FP16_FIXED
        return fix_fp16_sigmoid(x, rcp_sigmoid(x))
    else:  # 9: GELU_TANH_SIGMOID
        return sigmoid_tanh_gelu(x)


# ---------------------------------------------------------------- backward (exact formulas only)
# ATen's CUDA ``silu_backward`` / ``gelu_backward`` (ActivationSiluKernel.cu, ActivationGeluKernel.cu) in
# fp32 opmath, with the contractions nvcc makes in them (``nvcc -arch=sm_90 -O3``, CUDA 13.0: the PTX and
# the SASS of the same expressions): every FMA below is one nvcc emits, every other product is ``mul_rn``
# so that no other contraction can happen. No fast formula is proven for these helpers.


@triton.jit
def activation_backward(x, dy, FORMULA: tl.constexpr):
    """fp32 ``x`` and ``dy`` -> ``(act(x), act_backward(dy, x))`` in fp32, unrounded, for an exact formula
    id (``fastmath.SILU``, ``GELU_ERF``, ``GELU_TANH``): the first as ``activation(x, FORMULA)`` evaluates
    it, the second as ATen's CUDA backward kernel does, sharing the transcendental.

    - silu: ``s = 1 / (1 + exp(-x))`` (``rcp.rn``, here ``div_rn``; ``1 + exp`` as in the forward), then
      ``(dy * s) * fma(x, 1 - s, 1)``.
    - erf-GELU: ``cdf = 0.5 (1 + erf(x k))``, ``pdf = exp((-0.5 x) x) kBeta``, ``dy (cdf + x pdf)``: nvcc
      contracts cdf's product into the sum, ``fma(1 + erf, 0.5, x pdf)``.
    - tanh-GELU: ``t = tanh(kBeta fma(x^3, kKappa, x))``; ``1 - t t`` is an FMA (ptxas contracts it);
      ``(0.5 x) (1 - t^2)`` times ``kBeta fma(x^2, 3 kKappa, 1)``, and ``0.5 (1 + t)`` contracted into the
      sum, ``dy fma(1 + t, 0.5, right)``.
    """
    if FORMULA == 0:  # SILU
        d = 1.0 + exact_exp(-x)
        act = tl.div_rn(x, d)
        s = tl.div_rn(1.0, d)
        grad = mul_rn(mul_rn(dy, s), tl.fma(x, 1.0 - s, 1.0))
    elif FORMULA == 1:  # GELU_ERF
        one_plus_erf = 1.0 + exact_erf(mul_rn(x, 0.7071067690849304))
        act = mul_rn(mul_rn(x, 0.5), one_plus_erf)
        pdf = mul_rn(exact_exp(mul_rn(mul_rn(x, -0.5), x)), 0.3989422917366028)  # kBeta = 2/sqrt(2 pi) / 2
        grad = mul_rn(dy, tl.fma(one_plus_erf, 0.5, mul_rn(x, pdf)))
    else:  # 2: GELU_TANH
        x_sq = mul_rn(x, x)
        inner = mul_rn(tl.fma(mul_rn(x_sq, x), 0.044714998453855515, x), 0.7978845834732056)  # kKappa, kBeta
        t = exact_tanh(inner)
        left = mul_rn(x, 0.5)
        right = 1.0 + t
        act = mul_rn(left, right)
        inner_derivative = mul_rn(tl.fma(x_sq, 0.13414499163627625, 1.0), 0.7978845834732056)  # 3 kKappa
        right_derivative = mul_rn(mul_rn(left, tl.fma(-t, t, 1.0)), inner_derivative)
        grad = mul_rn(dy, tl.fma(right, 0.5, right_derivative))
    return act, grad
