"""The gradient rule (docs/contracts.md, Gradients): every op either has a backward, whose gradient is
eager autograd's of the native spec, or refuses an input that requires grad before computing."""

from __future__ import annotations

import itertools

import pytest
import torch

import exactfuse
from exactfuse.registry import OPS, Bitwise, InferenceOnlyError, op
from exactfuse.registry.platform import triton_available

DIFFERENTIABLE = {
    "silu_and_mul": ("x",),
    "gelu_and_mul": ("x",),
    "silu_mul": ("gate", "up"),
    "gelu_mul": ("gate", "up"),
    "moe_silu_and_mul": ("gateup", "row_weights"),
    "gelu_and_mul_sparse": ("x",),
    "w4a16_gemm": ("a", "bias"),
    "w4a16_gemm_packed": ("a", "bias"),
    # GELU's and the MoE activation's backward ops: twice differentiable, through the VJP of their spec
    "gelu_and_mul_backward": ("grad", "x"),
    "gelu_mul_backward": ("grad", "gate", "up"),
    "moe_silu_and_mul_backward": ("grad", "gateup", "row_weights"),
    "causal_conv1d_fn": ("x", "weight", "bias", "initial_states"),
}
# Gradients whose backward kernel sums in its own order, held to the backward op's contract for that output
# instead of eager's bits where the kernel runs: (op, input) -> (backward op, its output index, devices)
SUM_ORDER_GRADIENTS = {
    ("moe_silu_and_mul", "row_weights"): ("moe_silu_and_mul_backward", 1, ("cuda",)),
    ("causal_conv1d_fn", "x"): ("causal_conv1d_fn_backward", 0, ("cpu", "cuda")),
    ("causal_conv1d_fn", "weight"): ("causal_conv1d_fn_backward", 1, ("cpu", "cuda")),
    ("causal_conv1d_fn", "bias"): ("causal_conv1d_fn_backward", 2, ("cpu", "cuda")),
    ("causal_conv1d_fn", "initial_states"): ("causal_conv1d_fn_backward", 3, ("cpu", "cuda")),
}
INFERENCE_ONLY = (
    "short_conv",
    "causal_conv1d",
    "causal_conv1d_update",
    "sparse_paged_attention",
    "silu_and_mul_backward",  # ATen has no derivative of silu_backward
    "silu_mul_backward",
    "causal_conv1d_fn_backward",  # the VJP of the spec as its spec: no second derivative declared
)


def test_every_op_is_classified():
    assert set(OPS) == set(DIFFERENTIABLE) | set(INFERENCE_ONLY)
    for name, inputs in DIFFERENTIABLE.items():
        assert OPS[name].grad_inputs == inputs
    for name in INFERENCE_ONLY:
        assert OPS[name].grad_inputs == ()


def _grad_cases(name: str, device: str = "cpu", dtype: torch.dtype | None = None, limit: int = 12):
    """Up to ``limit`` of the op's quick cases (specials included) as ``(case id, bound arguments, the
    differentiable tensors present)``; optional ones (``row_weights``, ``bias``) may be absent."""
    o = OPS[name]
    dtype = dtype or (torch.float32 if torch.float32 in o.dtypes else torch.float16)
    found = []
    for case in o.cases(device, dtype, quick=True, seed=1):
        bound = o.signature.bind(*case.args, **case.kwargs)
        wanted = [n for n in o.grad_inputs if isinstance(bound.arguments.get(n), torch.Tensor)]
        if wanted and all(bound.arguments[n].numel() for n in wanted):
            found.append((case.id, bound, wanted))
    assert found, f"{name}: no quick case has a differentiable input"
    return found[:limit]


