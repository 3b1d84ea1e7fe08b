"""Triton kernels of the gated activations ``act(gate) * up``: ``gate, up = x[..., :d], x[..., d:]``
(``silu_and_mul``, ``gelu_and_mul``) or two tensors (``silu_mul``, ``gelu_mul``), one kernel for both.

Bitwise parity with eager PyTorch on CUDA needs the same math PyTorch's CUDA
kernels evaluate (ATen ``ActivationSiluKernel.cu`` / ``ActivationGeluKernel.cu``):

- silu: ``x / (1 + exp(-x))`` in fp32 with libdevice ``expf`` and an IEEE
  division (``div_rn``). Triton's ``tl.exp`` (``ex2.approx``) and its default
  ``/`` (``div.full``, approximate) break fp32 parity, and some fp16.
- gelu ``"none"``: ``(x * 0.5f) * (1 + erff(x * float(M_SQRT1_2)))``. The
  textbook ``0.5 * x * (1 + erf(x / sqrt(2)))`` rounds differently: the
  division by sqrt(2) is not the multiply by the rounded 1/sqrt(2).
- gelu ``"tanh"``: ``(0.5f * x) * (1 + tanhf(kBeta * fma(kKappa, x*x*x, x)))``
  with ``kBeta = float(sqrt(2) * 2/sqrt(pi) * 0.5)``, ``kKappa = 0.044715f``;
  nvcc contracts ``x + kKappa * x_cube`` into one fma, so we write it.
- the activation is rounded to the input dtype (``F.silu`` returns that
  dtype), then multiplied by ``up`` in fp32 and rounded again, as ``*`` does.

The backward kernel (``act_and_mul_backward_kernel``) computes what eager autograd computes for the spec,
rounding where it rounds: ``d_up = grad * act(gate)`` and ``d_act = grad * up``, each rounded to the
dtype, then ``d_gate = act_backward(d_act, gate)`` in fp32 rounded once, with ATen's CUDA backward
formulas and nvcc's contractions (``exactfuse.ops.math.activation_backward``). It takes the exact
formulas in every dtype: no fast formula is proven for the backward helper.

For fp16 and bf16 the activation's input is a 16-bit value, so a faster formula gives eager's bits
exactly when it does on all 65,536 of them. The launcher passes ``FORMULA``, the formula
``exactfuse.ops.fastmath.chosen_formula`` admits for the dtype and GPU: the first of the dtype's fast
candidates whose exhaustive proof, run through this very ``activation`` (``exactfuse.ops.math``),
finds no input that differs, else the exact formula above (the proofs' record:
benchmarks/results/h200/sweeps/fast_activation_proofs.txt). fp32 always takes the exact formula.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.ops.math import activation, activation_backward, mul_rn


@triton.jit(do_not_specialize=["T"])
def act_and_mul_kernel(
    p_g,
    p_u,
    p_y,
    T,
    D,
    stride_g,
    stride_u,
    stride_y,
    FORMULA: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    JOINED: tl.constexpr,
    FLAT: tl.constexpr = False,
):
    """One ``[BT, BD]`` tile of ``y = act(gate) * up`` (FLAT: ``BD`` consecutive outputs of the
    row-major ``[T, D]`` output, each split into its row and column; a 1-D grid).

    p_g, p_u: ``[T, D]`` gate and up, rows ``stride_g`` / ``stride_u`` apart, last dim contiguous; with
    JOINED, ``p_g`` is ``[T, 2D]`` with up its second half (``p_u``, ``stride_u`` unused). p_y: ``[T, D]``
    rows ``stride_y`` apart. constexpr: FORMULA (``activation``'s id), BT, BD, INT64_INDEX (offsets may reach 2**31),
    JOINED. T and D are runtime values (D is specialized on divisibility by 16 for wide loads), so one
    compile serves every batch size of a width class.
    """
    if FLAT:
        i_o = tl.program_id(0)
        if INT64_INDEX:
            i_o = i_o.to(tl.int64)
        o = i_o * BD + tl.arange(0, BD)
        m = o < (T.to(tl.int64) if INT64_INDEX else T) * D
        o_t = o // D
        o_g = o_t * stride_g + o % D
        o_u = o_g + D if JOINED else o_t * stride_u + o % D
        o_y = o_t * stride_y + o % D
    else:
        i_t = tl.program_id(0)
        if INT64_INDEX:
            i_t = i_t.to(tl.int64)
        o_t = i_t * BT + tl.arange(0, BT)
        o_d = tl.program_id(1) * BD + tl.arange(0, BD)
        m = (o_t[:, None] < T) & (o_d[None, :] < D)
        o_g = o_t[:, None] * stride_g + o_d[None, :]
        o_u = o_g + D if JOINED else o_t[:, None] * stride_u + o_d[None, :]
        o_y = o_t[:, None] * stride_y + o_d[None, :]
    b_g = tl.load(p_g + o_g, mask=m).to(tl.float32)
    b_u = tl.load((p_g if JOINED else p_u) + o_u, mask=m).to(tl.float32)
    b_a = activation(b_g, FORMULA).to(p_y.dtype.element_ty).to(tl.float32)
    b_y = (b_a * b_u).to(p_y.dtype.element_ty)
    tl.store(p_y + o_y, b_y, mask=m)


@triton.jit(do_not_specialize=["T"])
def act_and_mul_backward_kernel(
    p_dy,
    p_g,
    p_u,
    p_dg,
    p_du,
    T,
    D,
    stride_dy,
    stride_g,
    stride_u,
    stride_dx,
    FORMULA: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    JOINED: tl.constexpr,
):
    """One ``[BT, BD]`` tile of the gradients of ``y = act(gate) * up`` for the output's gradient ``dy``.

    p_dy: ``[T, D]`` rows ``stride_dy`` apart, last dim contiguous. p_g, p_u: as the forward kernel reads
    them (with JOINED, ``p_g`` is ``x [T, 2D]`` and up its second half; ``p_u`` unused). p_dg, p_du:
    ``[T, D]`` gradients of gate and up, rows ``stride_dx`` apart; with JOINED, ``p_dg`` is ``dx [T, 2D]``
    (rows ``stride_dx = 2D`` apart) and the gradient of up its second half (``p_du`` unused), and a zero
    gradient is stored as +0: autograd sums the two halves' gradients into zeros of x's shape, and ``-0 +
    0 = +0``. constexpr: FORMULA (an exact formula id), BT, BD, INT64_INDEX, JOINED. T and D are runtime
    values, as in the forward kernel.
    """
    i_t = tl.program_id(0)
    if INT64_INDEX:
        i_t = i_t.to(tl.int64)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = tl.program_id(1) * BD + tl.arange(0, BD)
    m = (o_t[:, None] < T) & (o_d[None, :] < D)
    o_g = o_t[:, None] * stride_g + o_d[None, :]
    o_u = o_g + D if JOINED else o_t[:, None] * stride_u + o_d[None, :]
    o_dg = o_t[:, None] * stride_dx + o_d[None, :]
    o_du = o_dg + D if JOINED else o_dg
    DT = p_dg.dtype.element_ty
    b_dy = tl.load(p_dy + o_t[:, None] * stride_dy + o_d[None, :], mask=m).to(tl.float32)
    b_g = tl.load(p_g + o_g, mask=m).to(tl.float32)
    b_u = tl.load((p_g if JOINED else p_u) + o_u, mask=m).to(tl.float32)
    b_da = mul_rn(b_dy, b_u).to(DT).to(tl.float32)  # mul's backward: grad * up, rounded
    b_a, b_dg = activation_backward(b_g, b_da, FORMULA)
    b_du = mul_rn(b_dy, b_a.to(DT).to(tl.float32)).to(DT).to(tl.float32)  # grad * act(gate), both rounded
    b_dg = b_dg.to(DT).to(tl.float32)
    if JOINED:
        b_dg = tl.where(b_dg == 0.0, 0.0, b_dg)
        b_du = tl.where(b_du == 0.0, 0.0, b_du)
    tl.store(p_dg + o_dg, b_dg.to(DT), mask=m)
    tl.store((p_dg if JOINED else p_du) + o_du, b_du.to(DT), mask=m)
