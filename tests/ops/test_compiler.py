"""The compiler rule, op by op: traced code never branches on the token count (docs/compiler.md).

Every op runs here the way compilers and serving engines run it: exported with a dynamic token
dimension, compiled with ``dynamic=True`` and an unbacked token count (a branch on it raises, and no
0/1 specialization recompiles), compiled with every guard dropped as vLLM does (traced once at a
small and once at a large T, then called at every T), and replayed from CUDA graphs. Each output meets
the op's contract against the native spec at every T. A CPU test checks, without running a kernel,
that each compiler-visible launcher adds no guard on a symbolic token count.

On the CPU the ops run their Triton providers under the interpreter (registered opaque there,
``registry/library.py``), on small shapes; on CUDA, at the shapes serving engines use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import sympy
import torch
from torch._dynamo.decorators import mark_unbacked
from torch._dynamo.testing import CompileCounterWithBackend
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import exactfuse
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER
from exactfuse.ops.w4a16 import fragment, random_weights
from exactfuse.testing import make_generator
from exactfuse.testing.on_device import check_on_device

GPU_T = (1, 7, 1023, 1024, 1057, 4096, 16384)
CPU_T = (1, 7, 33, 64)


@dataclass(frozen=True)
class Spec:
    """An op called with token-major inputs: ``make(T, width, dtype, gen)`` builds them on ``gen``'s device (rows
    of ``gpu_width`` or ``cpu_width``), ``extra`` are the op's other arguments, in order."""

    op: str
    make: Callable[..., tuple]
    extra: tuple = ()
    gpu_width: int = 4096
    cpu_width: int = 64
    dtypes: tuple = (torch.float16, torch.bfloat16)
    cpu: bool = True
    big_memory: bool = False  # more than a suite worker's share of the card (tests/conftest.py)


# Each input is drawn on its device from ``gen``, a generator of that device (``_inputs``): drawn on the host, at
# about 190 million values a second on one core, d32768's 2^30 values at T = 16384 took about 6 s a call.
def _randn(gen, dtype, *shape):
    return torch.randn(*shape, generator=gen, device=gen.device).to(dtype)


def _gated(T, width, dtype, gen):
    return (_randn(gen, dtype, T, 2 * width),)


def _pair(T, width, dtype, gen):
    return _randn(gen, dtype, T, width), _randn(gen, dtype, T, width)


def _grad_gated(T, width, dtype, gen):
    """The output's gradient ``[T, width]`` and ``x [T, 2 width]``: a backward op's inputs."""
    return _randn(gen, dtype, T, width), *_gated(T, width, dtype, gen)


def _moe(T, width, dtype, gen):
    return _randn(gen, dtype, T, 2 * width), torch.rand(T, generator=gen, device=gen.device)


def _activations(T, width, dtype, gen):
    return (_randn(gen, dtype, T, width),)


SPECS = {
    "silu_and_mul": Spec("silu_and_mul", _gated),
    "gelu_and_mul": Spec("gelu_and_mul", _gated, ("tanh",)),
    "silu_mul": Spec("silu_mul", _pair),
    # the backward ops share one launcher (the two-tensor ones return a pair; these cover it)
    "silu_and_mul_backward": Spec("silu_and_mul_backward", _grad_gated),
    "gelu_and_mul_backward": Spec("gelu_and_mul_backward", _grad_gated, ("tanh",)),
    "moe_silu_and_mul": Spec("moe_silu_and_mul", _moe, (True,), gpu_width=1024),
    "gelu_and_mul_sparse-d4096": Spec("gelu_and_mul_sparse", _gated, (STD_MULTIPLIER, "tanh")),
    # wider than 16384: the traced plan is the split kernels (heuristics.traced_plan)
    # T = 16384 rows of 65536 values: 29 GiB at its peak (benchmarks/results/h100/gpu_suite_memory.txt)
    "gelu_and_mul_sparse-d32768": Spec(
        "gelu_and_mul_sparse",
        _gated,
        (STD_MULTIPLIER, "tanh"),
        gpu_width=32768,
        dtypes=(torch.bfloat16,),
        cpu=False,
        big_memory=True,
    ),
    # K = width; the weights are fixed per device and dtype (_fixed)
    "w4a16_gemm": Spec("w4a16_gemm", _activations, gpu_width=4096, cpu_width=256),
    # the same weight in the fragment layout (fragment.pack); an sm_90 kernel of inline PTX, so not on the CPU
    "w4a16_gemm_packed": Spec("w4a16_gemm_packed", _activations, gpu_width=4096, cpu=False),
    # x [T, C] as one sequence (query_start_loc None), K = 4 taps, weight and bias fixed. Not on the CPU:
    # there the op is opaque (registry/library.py), and Inductor (torch 2.13) fails to lower the
    # functionalized call of a custom op whose mutable argument (conv_state) is None. T = 16384 rows of
    # 10240 channels: 5.3-5.7 GiB at the peak (benchmarks/results/h100/gpu_suite.txt at 4807fcb)
    "causal_conv1d": Spec("causal_conv1d", _activations, gpu_width=10240, cpu_width=64, cpu=False, big_memory=True),
}
_FIXED: dict = {}


