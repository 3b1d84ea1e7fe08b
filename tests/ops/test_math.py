"""The exact math helpers (``exactfuse.ops.math``) against the functions they reproduce, on every fp32 input."""

import pytest
import torch
import triton
import triton.language as tl

from exactfuse.ops.math import exact_tanh, fast_tanh, libdevice_tanh

BLOCK = 4096
FP32_INPUTS = 1 << 32


@triton.jit
def count_differing_kernel(p_count, FN: tl.constexpr, REF: tl.constexpr, BLOCK: tl.constexpr):
    """Add to ``p_count[0]`` how many fp32 bit patterns of this program's ``BLOCK`` give ``FN`` and ``REF``
    results with different bits (any NaN matches any NaN). Program ``i`` takes patterns ``i * BLOCK ...``."""
    bits = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)).to(tl.int32)
    x = bits.to(tl.float32, bitcast=True)
    a = FN(x)
    b = REF(x)
    differ = (a.to(tl.int32, bitcast=True) != b.to(tl.int32, bitcast=True)) & ((a == a) | (b == b))
    tl.atomic_add(p_count, tl.sum(differ.to(tl.int32)))


def count_differing(fn, ref) -> int:
    count = torch.zeros(1, dtype=torch.int32, device="cuda")
    count_differing_kernel[(FP32_INPUTS // BLOCK,)](count, FN=fn, REF=ref, BLOCK=BLOCK)
    return int(count.item())


@pytest.mark.gpu
def test_gpu_exact_tanh_is_libdevice_tanhf_on_every_fp32_input():
    assert count_differing(exact_tanh, libdevice_tanh) == 0


@pytest.mark.gpu
def test_gpu_the_every_input_check_tells_an_approximate_tanh_apart():
    # tanh.approx.f32 is within about 2^-11 (it differs on 256,135,964 inputs on the H200; beyond
    # |x| = 9 and near 0 both give the same bits): the check must find millions
    assert count_differing(fast_tanh, libdevice_tanh) > 10**6