def _grad_case(name: str):
    """The first quick case that has every differentiable input."""
    o = OPS[name]
    for _, bound, wanted in _grad_cases(name, limit=1 << 10):
        if len(wanted) == len(o.grad_inputs):
            return o, bound, wanted
    pytest.fail(f"{name}: no quick case has every differentiable input")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, zero signs included (any NaN matching any NaN)."""
    if not (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())):
        return False
    return torch.equal(torch.signbit(a) & ~a.isnan(), torch.signbit(b) & ~b.isnan())


def _leaves(bound, names) -> dict:
    args = dict(bound.arguments)
    for n in names:
        args[n] = args[n].detach().clone().requires_grad_(True)
    return args


GRAD_DTYPES = (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32))
GRAD_RUNS = [
    *(pytest.param(name, "cpu", None, marks=pytest.mark.interpreter, id=f"{name}-interpreter")
      for name in sorted(DIFFERENTIABLE)),
    *(pytest.param(name, "cuda", dt, marks=pytest.mark.gpu, id=f"{name}-cuda-{n}")
      for name in sorted(DIFFERENTIABLE) for n, dt in GRAD_DTYPES if dt in OPS[name].dtypes),
]  # fmt: skip


@pytest.mark.parametrize("name, device, dtype", GRAD_RUNS)
def test_gradients_are_eager_autograd_of_the_native_spec(name, device, dtype):
    o = OPS[name]
    providers = ["triton", "native"] if "triton" in o.providers and triton_available() else ["native"]
    for case_id, bound, wanted in _grad_cases(name, device, dtype):
        ours, ref = _leaves(bound, wanted), _leaves(bound, wanted)
        with o.priority(providers):
            out = o(**ours)
        expected = o.native(**ref)
        outs, expected = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))  # a backward op's
        assert all(t.requires_grad for t in outs), f"{name} {case_id}: output dropped the graph"
        assert [(t.shape, t.dtype) for t in outs] == [(t.shape, t.dtype) for t in expected]
        # a backward op's empty output (moe_silu_and_mul_backward's d row_weights without row weights)
        # depends on no input in the spec: only the outputs of the spec's graph are differentiated
        kept = [i for i, t in enumerate(expected) if t.requires_grad]
        grads = [torch.randn_like(expected[i]) for i in kept]
        got = torch.autograd.grad([outs[i] for i in kept], [ours[n] for n in wanted], grads)
        want = torch.autograd.grad([expected[i] for i in kept], [ref[n] for n in wanted], grads)
        for n, g, w in zip(wanted, got, want, strict=True):
            backward, index, devices = SUM_ORDER_GRADIENTS.get((name, n), (None, 0, ()))
            if device in devices:
                args = (grads[0], *bound.args)
                outputs = len(OPS[backward].native(*args))
                contract = OPS[backward].contract_for(g.dtype, device).for_outputs(outputs)[index]
                result = contract.check(g, w, args=args, kwargs={})
                assert result.passed, f"{name} {case_id}: gradient of {n}: {result.summary()}"
                continue
            assert _same(g, w), f"{name} {case_id}: gradient of {n} differs from eager autograd of the spec"


def test_issue_snippet_output_requires_grad():
    x = torch.randn(4, 8, requires_grad=True)
    with exactfuse.get("silu_and_mul").priority(["triton" if triton_available() else "native"]):
        y = exactfuse.silu_and_mul(x)
    assert y.requires_grad
    (g,) = torch.autograd.grad(y.sum(), x)
    x2 = x.detach().requires_grad_()
    (ref,) = torch.autograd.grad(OPS["silu_and_mul"].native(x2).sum(), x2)
    assert torch.equal(g, ref)


@pytest.mark.parametrize("name", INFERENCE_ONLY)
def test_inference_only_ops_refuse_before_computing(name):
    o = OPS[name]
    case = next(iter(o.cases("cpu", torch.float16, quick=True)))
    bound = o.signature.bind(*case.args, **case.kwargs)
    first = next(n for n, v in bound.arguments.items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    args = dict(bound.arguments)
    args[first] = args[first].detach().clone().requires_grad_(True)
    before = {n: v.clone() for n, v in args.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(InferenceOnlyError, match=rf"{name} is inference-only .* {first} requires grad"):
        o(**args)
    for n, v in before.items():  # nothing written: mutated arguments keep their values
        now = args[n].detach()
        assert torch.equal(now.isnan(), v.isnan()) and torch.equal(now.nan_to_num(), v.nan_to_num()), n
    with torch.no_grad():  # the same call without grad mode runs
        o(**args)


def test_argument_without_a_gradient_is_named():
    o, bound, _ = _grad_case("w4a16_gemm")
    args = dict(bound.arguments)
    args["scales"] = args["scales"].detach().clone().requires_grad_(True)
    with pytest.raises(InferenceOnlyError, match="gradient only with respect to a, bias, but scales requires grad"):
        o(**args)


def test_no_grad_and_inference_mode_calls_skip_the_graph():
    x = torch.randn(3, 8, requires_grad=True)
    with torch.no_grad():
        assert not exactfuse.silu_and_mul(x).requires_grad
    with torch.inference_mode():
        assert not exactfuse.silu_and_mul(x).requires_grad


_names = itertools.count()


@pytest.fixture
def toy():
    """A throwaway op ``x * factor``, taken out of ``OPS`` afterwards (other tests list the real ops)."""
    name = f"test_autograd_toy_{next(_names)}"

    def native(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
        return x * factor

    native.__name__ = name
    yield op(native, contract=Bitwise())
    OPS.pop(name)


def test_torch_ops_call_of_an_inference_only_op_refuses(toy):
    o = toy
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(InferenceOnlyError, match="inference-only"):
        o.torch_op(x, 3.0)
    with pytest.raises(InferenceOnlyError, match="inference-only"):
        o(x, 3.0)


def test_declared_backward_is_used_through_torch_ops(toy):
    o = toy
    o.differentiable("x", backward=lambda grad, x, factor: (grad * factor * 10,))
    x = torch.randn(4, requires_grad=True)
    (g,) = torch.autograd.grad(o(x, 3.0).sum(), x)
    assert torch.equal(g, torch.full_like(x, 30.0))
    (g,) = torch.autograd.grad(o.torch_op(x, 3.0).sum(), x)
    assert torch.equal(g, torch.full_like(x, 30.0))


def test_differentiable_names_must_be_parameters(toy):
    o = toy
    with pytest.raises(ValueError, match="unknown parameters"):
        o.differentiable("y")


def test_compiled_call_keeps_the_gradient():
    x = torch.randn(6, 16, requires_grad=True)
    compiled = torch.compile(lambda t: exactfuse.silu_and_mul(t).sum(), fullgraph=True, dynamic=True)
    (g,) = torch.autograd.grad(compiled(x), x)
    x2 = x.detach().requires_grad_()
    (ref,) = torch.autograd.grad(OPS["silu_and_mul"].native(x2).sum(), x2)
    torch.testing.assert_close(g, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gpu_compiled_and_exported_calls_keep_the_gradient(dtype):
    """The Triton forward under torch.compile (a visible triton_op) and export carries the backward."""
    x = torch.randn(33, 2 * 256, device="cuda", dtype=dtype, requires_grad=True)
    x2 = x.detach().requires_grad_()
    (ref,) = torch.autograd.grad(OPS["silu_and_mul"].native(x2).float().square().sum(), x2)
    compiled = torch.compile(lambda t: exactfuse.silu_and_mul(t).float().square().sum(), fullgraph=True)
    (g,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close(g, ref)

    class Act(torch.nn.Module):
        def forward(self, t):
            return exactfuse.silu_and_mul(t)

    exported = torch.export.export(Act(), (x,))
    out = exported.module()(x)
    assert out.requires_grad
    (g,) = torch.autograd.grad(out.float().square().sum(), x)
    torch.testing.assert_close(g, ref)


def test_w4a16_gradient_of_a_column_major_activation():
    """``mm``'s backward forms the transposed product for a column-major ``a``; so does the written one."""
    o, bound, _ = _grad_case("w4a16_gemm")
    a = bound.arguments["a"].detach()
    col = torch.cat([a] * 3).t().contiguous().t()  # M >= 3 rows, strides (1, M)
    assert col.stride(0) == 1 and col.stride(1) == col.shape[0]
    ours = dict(bound.arguments, a=col.clone().requires_grad_(True), perm=None)
    ref = dict(bound.arguments, a=col.t().contiguous().t().requires_grad_(True), perm=None)
    out, expected = o(**ours), o.native(**ref)
    grad = torch.randn_like(expected)
    (got,) = torch.autograd.grad(out, ours["a"], grad)
    (want,) = torch.autograd.grad(expected, ref["a"], grad)
    assert _same(got, want)


