"""Triton kernel for the gated activations ``act(gate) * up``: ``gate, up = x[..., :d], x[..., d:]``
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

import torch
import triton
import triton.language as tl

from exactfuse.ops.act_and_mul.heuristics import FLAT_BLOCK, act_and_mul_config, flat_index
from exactfuse.ops.fastmath import EXACT, EXACT_FORMULAS, GELU_ERF, GELU_TANH, SILU, chosen_formula  # noqa: F401 (ids re-exported)
from exactfuse.ops.math import activation, activation_backward, mul_rn
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic, needs_int64

ACTIVATIONS = {a: EXACT[a] for a in ("silu", "gelu_none", "gelu_tanh")}  # activation name -> its exact formula id


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


def _launch(gate: torch.Tensor, up: torch.Tensor | None, D: int, out_shape, activation: str) -> torch.Tensor:
    """``act(gate) * up`` over 2-D row views with unit last stride -> a new ``out_shape`` tensor; ``up``
    None: ``gate`` is ``[T, 2D]`` and up its second half (no view made: two slices cost 3.5 µs of host
    time a call on a 2-core CPU).

    A traced call (symbolic row count) takes the configuration of ``D`` alone and int64 offsets, so one
    trace is correct for every T; eager calls choose num_warps and offsets by the sizes. The formula is
    the one proven for the dtype on this GPU (the first call per dtype and device runs the proof).
    """
    T = gate.shape[0]
    y = empty(out_shape, gate.dtype, gate.device)
    if not is_symbolic(T) and T * D == 0:
        return y
    rows = None if is_symbolic(T) else T
    BT, BD, num_warps = act_and_mul_config(D, rows)
    formula = chosen_formula(activation, gate.dtype, gate.device)
    flat = flat_index(D, rows, fast_math=formula not in EXACT_FORMULAS)
    if flat:
        BT, BD = 1, FLAT_BLOCK
    grid = (triton.cdiv(T * D, BD),) if flat else (triton.cdiv(T, BT), triton.cdiv(D, BD))
    joined = up is None
    up = gate if joined else up
    torch.library.wrap_triton(act_and_mul_kernel)[grid](
        gate,
        up,
        y,
        T,
        D,
        gate.stride(0),
        up.stride(0),
        D,
        FORMULA=formula,
        BT=BT,
        BD=BD,
        INT64_INDEX=needs_int64(T, max(gate.stride(0), up.stride(0), 2 * D if joined else D)),
        JOINED=joined,
        FLAT=flat,
        num_warps=num_warps,
    )
    return y


def launch_act_and_mul(x: torch.Tensor, activation: str) -> torch.Tensor:
    """``x: [..., 2d]`` -> ``[..., d]``: the kernel over its two halves."""
    D = x.shape[-1] // 2
    x2 = x if x.dim() == 2 else x.reshape(-1, 2 * D)
    return _launch(x2, None, D, (*x.shape[:-1], D), activation)


def launch_gate_up(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``gate, up: [..., d]`` -> ``[..., d]``."""
    D = gate.shape[-1]
    g2 = gate if gate.dim() == 2 else gate.reshape(-1, D)
    u2 = up if up.dim() == 2 else up.reshape(-1, D)
    return _launch(g2, u2, D, gate.shape, activation)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    return launch_act_and_mul(x, "silu")


