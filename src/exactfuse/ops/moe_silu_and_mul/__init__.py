"""Declaration of ``moe_silu_and_mul``: the MoE expert activation ``silu(gate) * up [* w]``.

Spec in ``native.py``, argument checks in ``checks.py``, kernel and what it takes in ``triton.py``, its launch
rule in ``heuristics.py``, warmup in ``warmup.py``;
inputs, benchmark grids and cost in ``inputs.py``, imported on first use.
"""

from __future__ import annotations

import torch

from exactfuse.ops.moe_silu_and_mul import checks, native
from exactfuse.ops.moe_silu_and_mul import triton as _triton
from exactfuse.registry import Tolerance, Ulp, op, platform

# fp16/bf16 outputs: Ulp(1). Spec and kernel compute the same fp32 expression
# in the same order and round once; the only freedom is the fp32 exp (on CUDA
# both call the same expf, so we expect bitwise equality there: the numerics
# line of the MoE sweep reports it). fp32 outputs: within 1e-6
# relative; absolute differences up to 1.2e-38 (the smallest normal fp32 is
# 1.18e-38) are accepted, as subnormal results carry fewer than 24 bits.
# The same contract holds under the Triton interpreter (numpy exp vs the CPU's
# SLEEF/libm exp): measured over the full input set minus the two largest
# shapes, seeds 0-2: fp16 at most 1 ulp, fp32 at most 6 fp32 ulp (< 1e-6 relative).
FP32_TOLERANCE = Tolerance(atol=1.2e-38, rtol=1e-6)
CONTRACT = {torch.float16: Ulp(1), torch.bfloat16: Ulp(1), torch.float32: FP32_TOLERANCE}


moe_silu_and_mul = op(
    native.moe_silu_and_mul,
    contract=CONTRACT,
    check=checks.check_moe_silu_and_mul,
)
moe_silu_and_mul.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=_triton.triton_supports,
    kernels=[_triton.moe_silu_and_mul_kernel],
)(_triton.moe_silu_and_mul_triton)
# Backward: the gradients eager autograd computes for the spec, written out (native.py).
moe_silu_and_mul.differentiable("gateup", "row_weights", backward=native.moe_silu_and_mul_backward)


from exactfuse.ops.moe_silu_and_mul import warmup  # noqa: E402, F401  (the warmup hook, beside the launcher)

moe_silu_and_mul.declared_in("exactfuse.ops.moe_silu_and_mul.inputs")  # inputs, grids, cost: on first use
