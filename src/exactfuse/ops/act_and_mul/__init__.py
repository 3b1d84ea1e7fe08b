"""Gated activations ``act(gate) * up``: declarations of silu_and_mul and gelu_and_mul (``x [..., 2d]``,
gate and up its halves) and of silu_mul and gelu_mul (``gate, up [..., d]``, two tensors), one kernel; and
of their backward ops (``silu_and_mul_backward``, ... : the gradients eager autograd computes), one
backward kernel, which the four ops' autograd formulas call through the registry.

Spec in ``native.py``, argument checks in ``checks.py``, the kernels in ``gated_kernel.py``, their launchers,
the providers and what they take in ``launch.py``, the launch rule in ``heuristics.py``, the warmup hooks in
``warmup.py``. Inputs, benchmark grids and cost live in the test kit (``exactfuse.testing.cases.act_and_mul``),
the Liger peers in the bench (``exactfuse.bench.peers``).
"""

from __future__ import annotations

import torch

from exactfuse.ops.act_and_mul import checks, gated_kernel, launch, native, warmup
from exactfuse.registry import Bitwise, Tolerance, op, platform

# Bitwise against eager PyTorch on CUDA. Under the Triton interpreter the reference runs on the CPU,
# whose exp/erf/tanh (SLEEF vectors) are neither CUDA's libdevice nor the interpreter's numpy: up to
# 5 fp32 ulp for silu and absolute errors of 4e-6 near zero for gelu there, so the CPU contract is the
# per-dtype Tolerance. fp32 erf-GELU needs atol 1e-4 there: torch CPU's vectorized erff is one ulp off
# in the cancellation region 1 + erf(g/sqrt 2) for g < -3, and the wide-range case multiplies that by
# |up| ~ 100 (g = -3.123, u = -99.84: float64 truth 0.2791161, CPU native 0.2791401, interpreter
# 0.2791123 -- the reference is the one that is off).
CONTRACT = Bitwise()
INTERPRETER_CONTRACT = Tolerance()
GELU_INTERPRETER_CONTRACT = {
    torch.float16: Tolerance(),
    torch.bfloat16: Tolerance(),
    torch.float32: Tolerance(atol=1e-4),
}


silu_and_mul = op(
    native.silu_and_mul,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_silu_and_mul,
    warmup=warmup.silu_and_mul,
)
gelu_and_mul = op(
    native.gelu_and_mul,
    contract=CONTRACT,
    interpreter_contract=GELU_INTERPRETER_CONTRACT,
    check=checks.check_gelu_and_mul,
    warmup=warmup.gelu_and_mul,
)
silu_mul = op(
    native.silu_mul,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_silu_mul,
    warmup=warmup.silu_mul,
)
gelu_mul = op(
    native.gelu_mul,
    contract=CONTRACT,
    interpreter_contract=GELU_INTERPRETER_CONTRACT,
    check=checks.check_gelu_mul,
    warmup=warmup.gelu_mul,
)
for _op, _fn, _supports in (
    (silu_and_mul, launch.silu_and_mul_triton, launch.triton_supports),
    (gelu_and_mul, launch.gelu_and_mul_triton, launch.triton_supports),
    (silu_mul, launch.silu_mul_triton, launch.triton_supports_gate_up),
    (gelu_mul, launch.gelu_mul_triton, launch.triton_supports_gate_up),
):
    _op.provider("triton", supported=platform.triton_available, supports_args=_supports,
                 kernels=[gated_kernel.act_and_mul_kernel])(_fn)  # fmt: skip


