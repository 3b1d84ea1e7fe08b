"""Gated activations ``act(gate) * up``: declarations of silu_and_mul and gelu_and_mul (``x [..., 2d]``,
gate and up its halves) and of silu_mul and gelu_mul (``gate, up [..., d]``, two tensors), one kernel.

Spec in ``native.py``, argument checks in ``checks.py``, kernel and what it takes in ``triton.py``, its
launch rule in ``heuristics.py``, warmup in ``warmup.py``;
inputs, benchmark grids and cost in ``inputs.py`` and the Liger peers in ``peers.py``, imported on first use.
"""

from __future__ import annotations

import torch

from exactfuse.ops.act_and_mul import checks, native
from exactfuse.ops.act_and_mul import triton as _triton
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
    native.silu_and_mul, contract=CONTRACT, interpreter_contract=INTERPRETER_CONTRACT, check=checks.check_silu_and_mul
)
gelu_and_mul = op(
    native.gelu_and_mul,
    contract=CONTRACT,
    interpreter_contract=GELU_INTERPRETER_CONTRACT,
    check=checks.check_gelu_and_mul,
)
silu_mul = op(
    native.silu_mul, contract=CONTRACT, interpreter_contract=INTERPRETER_CONTRACT, check=checks.check_silu_mul
)
gelu_mul = op(
    native.gelu_mul, contract=CONTRACT, interpreter_contract=GELU_INTERPRETER_CONTRACT, check=checks.check_gelu_mul
)
for _op, _fn, _supports in (
    (silu_and_mul, _triton.silu_and_mul_triton, _triton.triton_supports),
    (gelu_and_mul, _triton.gelu_and_mul_triton, _triton.triton_supports),
    (silu_mul, _triton.silu_mul_triton, _triton.triton_supports_gate_up),
    (gelu_mul, _triton.gelu_mul_triton, _triton.triton_supports_gate_up),
):
    _op.provider("triton", supported=platform.triton_available, supports_args=_supports,
                 kernels=[_triton.act_and_mul_kernel])(_fn)  # fmt: skip
# Backward: the gradients eager autograd computes for the spec, written out (native.py), bitwise its
# gradient in eager mode.
silu_and_mul.differentiable("x", backward=native.silu_and_mul_backward)
gelu_and_mul.differentiable("x", backward=native.gelu_and_mul_backward)
silu_mul.differentiable("gate", "up", backward=native.silu_mul_backward)
gelu_mul.differentiable("gate", "up", backward=native.gelu_mul_backward)

from exactfuse.ops.act_and_mul import warmup  # noqa: E402, F401  (the warmup hooks, beside the launchers)

for _op in (silu_and_mul, gelu_and_mul, silu_mul, gelu_mul):
    _op.declared_in("exactfuse.ops.act_and_mul.inputs", "exactfuse.ops.act_and_mul.peers")  # on first use
