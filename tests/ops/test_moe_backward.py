"""moe_silu_and_mul_backward: the spec against eager autograd bit for bit (zero signs and the row weights'
reduction included), the kernel against the spec under its contract (d gateup Bitwise on CUDA, d
row_weights Float64Relative), layouts, options, dispatch from the forward's autograd formula, errors,
fallbacks, CUDA graphs, torch.compile."""

import pytest
import torch

import exactfuse
from exactfuse.ops.moe_silu_and_mul import moe_gated_kernel, moe_silu_and_mul, moe_silu_and_mul_backward
from exactfuse.testing import CompileWatch, assert_contract_matrix, clone_args
from exactfuse.testing.calls import clone_value
from support.graph import capture
from support.moe import LAYOUT, pair

SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
INTERP_DTYPES = pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns (the sign of zero included); any NaN matches any NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    differ = (a.contiguous().view(_BITS[a.dtype]) != b.contiguous().view(_BITS[b.dtype])) & ~(a.isnan() & b.isnan())
    return not bool(differ.any())


def _eager_autograd(grad, gateup, row_weights=None, interleaved=False, out_dtype=None):
    """Eager autograd's ``(d gateup, d row_weights or None)`` of the forward's native spec."""
    x = clone_value(gateup.detach()).requires_grad_(True)
    w = None if row_weights is None else clone_value(row_weights.detach()).requires_grad_(True)
    out = moe_silu_and_mul.native(x, w, interleaved, out_dtype)
    grads = torch.autograd.grad(out, [x] if w is None else [x, w], grad)
    return grads[0], (grads[1] if w is not None else None)


def _kernel(*args):
    with exactfuse.poison_outputs():
        return moe_silu_and_mul_backward.run_provider("triton", *clone_args(args, {})[0])


def _assert_within_contract(got, want, args, device_type):
    contracts = moe_silu_and_mul_backward.contract_for(args[1].dtype, device_type).for_outputs(2)
    for name, g, w, c in zip(("d_gateup", "d_row_weights"), got, want, contracts, strict=True):
        result = c.check(g, w, args=args, kwargs={})
        assert result.passed, f"{name}: {result.summary()}"


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
        want_dx, want_dw = _eager_autograd(*case.args)
        dx, dw = moe_silu_and_mul_backward.native(*case.args)
        assert _same_bits(dx, want_dx), case.id
        assert dw.numel() == 0 if want_dw is None else _same_bits(dw, want_dw), case.id
        ran += 1
    assert ran > 20


def test_spec_stores_positive_zero():
    """A zero gradient of the gate or up half is +0 in d gateup, as autograd's sum of the halves makes it."""
    x = torch.tensor([[-200.0, 0.0, 1.0, -0.0], [2.0, -1.0, -0.0, 3.0]])
    grad = torch.tensor([[1.0, -0.0], [-0.0, 0.0]])
    want, _ = _eager_autograd(grad, x)
    got, _ = moe_silu_and_mul_backward.native(grad, x)
    assert (want == 0).sum() >= 4 and not torch.signbit(want[want == 0]).any() and _same_bits(got, want)


# ----------------------------------------------------------------- kernel against the spec
@pytest.mark.interpreter
@INTERP_DTYPES
def test_interpreter_contract(dtype):
    """Every quick case (M = 0 .. 7, N = 7 .. 1024, both layouts, no / fp32 / input-dtype weights, an fp32
    output of half inputs, NaN/Inf/zeros/subnormals, wide range, row-strided gateup and gradient)."""
    assert_contract_matrix(moe_silu_and_mul_backward, "cpu", dtype, quick=True)


