"""Triton kernel for the gated activations ``act(x[..., :d]) * x[..., d:]``.

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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from exactfuse.ops.math import exact_erf, exact_exp, exact_tanh
from exactfuse.utils import empty, next_power_of_2

SILU, GELU_ERF, GELU_TANH = 0, 1, 2
ACTIVATIONS = {"silu": SILU, "gelu_none": GELU_ERF, "gelu_tanh": GELU_TANH}


@triton.jit
def _activation(x, ACTIVATION: tl.constexpr):
    """fp32 ``x`` -> fp32 activation, evaluated as ATen's CUDA kernels do."""
    if ACTIVATION == 0:
        return tl.div_rn(x, 1.0 + exact_exp(-x))
    elif ACTIVATION == 1:
        return (x * 0.5) * (1.0 + exact_erf(x * 0.7071067811865476))
    else:
        inner = 0.7978845608028654 * tl.fma(0.044715, x * x * x, x)
        return (0.5 * x) * (1.0 + exact_tanh(inner))


@triton.jit(do_not_specialize=["T"])
def act_and_mul_kernel(
    p_x,
    p_y,
    T,
    D,
    stride_x,
    stride_y,
    ACTIVATION: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    INT64_INDEX: tl.constexpr,
):
    """One ``[BT, BD]`` tile of ``y = act(gate) * up``.

    p_x: ``[T, 2D]`` rows ``stride_x`` apart, last dim contiguous.
    p_y: ``[T, D]`` rows ``stride_y`` apart, last dim contiguous.
    constexpr: ACTIVATION, BT, BD, INT64_INDEX (``numel >= 2**31``). T and D are
    runtime values (D is specialized on divisibility by 16 for wide loads), so
    one compile serves every batch size of a width class.
    """
    i_t = tl.program_id(0)
    i_d = tl.program_id(1)
    if INT64_INDEX:
        i_t = i_t.to(tl.int64)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = i_d * BD + tl.arange(0, BD)
    m_td = (o_t[:, None] < T) & (o_d[None, :] < D)
    p_g = p_x + o_t[:, None] * stride_x + o_d[None, :]
    b_g = tl.load(p_g, mask=m_td).to(tl.float32)
    b_u = tl.load(p_g + D, mask=m_td).to(tl.float32)
    b_a = _activation(b_g, ACTIVATION).to(p_y.dtype.element_ty).to(tl.float32)
    b_y = (b_a * b_u).to(p_y.dtype.element_ty)
    tl.store(p_y + o_t[:, None] * stride_y + o_d[None, :], b_y, mask=m_td)


SMALL_TILE_ELEMENTS = 2**20  # below this many outputs a launch uses 8 warps


def act_and_mul_config(T: int, D: int) -> tuple[int, int, int]:
    """Static launch heuristic ``(BT, BD, num_warps)`` for ``T`` rows of ``D`` outputs.

    A program covers 1024 output elements: ``BD`` spans the row up to 1024
    columns, and narrow rows stack ``BT`` rows per program so that d = 1..31
    does not launch one tiny program per row. Launches of fewer than 2^20
    outputs use 8 warps (4 elements per thread), larger ones 4 warps. So a
    width compiles at most two specializations (``warmup`` compiles both) and
    every batch size reuses them.

    Measured on the H200 (scripts/gpu/sweep_act_and_mul.py, silu bf16, NOTES.md)
    against the previous 2048-element tile at 4 warps: T=16, d=768 3.35 -> 1.59
    µs (8 warps); T=4096, d=768 8.81 -> 7.24 µs (4 warps); T=32768, d=31 6.52 ->
    4.93 µs; within 1% at T=32768, d=14336. The 2^20 threshold sits between
    the measured points (8 warps best up to T·d = 1.0M at T=32768, d=31; 4
    warps from 3.1M); the crossover itself was not swept.

    Widths whose padded block would mask more than 1/8 of the row take the
    largest power of two dividing ``d`` instead, when it is >= 256: d = 768 runs
    four rows of BD = 256 per program, no column masked. Session 3's sweep
    (benchmarks/results/h200/sweeps/sweep_act_and_mul_s3*.txt, silu bf16, µs):
    T=16 1.61 -> 1.32, T=4096 7.26 -> 6.73, T=32768 42.8 -> 39.6, T=1 1.54 ->
    1.57. Not for d = 13824 (3.7% padding): BD = 512 measured 88.0 against
    85.2 µs at T=4096.
    """
    BD = min(next_power_of_2(D), 1024)
    low = D & -D  # the largest power of two dividing D
    if low >= 256 and (-D % BD) * 8 > D:
        BD = low  # the padded block would mask more than 1/8 of the row (d = 768: a quarter)
    BT = max(1, 1024 // BD)
    return BT, BD, 8 if T * D < SMALL_TILE_ELEMENTS else 4


def launch_act_and_mul(x: torch.Tensor, activation: str) -> torch.Tensor:
    """Launch :func:`act_and_mul_kernel` on ``x: [..., 2d]`` -> ``[..., d]``."""
    D = x.shape[-1] // 2
    y = empty((*x.shape[:-1], D), x.dtype, x.device)
    if y.numel() == 0:
        return y
    x2 = x if x.dim() == 2 else x.reshape(-1, 2 * D)
    T = x2.shape[0]
    BT, BD, num_warps = act_and_mul_config(T, D)
    grid = (triton.cdiv(T, BT), triton.cdiv(D, BD))
    torch.library.wrap_triton(act_and_mul_kernel)[grid](
        x2,
        y,
        T,
        D,
        x2.stride(0),
        D,
        ACTIVATION=ACTIVATIONS[activation],
        BT=BT,
        BD=BD,
        INT64_INDEX=x2.numel() >= 2**31,
        num_warps=num_warps,
    )
    return y


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    return launch_act_and_mul(x, "silu")


def gelu_and_mul_triton(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_act_and_mul(x, "gelu_tanh" if approximate == "tanh" else "gelu_none")
