"""Declaration of ``gelu_and_mul_sparse`` (Gemma3n's sparse GELU).

Spec in ``native.py``, argument checks in ``checks.py``, the kernels in ``sparse_gelu_kernel.py``, their
launcher, the provider and what it takes in ``launch.py``, the launch choice in ``heuristics.py``, the warmup
hook in ``warmup.py``. Inputs, benchmark grids and cost live in the test kit
(``exactfuse.testing.cases.gelu_and_mul_sparse``).
"""

from __future__ import annotations

import torch

from exactfuse.ops.gelu_and_mul_sparse import checks, launch, native, sparse_gelu_kernel, warmup
from exactfuse.ops.gelu_and_mul_sparse.native import GEMMA3N_SPARSITY as GEMMA3N_SPARSITY
from exactfuse.ops.gelu_and_mul_sparse.native import STD_MULTIPLIER as STD_MULTIPLIER
from exactfuse.registry import op, platform
from exactfuse.registry.contracts import RowBitwise, ZeroMaskTolerance

# fp16/bf16: whole rows bitwise equal to eager on >= 99.9% of rows, on every row
# up to d = 128. The row mean and std are fp32 sums in another order than ATen's,
# so in rare rows a statistic rounds to the neighbouring fp16/bf16 value and the
# cutoff moves by one ulp (a probe on the H200 saw 0-1 such rows in 2048 per
# width). fp32: the statistics are not rounded, so every row differs by fp32 ulps:
# Tolerance, with the exact zero mask on narrow rows.
CONTRACT = {
    torch.float16: RowBitwise(),
    torch.bfloat16: RowBitwise(),
    torch.float32: ZeroMaskTolerance(up_to_d=128),
}
# Under the interpreter the reference is the CPU's: ``mean`` divides the fp32 sum
# by d (CUDA multiplies by rows/numel), ``std`` is a float64 Welford, numpy sums
# pairwise. Measured (fp16, 2048 rows each at d = 31 and 128, 1024 at d = 2048,
# randn and randn + 3 gates): no row differs, so the same contract holds there.
INTERPRETER_CONTRACT = CONTRACT


gelu_and_mul_sparse = op(
    native.gelu_and_mul_sparse,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_gelu_and_mul_sparse,
    warmup=warmup.gelu_and_mul_sparse,
)


gelu_and_mul_sparse.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=launch.triton_supports,
    kernels=[
        sparse_gelu_kernel.gelu_and_mul_sparse_kernel,
        sparse_gelu_kernel.gelu_and_mul_sparse_looped_kernel,
        sparse_gelu_kernel.gelu_and_mul_sparse_split_stats_kernel,
        sparse_gelu_kernel.gelu_and_mul_sparse_split_apply_kernel,
    ],
)(launch.gelu_and_mul_sparse_triton)
# Backward: eager autograd of the spec (registry/autograd.py), through the row statistics too.
gelu_and_mul_sparse.differentiable("x")