# ------------------------------------------------------------------ backward
# Each backward is an op of its own: its spec is the written-out gradient of eager autograd (native.py),
# its Triton provider the backward kernel, under the same contracts as the forward ops (Bitwise on CUDA;
# on the CPU the reference's exp/erf/tanh are SLEEF's, so Tolerance there, measured below).
# On the CPU fp32 GELU gradients need atol 1e-3: in tanh-GELU's cancellation region (g in [-5, -3.3],
# ``0.5 (1 + t)`` against ``right_derivative``) the CPU reference and the interpreter's tanh are off from
# float64 by up to 2e-4 and 3.5e-4, times |grad * up| up to 350 in the wide-range case; they differ by at
# most 4.9e-4 over the quick cases of seeds 0-4 (erf-GELU: within the forward's 1e-4). fp16 and SiLU keep
# the forward's contracts.
BACKWARD_INTERPRETER_CONTRACT = INTERPRETER_CONTRACT
GELU_BACKWARD_INTERPRETER_CONTRACT = {**GELU_INTERPRETER_CONTRACT, torch.float32: Tolerance(atol=1e-3)}
silu_and_mul_backward = op(
    native.silu_and_mul_backward,
    contract=CONTRACT,
    interpreter_contract=BACKWARD_INTERPRETER_CONTRACT,
    check=checks.check_silu_backward,
    warmup=warmup.silu_and_mul_backward,
)
gelu_and_mul_backward = op(
    native.gelu_and_mul_backward,
    contract=CONTRACT,
    interpreter_contract=GELU_BACKWARD_INTERPRETER_CONTRACT,
    check=checks.check_gelu_backward,
    warmup=warmup.gelu_and_mul_backward,
)
silu_mul_backward = op(
    native.silu_mul_backward,
    contract=CONTRACT,
    interpreter_contract=BACKWARD_INTERPRETER_CONTRACT,
    check=checks.check_silu_mul_backward,
    warmup=warmup.silu_mul_backward,
)
gelu_mul_backward = op(
    native.gelu_mul_backward,
    contract=CONTRACT,
    interpreter_contract=GELU_BACKWARD_INTERPRETER_CONTRACT,
    check=checks.check_gelu_mul_backward,
    warmup=warmup.gelu_mul_backward,
)
BACKWARD_OPS = (silu_and_mul_backward, gelu_and_mul_backward, silu_mul_backward, gelu_mul_backward)
for _op, _fn, _supports in (
    (silu_and_mul_backward, launch.silu_and_mul_backward_triton, launch.triton_supports_backward),
    (gelu_and_mul_backward, launch.gelu_and_mul_backward_triton, launch.triton_supports_backward),
    (silu_mul_backward, launch.silu_mul_backward_triton, launch.triton_supports_gate_up_backward),
    (gelu_mul_backward, launch.gelu_mul_backward_triton, launch.triton_supports_gate_up_backward),
):
    _op.provider("triton", supported=platform.triton_available, supports_args=_supports,
                 kernels=[gated_kernel.act_and_mul_backward_kernel])(_fn)  # fmt: skip
# The GELU gradients are twice differentiable, through the VJP of their spec (ATen has a derivative of
# gelu_backward). ATen has none of silu_backward, so the SiLU backward ops are inference-only: a second
# derivative (create_graph=True) raises InferenceOnlyError naming the op.
gelu_and_mul_backward.differentiable("grad", "x")
gelu_mul_backward.differentiable("grad", "gate", "up")


# The forward ops' autograd formulas call the backward ops, so the registry picks the provider: the
# Triton kernel on CUDA, the written-out spec elsewhere (or where the kernel cannot read the gradient).
def _silu_and_mul_grad(grad: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor]:
    return (silu_and_mul_backward(grad, x),)


def _gelu_and_mul_grad(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> tuple[torch.Tensor]:
    return (gelu_and_mul_backward(grad, x, approximate),)


silu_and_mul.differentiable("x", backward=_silu_and_mul_grad)
gelu_and_mul.differentiable("x", backward=_gelu_and_mul_grad)
silu_mul.differentiable("gate", "up", backward=silu_mul_backward)
gelu_mul.differentiable("gate", "up", backward=gelu_mul_backward)