def _edge_inputs(dtype, up_scale=30.0, grad_scale=4.0):
    """Gate values at the edges (NaN, +-Inf, +-0, subnormals, |g| where the sigmoid saturates or
    underflows, the cancellation of the gate's two gradient terms near g = -1.28) against signs, zeros
    and scales of up and of the gradient: ``gate, up, grad [n, 8]``."""
    tiny = torch.finfo(dtype).smallest_normal / 4
    big = min(torch.finfo(dtype).max, 1e30)
    gates = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, tiny, -tiny, 1e-3, -1e-3, 3.0, -3.0, -1.278,
             20.0, -20.0, 100.0, -100.0, 1e4, -1e4, big, -big, -88.8, 89.0]  # fmt: skip
    ups = [1.0, -1.0, 0.0, -0.0, up_scale, -up_scale, 0.5, float("nan")]
    grads = [1.0, -1.0, 0.0, -0.0, grad_scale, -grad_scale, 2.0, -0.5]
    g = torch.tensor(gates).repeat_interleave(len(ups)).reshape(-1, 8)
    u = torch.tensor(ups).repeat(len(gates)).reshape(-1, 8)
    dy = torch.tensor(grads).repeat(len(gates)).reshape(-1, 8)
    return g.to(dtype), u.to(dtype), dy.to(dtype)


