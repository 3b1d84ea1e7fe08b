"""moe_silu_and_mul_backward: the spec against eager autograd bit for bit (zero signs and the row weights'
reduction included), the kernel against the spec under its contract (d gateup Bitwise on CUDA, d
row_weights Float64Relative), layouts, options, dispatch from the forward's autograd formula, errors,
fallbacks, torch.compile; the GPU tests in ``test_moe_backward_gpu.py``."""

import pytest
import torch

import exactfuse
from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul, moe_silu_and_mul_backward
from exactfuse.testing import assert_contract_matrix
from support.bits import SHORT, same_bits
from support.moe import LAYOUT, pair
from support.moe_backward import assert_within_contract, eager_autograd, edge_calls, kernel

INTERP_DTYPES = pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])


# ----------------------------------------------------------------- the spec is eager autograd
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_spec_is_eager_autograd_bit_for_bit(dtype):
    """Both gradients have eager autograd's bits on every quick case, the sign of zero included (autograd
    sums the gate's and up's gradients into zeros of gateup's shape, so d gateup holds +0 where a half's
    gradient is -0), and the row weights' gradient is the same reduction (the broadcast's sum over the
    columns)."""
    ran = 0
    for case in moe_silu_and_mul_backward.cases("cpu", dtype, quick=True):
        grad = case.args[0]
        if not grad.numel():
            continue
        want_dx, want_dw = eager_autograd(*case.args)
        dx, dw = moe_silu_and_mul_backward.native(*case.args)
        assert same_bits(dx, want_dx), case.id
        assert dw.numel() == 0 if want_dw is None else same_bits(dw, want_dw), case.id
        ran += 1
    assert ran > 15  # the quick set: 19 cases with a gradient per dtype


def test_spec_stores_positive_zero():
    """A zero gradient of the gate or up half is +0 in d gateup, as autograd's sum of the halves makes it."""
    x = torch.tensor([[-200.0, 0.0, 1.0, -0.0], [2.0, -1.0, -0.0, 3.0]])
    grad = torch.tensor([[1.0, -0.0], [-0.0, 0.0]])
    want, _ = eager_autograd(grad, x)
    got, _ = moe_silu_and_mul_backward.native(grad, x)
    assert (want == 0).sum() >= 4 and not torch.signbit(want[want == 0]).any() and same_bits(got, want)


# ----------------------------------------------------------------- kernel against the spec
@pytest.mark.interpreter
@INTERP_DTYPES
def test_interpreter_contract(dtype):
    """Every quick case (M = 0 .. 7, N = 7 .. 1024, both layouts, no / fp32 / input-dtype weights, an fp32
    output of half inputs, NaN/Inf/zeros/subnormals, wide range, row-strided gateup and gradient)."""
    assert_contract_matrix(moe_silu_and_mul_backward, "cpu", dtype, quick=True)


@pytest.mark.interpreter
@INTERP_DTYPES
def test_interpreter_edge_values(dtype):
    for args in edge_calls(dtype):
        assert_within_contract(kernel(*args), moe_silu_and_mul_backward.native(*args), args, "cpu")


@pytest.mark.interpreter
def test_interpreter_kernel_stores_positive_zero_as_autograd_does():
    """Exact inputs (sigmoid(0) = 0.5, sigmoid(-200) = 0): the kernel's zeros are eager autograd's +0."""
    x = torch.tensor([[-200.0, 0.0, 1.0, -0.0], [2.0, -1.0, -0.0, 3.0]])
    grad = torch.tensor([[1.0, -0.0], [-0.0, 0.0]])
    for interleaved in (False, True):
        want, _ = eager_autograd(grad, x, None, interleaved)
        got, _ = kernel(grad, x, None, interleaved)
        assert same_bits(got, want), interleaved


@pytest.mark.interpreter
@INTERP_DTYPES
@pytest.mark.parametrize(("M", "N"), [(1, 7), (7, 384), (5, 2500), (33, 960)], ids=str)
def test_interpreter_layouts_agree_and_runs_are_identical(M, N, dtype):
    """Both layouts give the same gradients (d gateup rearranged), bit for bit, d row_weights included (the
    same sum order per row; N = 2500 sums three column tiles); three runs are identical."""
    split, inter, w = pair(M, N, dtype)
    grad = torch.randn(M, N).to(dtype)
    for weights in (None, w):
        dx_s, dw_s = kernel(grad, split, weights, False)
        dx_i, dw_i = kernel(grad, inter, weights, True)
        assert torch.equal(torch.cat([dx_i[:, 0::2], dx_i[:, 1::2]], dim=1), dx_s)
        assert same_bits(dw_i, dw_s)
        for _ in range(2):
            dx, dw = kernel(grad, inter, weights, True)
            assert same_bits(dx, dx_i) and same_bits(dw, dw_i)
        assert_within_contract(
            (dx_s, dw_s), moe_silu_and_mul_backward.native(grad, split, weights), (grad, split, weights), "cpu"
        )