@pytest.mark.parametrize("name", ["moe_silu_and_mul", "silu_and_mul", "gelu_and_mul"])
def test_zero_gradients_have_eager_autograds_sign(name):
    """A zero gate makes ``act(gate) = 0``, so ``d up = grad * 0`` is -0 for a negative ``grad``; autograd
    sums the halves' gradients into zeros of the input's shape, which gives +0."""
    o = OPS[name]
    x = torch.zeros(2, 8).requires_grad_(True)
    x2 = x.detach().clone().requires_grad_(True)
    with o.priority(["native"]):
        out = o(x)
    expected = o.native(x2)
    grad = -torch.ones_like(expected)
    (got,) = torch.autograd.grad(out, [x], grad)
    (want,) = torch.autograd.grad(expected, [x2], grad)
    assert _same(got, want)


def test_the_backward_column_says_what_each_op_has_and_why_not():
    """``exactfuse list``'s backward column: ``wrt <inputs>: <how>``, or ``none: <why>``. A backward op
    without a second derivative reads as the forward op's double backward (not "inference-only"), and an
    op that writes its arguments names them: causal_conv1d has no backward only when it is given a state."""
    from exactfuse.registry import autograd

    labels = {name: autograd.describe(o) for name, o in OPS.items()}
    assert labels["silu_and_mul"] == "wrt x: the backward op silu_and_mul_backward"
    assert labels["silu_and_mul_backward"] == "none: double backward of silu_and_mul is not supported"
    assert labels["gelu_and_mul_backward"] == "wrt grad, x: VJP of the spec (double backward of gelu_and_mul)"
    assert labels["causal_conv1d_fn_backward"] == "none: double backward of causal_conv1d_fn is not supported"
    assert labels["causal_conv1d"] == "none when conv_state is given (written in place)"
    assert labels["causal_conv1d_update"] == "none: writes conv_state in place"
    assert labels["w4a16_gemm"] == "wrt a, bias: backward formula"
    assert labels["gelu_and_mul_sparse"] == "wrt x: VJP of the spec"
    for name, label in labels.items():
        assert label.startswith("wrt " if name in DIFFERENTIABLE else "none"), (name, label)
        assert "inference-only" not in label, (name, label)


