"""The exact math helpers (``exactfuse.ops.math``) against the functions they reproduce, on every input."""

import pytest
import torch
import triton
import triton.language as tl

from exactfuse.ops.math import exact_tanh, fast_tanh, fma_rn, libdevice_tanh, mul_rn

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


@triton.jit
def fma_differing_kernel(p_w, p_acc, p_count, NW, DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    """Add to ``p_count[0]`` how many (x, w, acc) give ``fma_rn(w, x, acc)`` and ``acc + mul_rn(w, x)`` with
    different bits: x every 16-bit pattern of DTYPE (this program's ``BLOCK``), w each of ``p_w[:NW]`` (DTYPE),
    acc ``p_acc[x]`` (fp32)."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = o.to(tl.int16).to(DTYPE, bitcast=True).to(tl.float32)
    acc = tl.load(p_acc + o)
    differ = tl.zeros_like(o)
    for i in range(NW):
        w = tl.load(p_w + i).to(tl.float32)
        a = fma_rn(w, x, acc)
        b = acc + mul_rn(w, x)
        differ += ((a.to(tl.int32, bitcast=True) != b.to(tl.int32, bitcast=True)) & ((a == a) | (b == b))).to(tl.int32)
    tl.atomic_add(p_count, tl.sum(differ))


def fma_differing(dtype: torch.dtype) -> int:
    """Every 16-bit x against 4096 weights (every exponent, subnormals and the extremes among them) and a
    random fp32 accumulator a third of the products' size, zero, or huge."""
    gen = torch.Generator().manual_seed(0)
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    w = every[torch.randperm(1 << 16, generator=gen)[:4096]].float()
    acc = torch.randn(1 << 16, generator=gen) * every.float().abs().nan_to_num(0, 0, 0) / 3
    acc[::7] = 0.0
    acc[::11] = torch.finfo(torch.float32).max
    count = torch.zeros(1, dtype=torch.int32, device="cuda")
    w16 = w.to(dtype).cuda()
    tl_dtype = tl.float16 if dtype == torch.float16 else tl.bfloat16
    fma_differing_kernel[((1 << 16) // BLOCK,)](w16, acc.cuda(), count, w16.numel(), DTYPE=tl_dtype, BLOCK=BLOCK)
    return int(count.item())


@pytest.mark.gpu
def test_gpu_an_fma_of_fp16_factors_is_the_rounded_product_then_the_sum():
    """The conv taps' ``fma_rn`` for fp16 factors (their product exact in fp32): the same bits as ``mul_rn``
    then the add, on every fp16 input against 4096 fp16 weights; bf16 factors, whose products leave fp32's
    range and precision, must differ somewhere, or the check could not tell them apart."""
    assert fma_differing(torch.float16) == 0
    assert fma_differing(torch.bfloat16) > 0