@pytest.mark.interpreter
def test_interpreter_options():
    """Input-dtype weights, an fp32 gradient of an fp16 gateup (out_dtype), row-strided gateup, gradient and
    weights, and N = 0 (an empty sum: zero weight gradients)."""
    split, inter, w = pair(6, 64, torch.float16)
    grad32 = torch.randn(6, 64)
    for args in ((grad32, inter, w.half(), True, torch.float32), (grad32.half(), split, w.half(), False)):
        assert_within_contract(kernel(*args), moe_silu_and_mul_backward.native(*args), args, "cpu")
    base, gbase = torch.randn(6, 2 * 80), torch.randn(6, 70)
    x, grad, weights = base[:, : 2 * 64], gbase[:, :64], torch.rand(6, 3)[:, 1]
    got = kernel(grad, x, weights, True)
    assert all(
        same_bits(a, b)
        for a, b in zip(got, kernel(grad.contiguous(), x.contiguous(), weights.contiguous(), True), strict=True)
    )
    dx, dw = kernel(torch.randn(3, 0), torch.randn(3, 0), torch.rand(3), False)
    assert dx.shape == (3, 0) and torch.equal(dw, torch.zeros(3))
    dx, dw = kernel(torch.randn(0, 5), torch.randn(0, 10), None, False)
    assert dx.shape == (0, 10) and dw.shape == (0,)


# ----------------------------------------------------------------- dispatch from the forward op
@pytest.mark.interpreter
@LAYOUT
def test_forward_gradient_runs_the_backward_op_through_the_registry(interleaved):
    """The forward's autograd formula calls the backward op: with its priority set to the kernel the
    gradients are the kernel's bit for bit (on CUDA that is the default), with native the spec's."""
    split, inter, w = pair(7, 96, torch.float32)
    x = inter if interleaved else split
    grad = torch.randn(7, 96)
    for order in (["triton"], ["native"]):
        want = moe_silu_and_mul_backward.run_provider(order[0], grad, x, w, interleaved)
        leaf_x, leaf_w = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        with moe_silu_and_mul_backward.priority(order):
            got = torch.autograd.grad(moe_silu_and_mul(leaf_x, leaf_w, interleaved), [leaf_x, leaf_w], grad)
        assert all(same_bits(g, e) for g, e in zip(got, want, strict=True)), order
    leaf_x = x.clone().requires_grad_(True)  # weights that need no gradient, and no weights
    for weights in (w, None):
        (got,) = torch.autograd.grad(moe_silu_and_mul(leaf_x, weights, interleaved), leaf_x, grad)
        assert same_bits(got, eager_autograd(grad, x, weights, interleaved)[0])


@pytest.mark.interpreter
def test_expanded_gradient_falls_back_to_native():
    """``y.sum()``'s gradient is an expanded tensor (strides 0): the kernel declines it, native runs."""
    x, w = torch.randn(6, 32), torch.rand(6)
    grad = torch.ones(()).expand(6, 16)
    with moe_silu_and_mul_backward.priority(["triton", "native"]):
        assert moe_silu_and_mul_backward.select(grad, x, w).name == "native"
    assert "grad has strides (0, 0)" in moe_silu_and_mul_backward.providers["triton"].accepts(grad, x, w)
    leaf = x.clone().requires_grad_(True)
    (got,) = torch.autograd.grad(moe_silu_and_mul(leaf, w).sum(), leaf)
    assert same_bits(got, eager_autograd(grad, x, w)[0])


@pytest.mark.interpreter
def test_interpreter_declines_bf16_anywhere():
    x, grad = torch.randn(2, 8), torch.randn(2, 4)
    provider = moe_silu_and_mul_backward.providers["triton"]
    assert provider.accepts(grad, x, torch.rand(2), True) is True
    assert provider.accepts(grad.bfloat16(), x, None, True, torch.bfloat16) is not True
    assert provider.accepts(grad.bfloat16(), x.bfloat16(), None, True) is not True


