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
from exactfuse.ops.math import activation
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic, needs_int64

ACTIVATIONS = EXACT  # activation name -> its exact formula id


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


def _launch(gate: torch.Tensor, up: torch.Tensor | None, D: int, out_shape, activation: str) -> torch.Tensor:
    """``act(gate) * up`` over 2-D row views with unit last stride -> a new ``out_shape`` tensor; ``up``
    None: ``gate`` is ``[T, 2D]`` and up its second half (no view made: two slices cost 3.5 µs of host
    time a call on the CPU machine).

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
