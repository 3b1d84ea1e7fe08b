"""The gated activations' backward ops (silu_and_mul_backward, gelu_and_mul_backward, silu_mul_backward,
gelu_mul_backward): the spec against eager autograd bit for bit, the kernel against the spec under its
contract, dispatch from the forward ops' autograd formulas, errors, fallbacks, CUDA graphs, torch.compile.
"""

import pytest
import torch

import exactfuse
from exactfuse.ops.act_and_mul import (
    gated_kernel,
    gelu_and_mul,
    gelu_and_mul_backward,
    gelu_mul,
    gelu_mul_backward,
    silu_and_mul,
    silu_and_mul_backward,
    silu_mul,
    silu_mul_backward,
)
from exactfuse.ops.act_and_mul import launch as act_launch
from exactfuse.registry import InferenceOnlyError
from exactfuse.testing import CompileWatch, assert_contract_matrix, clone_args
from exactfuse.testing.calls import clone_value
from support.bits import SHORT, same_bits
from support.graph import capture

# backward op -> its forward op and the forward's differentiable arguments
BACKWARD = {
    "silu_and_mul_backward": (silu_and_mul_backward, silu_and_mul, ("x",)),
    "gelu_and_mul_backward": (gelu_and_mul_backward, gelu_and_mul, ("x",)),
    "silu_mul_backward": (silu_mul_backward, silu_mul, ("gate", "up")),
    "gelu_mul_backward": (gelu_mul_backward, gelu_mul, ("gate", "up")),
}


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _eager_autograd(forward, grad, inputs: dict, names) -> tuple[torch.Tensor, ...]:
    """Eager autograd's gradients of the forward op's native spec."""
    leaves = {k: clone_value(v.detach()).requires_grad_(True) if k in names else v for k, v in inputs.items()}
    out = forward.native(**leaves)
    return torch.autograd.grad(out, [leaves[n] for n in names], grad)


def _forward_inputs(backward, case) -> tuple[torch.Tensor, dict]:
    """A backward case ``(grad, *inputs)`` as the gradient and the forward op's arguments by name."""
    bound = backward.signature.bind(*case.args, **case.kwargs)
    args = dict(bound.arguments)
    return args.pop("grad"), args


# ----------------------------------------------------------------- the spec is eager autograd
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_spec_is_eager_autograd_bit_for_bit(name, dtype):
    """The written-out gradient has eager autograd's bits, the sign of zero included (autograd sums the
    halves of ``x`` into zeros, so ``dx`` holds +0 where a half's gradient is -0)."""
    backward, forward, names = BACKWARD[name]
    for case in backward.cases("cpu", dtype, quick=True):
        grad, inputs = _forward_inputs(backward, case)
        if not grad.numel():
            continue
        want = _eager_autograd(forward, grad, inputs, names)
        got = _as_tuple(backward.native(*case.args, **case.kwargs))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert same_bits(g, w), f"{name} {case.id}"


# ----------------------------------------------------------------- kernel against the spec
@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_interpreter_contract(name, dtype):
    """Every quick case (T in {0, 1, 7}, odd widths, N-D, NaN/Inf/zeros/subnormals, wide range, the
    halves of one tensor, gradients as strided rows): the kernel meets the interpreter contract."""
    assert_contract_matrix(BACKWARD[name][0], "cpu", dtype, quick=True)


