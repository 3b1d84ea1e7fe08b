"""W4A16 GEMM: declarations of ``w4a16_gemm`` (fp16/bf16 activations x 4-bit GPTQ weights) and
``w4a16_gemm_packed`` (the same GEMM over the fragment layout, ``fragment.py``, repacked once).

Spec in ``native.py``, argument checks in ``checks.py``, formats in ``packing.py`` and ``fragment.py``,
the launcher, the provider and what it takes in ``launch.py``, kernels in ``tile_kernel.py`` (the fused
tile), ``gemv.py`` (M <= 2), ``staged.py`` (the multi-stage Gluon tile), ``splitk.py`` and ``dequant.py``
(the dense path), and, for the fragment layout, ``packed_kernel.py`` (the warp-specialized stream-K kernel;
its shared-memory views in ``packed_smem.py``, its ``mma.sync`` steps in ``mma.py``) with its launcher and
provider in ``packed.py``, the launch rules in
``heuristics.py``, the warmup hooks in ``warmup.py``. Inputs, grids and cost (``make_case`` too) live in the
test kit (``exactfuse.testing.cases.w4a16``), baselines in the bench (``exactfuse.bench.peers``). The ops are
*opaque* to torch.compile (``custom_op`` + fake): their tile and split-K choice depends on the runtime M, and
a traced launcher would freeze a prefill configuration into decode.
"""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16 import checks, fragment, launch, native, packed, splitk, tile_kernel, warmup
from exactfuse.ops.w4a16 import mma as _mma
from exactfuse.ops.w4a16.native import dense_weight, dequantize
from exactfuse.ops.w4a16.packing import PreparedW4A16, dequantize_gptq, prepare_gptq, quantize_rtn, random_weights
from exactfuse.registry import op, platform
from exactfuse.registry.contracts import Float64Relative


def reference64(
    a, qweight, scales, zeros=None, perm=None, bias=None, group_size=128, deterministic=True, group_index=None
):
    """float64 ``a[:, perm] @ W (+ bias)`` with ``W`` dequantized exactly as the spec does."""
    w = dequantize(qweight, scales, zeros, group_size, a.dtype, group_index).double()
    a64 = a.double() if perm is None else a.double().index_select(1, perm.to(torch.int64))
    out = a64 @ w
    return out if bias is None else out + bias.double()


# GEMM contract (docs/contracts.md): relative Frobenius error against float64 no worse
# than 2x native's own on the same inputs. Dequantization itself is bit-exact,
# tested with one-hot activations (tests/ops/test_w4a16_gemm.py).
CONTRACT = Float64Relative(reference64, factor=2.0)

w4a16_gemm = op(
    native.w4a16_gemm,
    contract=CONTRACT,
    check=checks.check_w4a16_args,
    compiler="opaque",
    fake=native.w4a16_gemm_fake,
    dtypes=(torch.float16, torch.bfloat16),
    warmup=warmup.w4a16_gemm,
)
w4a16_gemm.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=launch.triton_supports,
    kernels=[tile_kernel.w4a16_gemm_kernel, splitk.w4a16_splitk_reduce_kernel],
)(launch.w4a16_gemm_triton)
# Backward with respect to the activations and bias (the quantized weight is frozen, as in QLoRA): the
# gradients eager autograd computes for the spec, written out (native.py).
w4a16_gemm.differentiable("a", "bias", backward=native.w4a16_gemm_backward)


def packed_reference64(a, words, scales, zeros=None, perm=None, bias=None):
    """float64 ``a[:, perm] @ W (+ bias)`` with ``W`` dequantized from the fragment layout as the spec does."""
    w = fragment.dequantize(words, scales, zeros).double()
    a64 = a.double() if perm is None else a.double().index_select(1, perm.to(torch.int64))
    out = a64 @ w
    return out if bias is None else out + bias.double()


# The same GEMM over the fragment layout (fragment.py), one MMA operand a lane's word: the contract of
# w4a16_gemm, dequantization bit for bit (GPU tests: one-hot activations).
w4a16_gemm_packed = op(
    native.w4a16_gemm_packed,
    contract=Float64Relative(packed_reference64, factor=2.0),
    check=checks.check_w4a16_packed_args,
    compiler="opaque",
    fake=native.w4a16_gemm_packed_fake,
    dtypes=(torch.float16, torch.bfloat16),
    warmup=warmup.w4a16_gemm_packed,
)
w4a16_gemm_packed.provider("gluon", supported=_mma.gluon_gpu_supported, supports_args=packed.packed_supports)(
    packed.w4a16_gemm_packed_gluon
)
w4a16_gemm_packed.differentiable("a", "bias", backward=native.w4a16_gemm_packed_backward)

__all__ = [
    "CONTRACT",
    "PreparedW4A16",
    "dense_weight",
    "dequantize_gptq",
    "prepare_gptq",
    "quantize_rtn",
    "random_weights",
    "w4a16_gemm",
    "w4a16_gemm_packed",
]
