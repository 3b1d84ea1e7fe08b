"""Declaration of ``moe_silu_and_mul``: the MoE expert activation ``silu(gate) * up [* w]``; and of its
backward op ``moe_silu_and_mul_backward`` (the gradients eager autograd computes), which the forward's
autograd formula calls through the registry.

Spec in ``native.py``, argument checks in ``checks.py``, the kernels in ``moe_gated_kernel.py``, their
launchers, the providers and what they take in ``launch.py``, the launch rule in ``heuristics.py``, the warmup
hooks in ``warmup.py``. Inputs, benchmark grids and cost live in the test kit
(``exactfuse.testing.cases.moe_silu_and_mul``).
"""

from __future__ import annotations

import torch

from exactfuse.ops.moe_silu_and_mul import checks, launch, moe_gated_kernel, native, warmup
from exactfuse.registry import Bitwise, Tolerance, Ulp, op, platform
from exactfuse.registry.contracts import Float64Relative, PerOutput

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
    warmup=warmup.moe_silu_and_mul,
)
moe_silu_and_mul.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=launch.triton_supports,
    kernels=[moe_gated_kernel.moe_silu_and_mul_kernel],
)(launch.moe_silu_and_mul_triton)

# ------------------------------------------------------------------ backward
# An op of its own: its spec is the written-out gradient of eager autograd (native.py), its Triton provider
# the backward kernel. d gateup is elementwise and follows eager's roundings: Bitwise. d row_weights is a
# sum over the N columns, which ATen's reduction kernel orders by its launch configuration (vectorized
# per-thread partial sums, then warp and block trees) and the kernel in its own fixed order (a tree per
# column tile, tiles in sequence): the same fp32 products in another order, so it is judged against the
# float64 sum of those products, no worse than twice native's own error (floor 1e-6 relative).
# Under the interpreter the reference's sigmoid is the CPU's (SLEEF), not the interpreter's numpy exp:
# d gateup takes the gated activations' CPU contract, the per-dtype Tolerance.
ROW_WEIGHTS_GRAD_CONTRACT = Float64Relative(native.row_weights_grad64, factor=2.0)
BACKWARD_CONTRACT = PerOutput(("d_gateup", Bitwise()), ("d_row_weights", ROW_WEIGHTS_GRAD_CONTRACT))
BACKWARD_INTERPRETER_CONTRACT = PerOutput(("d_gateup", Tolerance()), ("d_row_weights", ROW_WEIGHTS_GRAD_CONTRACT))
moe_silu_and_mul_backward = op(
    native.moe_silu_and_mul_backward,
    contract=BACKWARD_CONTRACT,
    interpreter_contract=BACKWARD_INTERPRETER_CONTRACT,
    check=checks.check_moe_silu_and_mul_backward,
    warmup=warmup.moe_silu_and_mul_backward,
)
moe_silu_and_mul_backward.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=launch.triton_supports_backward,
    kernels=[moe_gated_kernel.moe_silu_and_mul_backward_kernel],
)(launch.moe_silu_and_mul_backward_triton)
# Twice differentiable through the VJP of its spec (ATen has a derivative of sigmoid_backward), as the
# written-out formula was when the forward called it directly.
moe_silu_and_mul_backward.differentiable("grad", "gateup", "row_weights")


# The forward's autograd formula calls the backward op, so the registry picks the provider: the Triton
# kernel on CUDA, the written-out spec elsewhere (or where the kernel cannot read the gradient).
def _moe_silu_and_mul_grad(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    d_gateup, d_row_weights = moe_silu_and_mul_backward(grad, gateup, row_weights, interleaved, out_dtype)
    return d_gateup, (d_row_weights if row_weights is not None else None)


moe_silu_and_mul.differentiable("gateup", "row_weights", backward=_moe_silu_and_mul_grad)