@pytest.mark.parametrize("name", ["silu_and_mul", "silu_mul"])
def test_double_backward_without_a_second_derivative_names_the_op_asked_for(name):
    """create_graph=True through an op whose backward op has no backward: the error is about the double
    backward of the op called, not an inference-only op the user never called."""
    o = OPS[name]
    args = [torch.randn(3, 16, requires_grad=True) for _ in range(1 if name == "silu_and_mul" else 2)]
    with pytest.raises(InferenceOnlyError) as err:
        torch.autograd.grad(o(*args).sum(), args, create_graph=True)
    message = str(err.value)
    assert message.startswith(f"double backward (a gradient of the gradient, create_graph=True) of {name} is not")
    assert f"its backward, {name}_backward, has no gradient" in message
    assert "inference-only" not in message and "detached" not in message
    (g,) = torch.autograd.grad(o(*args).sum(), args[0])  # a first gradient still works
    assert g.shape == args[0].shape


def test_an_op_that_writes_its_arguments_says_so_when_it_refuses():
    o = OPS["causal_conv1d_update"]
    bound = next(o.signature.bind(*c.args, **c.kwargs) for c in o.cases("cpu", torch.float32, quick=True))
    args = dict(bound.arguments, x=bound.arguments["x"].detach().clone().requires_grad_(True))
    with pytest.raises(InferenceOnlyError, match=r"causal_conv1d_update is inference-only \(it writes conv_state in"):
        o(**args)