def gelu_and_mul_triton(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_act_and_mul(x, "gelu_tanh" if approximate == "tanh" else "gelu_none")


def silu_mul_triton(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return launch_gate_up(gate, up, "silu")


def gelu_mul_triton(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_gate_up(gate, up, "gelu_tanh" if approximate == "tanh" else "gelu_none")


# ------------------------------------------------------------------ backward
def _launch_backward(dy, gate, up, dg, du, D: int, activation: str) -> None:
    """The gradients of ``act(gate) * up`` over 2-D row views with unit last stride into ``dg`` and ``du``
    (new contiguous tensors); ``up`` None: ``gate`` is ``x [T, 2D]``, ``dg`` is ``dx [..., 2D]`` and
    ``du`` None. The forward's launch rule (``act_and_mul_config``) on the output width ``D``; a traced call
    takes the configuration of ``D`` alone and int64 offsets, as the forward does."""
    T = gate.shape[0]
    if not is_symbolic(T) and T * D == 0:
        return
    BT, BD, num_warps = act_and_mul_config(D, None if is_symbolic(T) else T)
    joined = up is None
    up = gate if joined else up
    stride_dx = 2 * D if joined else D
    torch.library.wrap_triton(act_and_mul_backward_kernel)[(triton.cdiv(T, BT), triton.cdiv(D, BD))](
        dy,
        gate,
        up,
        dg,
        dg if joined else du,
        T,
        D,
        dy.stride(0),
        gate.stride(0),
        up.stride(0),
        stride_dx,
        FORMULA=ACTIVATIONS[activation],
        BT=BT,
        BD=BD,
        INT64_INDEX=needs_int64(T, max(dy.stride(0), gate.stride(0), up.stride(0), stride_dx)),
        JOINED=joined,
        num_warps=num_warps,
    )


def launch_act_and_mul_backward(grad: torch.Tensor, x: torch.Tensor, activation: str) -> torch.Tensor:
    """``grad: [..., d]``, ``x: [..., 2d]`` -> ``dx [..., 2d]``."""
    D = x.shape[-1] // 2
    dx = empty(x.shape, x.dtype, x.device)
    x2 = x if x.dim() == 2 else x.reshape(-1, 2 * D)
    dy2 = grad if grad.dim() == 2 else grad.reshape(-1, D)
    _launch_backward(dy2, x2, None, dx, None, D, activation)
    return dx


def launch_gate_up_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``grad, gate, up: [..., d]`` -> ``(d gate, d up)``, each ``[..., d]``."""
    D = gate.shape[-1]
    dg, du = empty(gate.shape, gate.dtype, gate.device), empty(gate.shape, gate.dtype, gate.device)
    g2 = gate if gate.dim() == 2 else gate.reshape(-1, D)
    u2 = up if up.dim() == 2 else up.reshape(-1, D)
    dy2 = grad if grad.dim() == 2 else grad.reshape(-1, D)
    _launch_backward(dy2, g2, u2, dg, du, D, activation)
    return dg, du


def _gelu(approximate: str) -> str:
    return "gelu_tanh" if approximate == "tanh" else "gelu_none"


def silu_and_mul_backward_triton(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return launch_act_and_mul_backward(grad, x, "silu")


def gelu_and_mul_backward_triton(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_act_and_mul_backward(grad, x, _gelu(approximate))


def silu_mul_backward_triton(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return launch_gate_up_backward(grad, gate, up, "silu")


def gelu_mul_backward_triton(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "none"
) -> tuple[torch.Tensor, torch.Tensor]:
    return launch_gate_up_backward(grad, gate, up, _gelu(approximate))


# ------------------------------------------------------------------ what the kernel takes (supports_args)
def _reads(name: str, t: torch.Tensor) -> bool | str:
    """Rows the kernel reads: a tensor Triton can read, 2-D with unit last stride or contiguous."""
    if not t.is_cuda and (reason := platform.triton_reads(name, t)) is not True:
        return reason
    if (t.dim() == 2 and t.stride(-1) == 1) or t.is_contiguous():
        return True
    return (f"{name} has strides {tuple(t.stride())}: the kernel reads contiguous {name}, or 2-D rows with "
            "unit last stride")  # fmt: skip


def triton_supports(x: torch.Tensor, approximate: str = "none") -> bool | str:
    return _reads("x", x)


def triton_supports_gate_up(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> bool | str:
    reason = _reads("gate", gate)
    return _reads("up", up) if reason is True else reason


def triton_supports_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> bool | str:
    reason = _reads("grad", grad)
    return _reads("x", x) if reason is True else reason


def triton_supports_gate_up_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "none"
) -> bool | str:
    reason = _reads("grad", grad)
    return triton_supports_gate_up(gate, up) if reason is True else reason