def _edge_inputs(dtype, up_scale=30.0, grad_scale=4.0):
    """Gate values at the edges (NaN, +-Inf, +-0, subnormals, |g| large enough that the activation
    underflows or saturates, the cancellation region of GELU's derivative) against signs, zeros and scales
    of up and of the gradient, as ``gate, up, grad [n, 8]``, each a column slice of a wider tensor (rows
    11 apart). On the CPU, through Tolerance, the gradient times up stays below 120: the CPU's erf and
    tanh are off from CUDA's by an ulp of ``1 + erf`` in the cancellation region (relative 2e-5 at g = -3),
    which an absolute tolerance cannot hold for any size of the product; on CUDA the scales are 1e4."""
    tiny = torch.finfo(dtype).smallest_normal / 4
    big = min(torch.finfo(dtype).max, 1e30)
    gates = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, tiny, -tiny, 1e-3, -1e-3, 3.0, -3.0, 9.0, -9.0,
             20.0, -20.0, 100.0, -100.0, 1e4, -1e4, big, -big, -5.543]  # fmt: skip
    ups = [1.0, -1.0, 0.0, -0.0, up_scale, -up_scale, 0.5, float("nan")]
    grads = [1.0, -1.0, 0.0, -0.0, grad_scale, -grad_scale, 2.0, -0.5]
    g = torch.tensor(gates).repeat_interleave(len(ups))
    u = torch.tensor(ups).repeat(len(gates))
    dy = torch.tensor(grads).repeat(len(gates))
    wide = [torch.zeros(len(gates) * len(ups) // 8, 11, dtype=dtype) for _ in range(3)]
    for w, t in zip(wide, (g, u, dy), strict=True):
        w[:, :8] = t.reshape(-1, 8).to(dtype)
    return tuple(w[:, :8] for w in wide)


def _edge_calls(name, dtype, device="cpu", **scales):
    gate, up, grad = (t.to(device) for t in _edge_inputs(dtype, **scales))
    args = (grad, gate, up) if name in ("silu_mul_backward", "gelu_mul_backward") else (grad, torch.cat([gate, up], -1))
    for approximate in ("none", "tanh") if name.startswith("gelu") else (None,):
        yield args, ({} if approximate is None else {"approximate": approximate})


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_interpreter_edge_values(name, dtype):
    backward = BACKWARD[name][0]
    for args, kwargs in _edge_calls(name, dtype):
        expected = _as_tuple(backward.native(*args, **kwargs))
        with exactfuse.poison_outputs():
            got = _as_tuple(backward.run_provider("triton", *args, **kwargs))
        contract = backward.contract_for(dtype, "cpu")
        for g, e in zip(got, expected, strict=True):
            result = contract.check(g, e)
            assert result.passed, f"{kwargs}: {result.summary()}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_gpu_edge_values_bitwise(name, dtype):
    backward = BACKWARD[name][0]
    for args, kwargs in _edge_calls(name, dtype, "cuda", up_scale=1e4, grad_scale=1e3):
        expected = _as_tuple(backward.native(*args, **kwargs))
        with exactfuse.poison_outputs():
            got = _as_tuple(backward.run_provider("triton", *args, **kwargs))
        assert all(same_bits(g, e) for g, e in zip(got, expected, strict=True)), kwargs


@pytest.mark.interpreter
@pytest.mark.parametrize("name", ["silu_and_mul_backward", "gelu_and_mul_backward"])
def test_kernel_stores_positive_zero_in_dx_as_autograd_does(name):
    """gate -200 (silu and gelu underflow to -0) and a positive gradient: eager autograd's dx is +0."""
    backward, forward, names = BACKWARD[name]
    x = torch.tensor([[-200.0, -200.0, 0.0, 2.0], [1.0, -0.0, -1.0, -0.0]])
    grad = torch.tensor([[1.0, 1.0], [-0.0, 1.0]])
    (want,) = _eager_autograd(forward, grad, {"x": x}, names)
    got = backward.run_provider("triton", grad, x)
    assert (want == 0).any() and same_bits(got, want)


# ----------------------------------------------------------------- dispatch from the forward ops
@pytest.mark.interpreter
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_forward_gradient_runs_the_backward_op_through_the_registry(name):
    """The forward op's autograd formula calls the backward op: with the backward op's priority set to
    the kernel, the gradient is the kernel's output bit for bit (on CUDA that is the default)."""
    backward, forward, names = BACKWARD[name]
    case = next(
        c for c in backward.cases("cpu", torch.float32, quick=True) if c.id.startswith(("T7-d31", "none-T7-d31"))
    )
    grad, inputs = _forward_inputs(backward, case)
    kernel = _as_tuple(backward.run_provider("triton", *case.args, **case.kwargs))
    spec = _as_tuple(backward.native(*case.args, **case.kwargs))
    for order, want in ((["triton"], kernel), (["native"], spec)):
        leaves = {k: v.detach().clone().requires_grad_(True) if k in names else v for k, v in inputs.items()}
        with backward.priority(order):
            got = torch.autograd.grad(forward(**leaves), [leaves[n] for n in names], grad)
        assert all(same_bits(g, w) for g, w in zip(got, want, strict=True)), order


@pytest.mark.interpreter
def test_expanded_gradient_falls_back_to_native():
    """``y.sum()``'s gradient is an expanded tensor (strides 0): the kernel declines it, native runs."""
    x = torch.randn(6, 32)
    grad = torch.ones(()).expand(6, 16)
    with silu_and_mul_backward.priority(["triton", "native"]):
        assert silu_and_mul_backward.select(grad, x).name == "native"
    assert "grad has strides (0, 0)" in silu_and_mul_backward.providers["triton"].accepts(grad, x)
    leaf = x.clone().requires_grad_(True)
    (got,) = torch.autograd.grad(silu_and_mul(leaf).sum(), leaf)
    assert same_bits(got, _eager_autograd(silu_and_mul, grad, {"x": x}, ("x",))[0])


@pytest.mark.interpreter
def test_strided_rows_use_the_kernel():
    base = torch.randn(5, 40)
    x, grad = base[:, :32], torch.randn(5, 20)[:, :16]
    with silu_and_mul_backward.priority(["triton"]):
        assert silu_and_mul_backward.select(grad, x).name == "triton"
    gate, up = base[:, :16], base[:, 16:32]
    assert silu_mul_backward.providers["triton"].accepts(grad, gate, up) is True


def test_non_contiguous_input_falls_back_to_native():
    x = torch.randn(3, 4, 16).transpose(0, 1)
    grad = torch.randn(4, 3, 8)
    with silu_and_mul_backward.priority(["triton", "native"]):
        assert silu_and_mul_backward.select(grad, x).name == "native"
        assert same_bits(silu_and_mul_backward(grad, x), silu_and_mul_backward.native(grad, x))


def test_second_derivative():
    """GELU: the backward op's gradient is the VJP of its spec, so create_graph works and equals eager; SiLU:
    ATen has no derivative of silu_backward: a double backward is refused, naming the op and its backward op."""
    x = torch.randn(4, 16, dtype=torch.float64).float()
    for approximate in ("none", "tanh"):
        ours, ref = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        (g1,) = torch.autograd.grad(gelu_and_mul(ours, approximate).square().sum(), ours, create_graph=True)
        (g2,) = torch.autograd.grad(gelu_and_mul.native(ref, approximate).square().sum(), ref, create_graph=True)
        assert same_bits(g1, g2)
        # second order: autograd of the written-out gradient, whose contributions to x are summed in
        # another order than eager's double backward: close, not bitwise
        torch.testing.assert_close(torch.autograd.grad(g1.sum(), ours)[0], torch.autograd.grad(g2.sum(), ref)[0])
    leaf = x.clone().requires_grad_(True)
    refused = r"double backward .* of silu_and_mul is not supported: its backward, silu_and_mul_backward, has no"
    with pytest.raises(InferenceOnlyError, match=refused):
        torch.autograd.grad(silu_and_mul(leaf).sum(), leaf, create_graph=True)


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_compiled_forward_and_backward_equal_eager_autograd(name):
    """torch.compile(fullgraph=True) of the forward; the compiled backward graph calls the backward op."""
    backward, forward, names = BACKWARD[name]
    case = next(c for c in backward.cases("cpu", torch.float32, quick=True) if "T7-d31" in c.id)
    grad, inputs = _forward_inputs(backward, case)
    torch._dynamo.reset()
    compiled = torch.compile(lambda **kw: forward(**kw), fullgraph=True, backend="aot_eager")
    leaves = {k: v.detach().clone().requires_grad_(True) if k in names else v for k, v in inputs.items()}
    got = torch.autograd.grad(compiled(**leaves), [leaves[n] for n in names], grad)
    want = _eager_autograd(forward, grad, inputs, names)
    assert all(same_bits(g, w) for g, w in zip(got, want, strict=True))


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (torch.randn(3, 5), torch.randn(3, 8)),
            ValueError,
            r"grad must have the output's shape \[3, 4\], got \[3, 5\]",
        ),
        ((torch.randn(3, 4).half(), torch.randn(3, 8)), TypeError, "grad must have the input's dtype torch.float32"),
        ((torch.randn(3, 4), torch.randn(3, 7)), ValueError, "x's last dimension must be even"),
        (([1.0], torch.randn(3, 8)), TypeError, "grad must be a torch.Tensor, got list"),
    ],
    ids=["shape", "dtype", "odd-x", "not-a-tensor"],
)
def test_errors_name_the_argument(args, error, match):
    with pytest.raises(error, match=f"silu_and_mul_backward: {match}"):
        silu_and_mul_backward(*args)