def _fixed(spec: Spec, width: int, device: torch.device, dtype: torch.dtype) -> tuple:
    """The model weights an op is called with, made once per device and dtype and static under
    dynamic=True, as parameters are."""
    key = (spec.op, width, str(device), dtype)
    if key not in _FIXED:
        gen = make_generator(1)
        if spec.op == "w4a16_gemm":
            w = random_weights(width, width if device.type == "cuda" else 64, dtype, device, gen)
            tensors, extra = (w.qweight, w.scales), (w.qweight, w.scales, w.zeros, w.perm, None, w.group_size)
        elif spec.op == "w4a16_gemm_packed":
            w = random_weights(width, width, dtype, device, gen)
            packed = fragment.pack(w.qweight, w.scales, w.zeros, w.perm)
            tensors, extra = [t for t in packed[:3] if t is not None], (*packed, None)
        else:
            weight = torch.randn(width, 4, generator=gen).to(device, dtype)
            bias = torch.randn(width, generator=gen).to(device, dtype)
            tensors = extra = (weight, bias)
        for t in tensors:
            torch._dynamo.mark_static(t)
        _FIXED[key] = extra
    return _FIXED[key]


def _width(spec: Spec, device: torch.device) -> int:
    return spec.gpu_width if device.type == "cuda" else spec.cpu_width


def _extra(spec: Spec, device: torch.device, dtype: torch.dtype) -> tuple:
    if spec.op in ("w4a16_gemm", "w4a16_gemm_packed", "causal_conv1d"):
        return _fixed(spec, _width(spec, device), device, dtype)
    return spec.extra


def _inputs(spec: Spec, T: int, device: torch.device, dtype: torch.dtype, seed: int = 0) -> tuple:
    gen = torch.Generator(device).manual_seed(seed * 100003 + T)
    return spec.make(T, _width(spec, device), dtype, gen)


def _call(spec: Spec, device: torch.device, dtype: torch.dtype) -> Callable:
    op, extra = exactfuse.get(spec.op), _extra(spec, device, dtype)
    return lambda *inputs: op(*inputs, *extra)


def _assert_contract(spec: Spec, out: torch.Tensor, inputs: tuple, device, dtype, where: str) -> None:
    op = exactfuse.get(spec.op)
    args = (*inputs, *_extra(spec, device, dtype))
    # on the device, in chunks: T = 16384 at d = 32768 is 2**29 elements, too many to copy in float64
    result = check_on_device(op.contract_for(dtype, device.type), out, op.native(*args), args, {}, op)
    assert result.passed, f"{where}: {result.summary()}"


class _Module(torch.nn.Module):
    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


def _params():
    """(spec, device, dtype, token counts): CUDA at serving shapes, the CPU interpreter on small ones."""
    cases = []
    for name, spec in SPECS.items():
        for dtype in spec.dtypes:
            short = "fp16" if dtype == torch.float16 else "bf16"
            marks = [pytest.mark.gpu, *([pytest.mark.big_memory] if spec.big_memory else [])]
            cases.append(pytest.param(name, "cuda", dtype, GPU_T, marks=marks, id=f"{name}-{short}-cuda"))
        if spec.cpu:
            cases.append(
                pytest.param(name, "cpu", torch.float16, CPU_T, marks=pytest.mark.interpreter, id=f"{name}-fp16-cpu")
            )
    return cases


PARAMS = _params()


@pytest.mark.parametrize(("name", "device", "dtype", "token_counts"), PARAMS)
def test_export_with_a_dynamic_token_dimension(name, device, dtype, token_counts):
    device = torch.device(device)
    spec = SPECS[name]
    fn = _call(spec, device, dtype)
    example = _inputs(spec, 8, device, dtype)
    tokens = torch.export.Dim("tokens", min=1, max=65536)
    exported = torch.export.export(_Module(fn), example, dynamic_shapes=(tuple({0: tokens} for _ in example),))
    module = exported.module()
    for T in token_counts:
        inputs = _inputs(spec, T, device, dtype, seed=1)
        with torch.no_grad():
            _assert_contract(spec, module(*inputs), inputs, device, dtype, f"exported, T = {T}")