def test_second_derivative():
    """The backward op is differentiable through the VJP of its spec: create_graph works, the first
    derivative equals eager's, and the second is close to eager's double backward."""
    split, _, w = pair(4, 16, torch.float32)
    ours = (split.clone().requires_grad_(True), w.clone().requires_grad_(True))
    ref = (split.clone().requires_grad_(True), w.clone().requires_grad_(True))
    g1 = torch.autograd.grad(moe_silu_and_mul(*ours).square().sum(), ours, create_graph=True)
    g2 = torch.autograd.grad(moe_silu_and_mul.native(*ref).square().sum(), ref, create_graph=True)
    assert all(same_bits(a, b) for a, b in zip(g1, g2, strict=True))
    second = torch.autograd.grad(sum(g.sum() for g in g1), ours)
    torch.testing.assert_close(second, torch.autograd.grad(sum(g.sum() for g in g2), ref))


@pytest.mark.parametrize("interleaved", [False, True], ids=["split", "inter"])
def test_compiled_forward_and_backward_equal_eager_autograd(interleaved):
    """torch.compile(fullgraph=True) of the forward; the compiled backward graph calls the backward op."""
    split, inter, w = pair(7, 31, torch.float32)
    x, grad = (inter if interleaved else split), torch.randn(7, 31)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: moe_silu_and_mul(a, b, interleaved), fullgraph=True, backend="aot_eager")
    leaves = (x.clone().requires_grad_(True), w.clone().requires_grad_(True))
    got = torch.autograd.grad(compiled(*leaves), leaves, grad)
    assert all(same_bits(a, b) for a, b in zip(got, eager_autograd(grad, x, w, interleaved), strict=True))


def test_opcheck():
    split, inter, w = pair(6, 48, torch.float32)
    grad = torch.randn(6, 48)
    for args in ((grad, split, None, False, None), (grad, inter, w, True, None)):
        torch.library.opcheck(moe_silu_and_mul_backward.torch_op, args)


# ----------------------------------------------------------------- errors, declaration
_HALF_OUT_FP16 = (torch.randn(3, 4), torch.randn(3, 8).half(), None, False, torch.float16)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.randn(3, 5), torch.randn(3, 8)), ValueError, r"grad must have the output's shape \[3, 4\], got"),
        ((torch.randn(3, 4).half(), torch.randn(3, 8)), TypeError, "grad must have the output's dtype torch.float32"),
        (_HALF_OUT_FP16, TypeError, "grad must have the output's dtype torch.float16"),
        ((torch.randn(3, 4), torch.randn(3, 7)), ValueError, "gateup's last dimension must be even"),
        ((torch.randn(3, 4), torch.randn(3, 8), torch.rand(2)), ValueError, r"row_weights must be \[M\] = \[3\]"),
        (([1.0], torch.randn(3, 8)), TypeError, "grad must be a torch.Tensor, got list"),
    ],
    ids=["shape", "dtype", "out-dtype", "odd", "weights", "not-a-tensor"],
)  # fmt: skip
def test_errors_name_the_argument(args, error, match):
    with pytest.raises(error, match=f"moe_silu_and_mul_backward: {match}"):
        moe_silu_and_mul_backward(*args)


def test_declared_for_list_verify_warmup_bench():
    assert exactfuse.get("moe_silu_and_mul_backward") is moe_silu_and_mul_backward
    assert moe_silu_and_mul_backward.warmup_fn is not None
    assert {"default", "quick"} <= set(moe_silu_and_mul_backward.grids)
    case = next(iter(moe_silu_and_mul_backward.grids["quick"](torch.device("meta"), torch.bfloat16)))
    grad, x, w = case.args[:3]
    assert grad.shape == (x.shape[0], x.shape[1] // 2)
    expected = grad.numel() * 2 + 2 * x.numel() * 2 + (0 if w is None else 2 * w.numel() * 4)  # read, read + write
    assert moe_silu_and_mul_backward.bytes_fn(*case.args) == expected


def test_backward_op_keeps_the_graph():
    """The backward op is differentiable (the VJP of its spec): an input that requires grad is kept."""
    leaf = torch.randn(3, 8, requires_grad=True)
    dx, dw = moe_silu_and_mul_backward(torch.randn(3, 4), leaf)
    assert dx.requires_grad and dw.shape == (0,)


@pytest.mark.interpreter
def test_interpreter_warmup_runs_the_launcher():
    assert exactfuse.warmup("moe_silu_and_mul_backward", dtypes=(torch.float16,), device="cpu", widths=(16,)) == [
        "moe_silu_and_mul_backward"
    ]
