"""moe_silu_and_mul_backward on a GPU: the contract matrix, eager autograd's gradients, edge values bit for
bit, layouts, every 16-bit gate, torch.compile, CUDA graphs and int64 offsets (the CPU tests in
``test_moe_backward.py``)."""

import pytest
import torch

import exactfuse
from exactfuse.ops.moe_silu_and_mul import moe_gated_kernel, moe_silu_and_mul, moe_silu_and_mul_backward
from exactfuse.testing import CompileWatch, assert_contract_matrix
from support.bits import SHORT, same_bits
from support.graph import capture
from support.moe import LAYOUT, pair
from support.moe_backward import assert_within_contract, eager_autograd, edge_calls, kernel


# ----------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype",
    # fp32's matrix (its float64 references beside the fp32 tensors) outgrew a 7.5 GiB worker share on an H100
    [pytest.param(d, marks=pytest.mark.big_memory) if d == torch.float32 else d for d in SHORT],
    ids=list(SHORT.values()),
)
def test_gpu_contract_matrix(dtype):
    """The full case set (M up to 49152, N up to 3072, layouts, weights, out_dtype, specials, strided rows):
    d gateup bitwise, d row_weights within Float64Relative."""
    case = next(moe_silu_and_mul_backward.iter_cases("cuda", dtype))
    assert moe_silu_and_mul_backward.select(*case.args).name == "triton"
    assert_contract_matrix(moe_silu_and_mul_backward, "cuda", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_gradient_is_eager_autograd(dtype):
    """The forward op's gradients on CUDA run the kernel: d gateup has eager autograd's bits (zero signs
    too); d row_weights meets its contract against eager's."""
    for case in moe_silu_and_mul_backward.iter_cases("cuda", dtype, quick=True):
        grad, x, w = case.args[:3]
        if not grad.numel():
            continue
        assert moe_silu_and_mul_backward.select(*case.args).name == "triton", case.id
        leaves = [x.detach().clone().requires_grad_(True)] + ([] if w is None else [w.clone().requires_grad_(True)])
        out = moe_silu_and_mul(leaves[0], leaves[1] if w is not None else None, *case.args[3:])
        got = torch.autograd.grad(out, leaves, grad)
        want_dx, want_dw = eager_autograd(*case.args)
        assert same_bits(got[0], want_dx), case.id
        if w is not None:
            assert_within_contract((got[0], got[1]), (want_dx, want_dw), case.args, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_edge_values_bitwise(dtype):
    for args in edge_calls(dtype, "cuda", up_scale=1e4, grad_scale=1e3):
        got, want = kernel(*args), moe_silu_and_mul_backward.native(*args)
        assert same_bits(got[0], want[0]), args[2:]
        assert_within_contract(got, want, args, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize(("M", "N"), [(1, 768), (6, 1024), (384, 1024), (4096, 3072)], ids=str)
def test_gpu_layouts_agree_and_runs_are_identical(M, N, dtype):
    split, inter, w = pair(M, N, dtype, "cuda")
    grad = torch.randn(M, N, device="cuda").to(dtype)
    for weights in (None, w):
        dx_s, dw_s = kernel(grad, split, weights, False)
        dx_i, dw_i = kernel(grad, inter, weights, True)
        assert torch.equal(torch.cat([dx_i[:, 0::2], dx_i[:, 1::2]], dim=1), dx_s) and same_bits(dw_i, dw_s)
        for _ in range(2):
            dx, dw = kernel(grad, inter, weights, True)
            assert same_bits(dx, dx_i) and same_bits(dw, dw_i)


@pytest.mark.gpu
def test_gpu_every_16_bit_gate_bitwise():
    """Every fp16 and bf16 gate value against signs and scales of the gradient, with and without weights."""
    for dtype in (torch.float16, torch.bfloat16):
        gate = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype).cuda().reshape(256, 256)
        up = torch.randn_like(gate)
        w = torch.rand(256, device="cuda")
        for scale in (1.0, -3.0, 1e-3):
            grad = torch.full_like(gate, scale)
            for interleaved in (False, True):
                x = torch.stack([gate, up], 2).reshape(256, 512) if interleaved else torch.cat([gate, up], 1)
                for weights in (None, w):
                    args = (grad, x, weights, interleaved)
                    assert same_bits(kernel(*args)[0], moe_silu_and_mul_backward.native(*args)[0]), args[2:]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@LAYOUT
def test_gpu_compiled_forward_and_backward(interleaved, dtype):
    """torch.compile(fullgraph=True) of the forward (Inductor): the backward graph holds the backward op's
    kernel; d gateup keeps eager autograd's bits, d row_weights its contract."""
    split, inter, w = pair(83, 768, dtype, "cuda")
    x, grad = (inter if interleaved else split), torch.randn(83, 768, device="cuda").to(dtype)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: moe_silu_and_mul(a, b, interleaved), fullgraph=True)
    leaves = (x.clone().requires_grad_(True), w.clone().requires_grad_(True))
    got = torch.autograd.grad(compiled(*leaves), leaves, grad)
    want = eager_autograd(grad, x, w, interleaved)
    assert same_bits(got[0], want[0])
    assert_within_contract(got, want, (grad, x, w, interleaved), "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gpu_warmup_then_cuda_graph_of_forward_and_backward(dtype):
    """After warmup, a CUDA graph of forward + backward (autograd inside the capture) compiles nothing and
    replays: d gateup with eager autograd's bits, d row_weights the kernel's own eager result."""
    N, M = 768, 8
    exactfuse.warmup(["moe_silu_and_mul", "moe_silu_and_mul_backward"], dtypes=(dtype,), widths=(N,))
    watch = CompileWatch(moe_gated_kernel.moe_silu_and_mul_kernel, moe_gated_kernel.moe_silu_and_mul_backward_kernel)
    static_x = torch.randn(M, 2 * N, device="cuda", dtype=dtype)
    static_w = torch.rand(M, device="cuda")
    static_grad = torch.randn(M, N, device="cuda", dtype=dtype)

    def step():
        x, w = static_x.detach().requires_grad_(True), static_w.detach().requires_grad_(True)
        dx, dw = torch.autograd.grad(moe_silu_and_mul(x, w, True), [x, w], static_grad)
        (dx_plain,) = torch.autograd.grad(moe_silu_and_mul(x, None, False), x, static_grad)
        return dx, dw, dx_plain

    graph, static_out = capture(step)
    assert watch.new() == [[], []], f"compiled during capture:\n{watch}"
    for _ in range(3):
        static_x.copy_(torch.randn_like(static_x))
        static_w.copy_(torch.rand_like(static_w))
        static_grad.copy_(torch.randn_like(static_grad))
        graph.replay()
        want_dx, _ = eager_autograd(static_grad, static_x, static_w, True)
        assert same_bits(static_out[0], want_dx)
        assert same_bits(static_out[1], kernel(static_grad, static_x, static_w, True)[1])
        assert same_bits(static_out[2], eager_autograd(static_grad, static_x, None, False)[0])


@pytest.mark.gpu
@pytest.mark.big_memory
@LAYOUT
def test_gpu_int64_offsets(interleaved):
    """d gateup of 2**31 + 16384 elements: 64-bit offsets; the first and last rows checked."""
    M, N = 2**20 + 8, 1024
    x = torch.randn((M, 2 * N), dtype=torch.bfloat16, device="cuda")
    grad = torch.randn((M, N), dtype=torch.bfloat16, device="cuda")
    w = torch.rand((M,), device="cuda")
    dx, dw = kernel(grad, x, w, interleaved)
    for rows in (slice(0, 64), slice(M - 64, M)):
        want = moe_silu_and_mul_backward.native(grad[rows], x[rows], w[rows], interleaved)
        assert same_bits(dx[rows], want[0])
        assert_within_contract((dx[rows], dw[rows]), want, (grad[rows], x[rows], w[rows], interleaved), "cuda")