@pytest.mark.parametrize(("name", "device", "dtype", "token_counts"), PARAMS)
def test_compile_dynamic_unbacked_tokens_never_recompiles(name, device, dtype, token_counts):
    device = torch.device(device)
    spec = SPECS[name]
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(_call(spec, device, dtype), dynamic=True, fullgraph=True, backend=counter)
    frames = None
    for T in (8, *token_counts):
        inputs = _inputs(spec, T, device, dtype, seed=2)
        for t in inputs:
            mark_unbacked(t, 0)
        _assert_contract(spec, compiled(*inputs), inputs, device, dtype, f"compiled, T = {T}")
        # the trace at T = 8 may restart once (a float argument specialized); no call after it compiles
        frames = frames or counter.frame_count
        assert counter.frame_count == frames, f"recompiled at T = {T}"


@pytest.mark.parametrize(("name", "device", "dtype", "token_counts"), PARAMS)
@pytest.mark.parametrize("traced_at", ["small", "large"])
def test_guard_free_compile_is_right_for_every_token_count(name, device, dtype, token_counts, traced_at):
    """vLLM's mode: one graph, dynamic in T, every guard dropped; traced at one T, run at all of them."""
    device = torch.device(device)
    spec = SPECS[name]
    torch._dynamo.reset()
    compiled = torch.compile(
        _call(spec, device, dtype),
        dynamic=True,
        fullgraph=True,
        options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe},
    )
    traced = _inputs(spec, 8 if traced_at == "small" else max(token_counts), device, dtype)
    # as vLLM marks them: the token dimension dynamic, the widths static (a width equal to the traced T
    # would otherwise share its symbol, with no guard left to catch the difference)
    for t in traced:
        for dim in range(1, t.dim()):
            torch._dynamo.mark_static(t, dim)
    compiled(*traced)
    for T in token_counts:
        inputs = _inputs(spec, T, device, dtype, seed=3)
        _assert_contract(spec, compiled(*inputs), inputs, device, dtype, f"guard-free ({traced_at}), T = {T}")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.big_memory] if s.big_memory else []) for n, s in SPECS.items()]
)
def test_gpu_cuda_graphs_of_the_compiled_op_replay_eager(name):
    device, dtype = torch.device("cuda"), SPECS[name].dtypes[-1]
    spec = SPECS[name]
    fn = _call(spec, device, dtype)
    torch._dynamo.reset()
    compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)
    for T in (16, 1024):
        inputs = _inputs(spec, T, device, dtype, seed=4)
        for _ in range(3):  # warm up, record, replay
            out = compiled(*inputs).clone()
        assert torch.equal(out, fn(*inputs)), f"T = {T}"


# --------------------------------------------------- no guard on the token count
def _equates_inputs(expr, tokens) -> bool:
    return isinstance(expr, sympy.Eq) and expr.free_symbols <= tokens


VISIBLE = [name for name in SPECS if exactfuse.get(SPECS[name].op).compiler == "visible"]


@pytest.mark.interpreter
@pytest.mark.parametrize("name", VISIBLE)
def test_visible_launchers_add_no_guard_on_the_token_count(name, monkeypatch):
    """The op's check, its Triton provider's supports_args and launcher on fake inputs with a symbolic
    token count (kernel launches recorded, not run): no guard may mention that count."""
    spec = SPECS[name]
    op = exactfuse.get(spec.op)
    provider = op.providers["triton"]
    launches = []

    def record(kernel):
        class Launch:
            def __getitem__(self, grid):
                return lambda *args, **kwargs: launches.append((kernel, grid, kwargs))

        return Launch()

    monkeypatch.setattr(torch.library, "wrap_triton", record)
    shape_env = ShapeEnv()
    real = _inputs(spec, 8, torch.device("cpu"), torch.float16)
    with torch._subclasses.fake_tensor.FakeTensorMode(shape_env=shape_env) as mode:
        fakes = []
        for t in real:
            dims = [DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * (t.dim() - 1)
            fakes.append(mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims)))
        tokens = {t.shape[0].node.expr for t in fakes}
        args = (*fakes, *_extra(spec, torch.device("cpu"), torch.float16))
        if op.check is not None:
            op.check(*args)
        assert provider.accepts(*args) is True
        provider.fn(*args)
    assert launches, "the launcher launched nothing"
    # an equality of two inputs' token counts is a precondition, not a branch
    guarded = [g for g in shape_env.guards if g.expr.free_symbols & tokens and not _equates_inputs(g.expr, tokens)]
    assert not guarded, [str(g.expr) for g in guarded]