def test_gate_up_backward_errors_name_the_argument():
    g = torch.randn(3, 8)
    with pytest.raises(ValueError, match=r"gelu_mul_backward: grad must have the output's shape \[3, 8\]"):
        gelu_mul_backward(torch.randn(3, 4), g, g)
    with pytest.raises(ValueError, match=r"silu_mul_backward: up must have gate's shape"):
        silu_mul_backward(g, g, torch.randn(3, 4))
    with pytest.raises(ValueError, match="gelu_mul_backward: approximate must be 'none' or 'tanh'"):
        gelu_mul_backward(g, g, g, "fast")


# ----------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_gpu_bitwise_matrix(name, dtype):
    """The full case set (T up to 2048, d up to 13824, N-D, specials, wide range, strided rows, halves)."""
    assert_contract_matrix(BACKWARD[name][0], "cuda", dtype, quick=False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_gpu_gradient_is_eager_autograd_bitwise(name, dtype):
    """The forward op's gradient on CUDA runs the kernel and has eager autograd's bits (zero signs too)."""
    backward, forward, names = BACKWARD[name]
    for case in backward.iter_cases("cuda", dtype, quick=False):
        grad, inputs = _forward_inputs(backward, case)
        if not grad.numel():
            continue
        assert backward.select(*case.args, **case.kwargs).name == "triton", case.id
        leaves = {k: v.detach().clone().requires_grad_(True) if k in names else v for k, v in inputs.items()}
        got = torch.autograd.grad(forward(**leaves), [leaves[n] for n in names], grad)
        want = _eager_autograd(forward, grad, inputs, names)
        assert all(same_bits(g, w) for g, w in zip(got, want, strict=True)), f"{name} {case.id}"


@pytest.mark.gpu
@pytest.mark.big_memory
def test_gpu_int64_offsets():
    """dx of 2**31 + elements: 64-bit offsets; the last rows must be right."""
    T, d = 32768 + 3, 32768
    x = torch.randn(T, 2 * d, dtype=torch.bfloat16, device="cuda")
    grad = torch.randn(T, d, dtype=torch.bfloat16, device="cuda")
    with exactfuse.poison_outputs():
        dx = act_launch.silu_and_mul_backward_triton(grad, x)
    for rows in (slice(0, 64), slice(T - 64, T)):
        assert same_bits(dx[rows], silu_and_mul_backward.native(grad[rows], x[rows]))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_gpu_compiled_forward_and_backward_bitwise(name, dtype):
    """torch.compile(fullgraph=True) of the forward (Inductor): the backward graph holds the backward
    op's kernel, and the gradients keep eager autograd's bits."""
    backward, forward, names = BACKWARD[name]
    case = next(c for c in backward.iter_cases("cuda", dtype, quick=False) if "T83-d768" in c.id)
    grad, inputs = _forward_inputs(backward, case)
    torch._dynamo.reset()
    compiled = torch.compile(lambda **kw: forward(**kw), fullgraph=True)
    leaves = {k: v.detach().clone().requires_grad_(True) if k in names else v for k, v in inputs.items()}
    got = torch.autograd.grad(compiled(**leaves), [leaves[n] for n in names], grad)
    want = _eager_autograd(forward, grad, inputs, names)
    assert all(same_bits(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gpu_warmup_then_cuda_graph_of_forward_and_backward(dtype):
    """After warmup, a CUDA graph of forward + backward (autograd inside the capture) compiles nothing and
    replays eager autograd's bits."""
    d, T = 352, 8
    exactfuse.warmup([*BACKWARD, "silu_and_mul", "gelu_and_mul", "silu_mul", "gelu_mul"], dtypes=(dtype,), widths=(d,))
    watch = CompileWatch(gated_kernel.act_and_mul_kernel, gated_kernel.act_and_mul_backward_kernel)
    static_x = torch.randn(T, 2 * d, device="cuda", dtype=dtype)
    static_grad = torch.randn(T, d, device="cuda", dtype=dtype)

    def step():
        x = static_x.detach().requires_grad_(True)
        gate, up = static_x[:, :d].detach().requires_grad_(True), static_x[:, d:].detach().requires_grad_(True)
        (dx1,) = torch.autograd.grad(silu_and_mul(x), x, static_grad)
        (dx2,) = torch.autograd.grad(gelu_and_mul(x, "tanh"), x, static_grad)
        dg, du = torch.autograd.grad(gelu_mul(gate, up), [gate, up], static_grad)
        ds, dv = torch.autograd.grad(silu_mul(gate, up), [gate, up], static_grad)
        return dx1, dx2, dg, du, ds, dv

    graph, static_out = capture(step)
    assert watch.new() == [[], []], f"compiled during capture:\n{watch}"
    for _ in range(3):
        static_x.copy_(torch.randn_like(static_x))
        static_grad.copy_(torch.randn_like(static_grad))
        graph.replay()
        gate, up = static_x[:, :d], static_x[:, d:]
        want = (
            *_eager_autograd(silu_and_mul, static_grad, {"x": static_x}, ("x",)),
            *_eager_autograd(gelu_and_mul, static_grad, {"x": static_x, "approximate": "tanh"}, ("x",)),
            *_eager_autograd(gelu_mul, static_grad, {"gate": gate, "up": up}, ("gate", "up")),
            *_eager_autograd(silu_mul, static_grad, {"gate": gate, "up": up}, ("gate", "up")),
        )
        assert all(same_bits(g, w) for g, w in zip(static_out, want, strict=True))


@pytest.mark.gpu
def test_gpu_every_16_bit_gate_bitwise():
    """Every fp16 and bf16 gate value against every sign and scale of the gradient: the kernel's
    silu_backward / gelu_backward equal ATen's bit for bit."""
    for dtype in (torch.float16, torch.bfloat16):
        gate = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype).cuda()
        for scale in (1.0, -3.0, 1e-3):
            grad = torch.full_like(gate, scale)
            up = torch.randn_like(gate)
            for name in ("silu_mul_backward", "gelu_mul_backward"):
                backward = BACKWARD[name][0]
                for kwargs in ({},) if name.startswith("silu") else ({"approximate": "none"}, {"approximate": "tanh"}):
                    args, kw = clone_args((grad, gate, up), kwargs)
                    got = backward.run_provider("triton", *args, **kw)
                    want = backward.native(grad, gate, up, **kwargs)
                    assert all(same_bits(g, w) for g, w in zip(got, want, strict=True)), (name, dtype, scale, kwargs)