def _edge_calls(dtype, device="cpu", **scales):
    """The edge values in both layouts, without weights and with fp32 weights (one 0, one -0.5)."""
    gate, up, grad = (t.to(device) for t in _edge_inputs(dtype, **scales))
    M = gate.shape[0]
    weights = torch.linspace(-0.5, 1.0, M).to(device)
    weights[M // 2] = 0.0
    split = torch.cat([gate, up], dim=1)
    inter = torch.stack([gate, up], dim=2).reshape(M, -1)
    for x, interleaved in ((split, False), (inter, True)):
        for w in (None, weights):
            yield (grad, x, w, interleaved)


@pytest.mark.interpreter
@INTERP_DTYPES
def test_interpreter_edge_values(dtype):
    for args in _edge_calls(dtype):
        _assert_within_contract(_kernel(*args), moe_silu_and_mul_backward.native(*args), args, "cpu")


@pytest.mark.interpreter
def test_interpreter_kernel_stores_positive_zero_as_autograd_does():
    """Exact inputs (sigmoid(0) = 0.5, sigmoid(-200) = 0): the kernel's zeros are eager autograd's +0."""
    x = torch.tensor([[-200.0, 0.0, 1.0, -0.0], [2.0, -1.0, -0.0, 3.0]])
    grad = torch.tensor([[1.0, -0.0], [-0.0, 0.0]])
    for interleaved in (False, True):
        want, _ = _eager_autograd(grad, x, None, interleaved)
        got, _ = _kernel(grad, x, None, interleaved)
        assert _same_bits(got, want), interleaved


@pytest.mark.interpreter
@INTERP_DTYPES
@pytest.mark.parametrize(("M", "N"), [(1, 7), (7, 384), (5, 2500), (33, 960)], ids=str)
def test_interpreter_layouts_agree_and_runs_are_identical(M, N, dtype):
    """Both layouts give the same gradients (d gateup rearranged), bit for bit, d row_weights included (the
    same sum order per row; N = 2500 sums three column tiles); three runs are identical."""
    split, inter, w = pair(M, N, dtype)
    grad = torch.randn(M, N).to(dtype)
    for weights in (None, w):
        dx_s, dw_s = _kernel(grad, split, weights, False)
        dx_i, dw_i = _kernel(grad, inter, weights, True)
        assert torch.equal(torch.cat([dx_i[:, 0::2], dx_i[:, 1::2]], dim=1), dx_s)
        assert _same_bits(dw_i, dw_s)
        for _ in range(2):
            dx, dw = _kernel(grad, inter, weights, True)
            assert _same_bits(dx, dx_i) and _same_bits(dw, dw_i)
        _assert_within_contract(
            (dx_s, dw_s), moe_silu_and_mul_backward.native(grad, split, weights), (grad, split, weights), "cpu"
        )


@pytest.mark.interpreter
def test_interpreter_options():
    """Input-dtype weights, an fp32 gradient of an fp16 gateup (out_dtype), row-strided gateup, gradient and
    weights, and N = 0 (an empty sum: zero weight gradients)."""
    split, inter, w = pair(6, 64, torch.float16)
    grad32 = torch.randn(6, 64)
    for args in ((grad32, inter, w.half(), True, torch.float32), (grad32.half(), split, w.half(), False)):
        _assert_within_contract(_kernel(*args), moe_silu_and_mul_backward.native(*args), args, "cpu")
    base, gbase = torch.randn(6, 2 * 80), torch.randn(6, 70)
    x, grad, weights = base[:, : 2 * 64], gbase[:, :64], torch.rand(6, 3)[:, 1]
    got = _kernel(grad, x, weights, True)
    assert all(
        _same_bits(a, b)
        for a, b in zip(got, _kernel(grad.contiguous(), x.contiguous(), weights.contiguous(), True), strict=True)
    )
    dx, dw = _kernel(torch.randn(3, 0), torch.randn(3, 0), torch.rand(3), False)
    assert dx.shape == (3, 0) and torch.equal(dw, torch.zeros(3))
    dx, dw = _kernel(torch.randn(0, 5), torch.randn(0, 10), None, False)
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
        assert all(_same_bits(g, e) for g, e in zip(got, want, strict=True)), order
    leaf_x = x.clone().requires_grad_(True)  # weights that need no gradient, and no weights
    for weights in (w, None):
        (got,) = torch.autograd.grad(moe_silu_and_mul(leaf_x, weights, interleaved), leaf_x, grad)
        assert _same_bits(got, _eager_autograd(grad, x, weights, interleaved)[0])


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
    assert _same_bits(got, _eager_autograd(grad, x, w)[0])


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
    assert all(_same_bits(a, b) for a, b in zip(g1, g2, strict=True))
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
    assert all(_same_bits(a, b) for a, b in zip(got, _eager_autograd(grad, x, w, interleaved), strict=True))


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
        want_dx, want_dw = _eager_autograd(*case.args)
        assert _same_bits(got[0], want_dx), case.id
        if w is not None:
            _assert_within_contract((got[0], got[1]), (want_dx, want_dw), case.args, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_edge_values_bitwise(dtype):
    for args in _edge_calls(dtype, "cuda", up_scale=1e4, grad_scale=1e3):
        got, want = _kernel(*args), moe_silu_and_mul_backward.native(*args)
        assert _same_bits(got[0], want[0]), args[2:]
        _assert_within_contract(got, want, args, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize(("M", "N"), [(1, 768), (6, 1024), (384, 1024), (4096, 3072)], ids=str)
def test_gpu_layouts_agree_and_runs_are_identical(M, N, dtype):
    split, inter, w = pair(M, N, dtype, "cuda")
    grad = torch.randn(M, N, device="cuda").to(dtype)
    for weights in (None, w):
        dx_s, dw_s = _kernel(grad, split, weights, False)
        dx_i, dw_i = _kernel(grad, inter, weights, True)
        assert torch.equal(torch.cat([dx_i[:, 0::2], dx_i[:, 1::2]], dim=1), dx_s) and _same_bits(dw_i, dw_s)
        for _ in range(2):
            dx, dw = _kernel(grad, inter, weights, True)
            assert _same_bits(dx, dx_i) and _same_bits(dw, dw_i)


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
                    assert _same_bits(_kernel(*args)[0], moe_silu_and_mul_backward.native(*args)[0]), args[2:]


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
    want = _eager_autograd(grad, x, w, interleaved)
    assert _same_bits(got[0], want[0])
    _assert_within_contract(got, want, (grad, x, w, interleaved), "cuda")


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
        want_dx, _ = _eager_autograd(static_grad, static_x, static_w, True)
        assert _same_bits(static_out[0], want_dx)
        assert _same_bits(static_out[1], _kernel(static_grad, static_x, static_w, True)[1])
        assert _same_bits(static_out[2], _eager_autograd(static_grad, static_x, None, False)[0])


@pytest.mark.gpu
@pytest.mark.big_memory
@LAYOUT
def test_gpu_int64_offsets(interleaved):
    """d gateup of 2**31 + 16384 elements: 64-bit offsets; the first and last rows checked."""
    M, N = 2**20 + 8, 1024
    x = torch.randn((M, 2 * N), dtype=torch.bfloat16, device="cuda")
    grad = torch.randn((M, N), dtype=torch.bfloat16, device="cuda")
    w = torch.rand((M,), device="cuda")
    dx, dw = _kernel(grad, x, w, interleaved)
    for rows in (slice(0, 64), slice(M - 64, M)):
        want = moe_silu_and_mul_backward.native(grad[rows], x[rows], w[rows], interleaved)
        assert _same_bits(dx[rows], want[0])
        _assert_within_contract((dx[rows], dw[rows]), want, (grad[rows], x[rows], w[rows], interleaved), "cuda")
