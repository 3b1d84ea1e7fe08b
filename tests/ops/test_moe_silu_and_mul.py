"""moe_silu_and_mul: spec, contract matrix, layouts, determinism, edge shapes, registration, CUDA graphs
(launch configurations: test_moe_silu_and_mul_configs.py)."""

import pytest
import torch

import exactfuse
from exactfuse.ops.moe_silu_and_mul import moe_gated_kernel, moe_silu_and_mul
from exactfuse.registry import contracts
from exactfuse.testing import (
    CompileWatch,
    assert_contract_matrix,
    check_on_device,
    check_provider,
)
from exactfuse.testing.cases import moe_silu_and_mul as moe_ops
from exactfuse.utils import needs_int64
from support.moe import LAYOUT, pair

SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
INTERP_DTYPES = pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])


def _triton(*args, **kwargs):
    with exactfuse.poison_outputs():
        return moe_silu_and_mul.run_provider("triton", *args, **kwargs)


def _assert_contract(M, N, interleaved, dtype, device, w_dtype=torch.float32, out_dtype=None):
    split, inter, w = pair(M, N, dtype, device, weights=w_dtype)
    x = inter if interleaved else split
    out = _triton(x, w, interleaved, out_dtype)
    ref = moe_silu_and_mul.native(x, w, interleaved, out_dtype)
    contract = moe_silu_and_mul.contract_for(ref.dtype, x.device.type)
    result = check_on_device(contract, out, ref, (), {}, moe_silu_and_mul)
    assert result.passed, result.summary()
    assert torch.isfinite(out).all()
    return out


# ------------------------------------------------------------------ the spec
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_native_layouts_are_the_same_function(dtype):
    """Within the contract on the CPU: its fp32 exp differs between strided (scalar
    libm) and contiguous (SLEEF vector) loops, so the interleaved view may move an
    fp32 result by an ulp there. On CUDA both layouts evaluate the same expf (GPU test)."""
    split, inter, w = pair(9, 40, dtype)
    for weights in (None, w):
        a = moe_silu_and_mul.native(split, weights, False)
        b = moe_silu_and_mul.native(inter, weights, True)
        result = moe_silu_and_mul.contract_for(dtype, "cpu").check(b, a)
        assert result.passed, result.summary()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_native_rounds_once(dtype):
    """Within one ulp of a float64 evaluation: no intermediate rounding to the activation dtype."""
    split, _, w = pair(64, 256, dtype)
    x, N = split.double(), 256
    g, u = x[:, :N], x[:, N:]
    exact = (g * torch.sigmoid(g) * u * w.double()[:, None]).to(dtype)
    dist = contracts.ulp_distance(moe_silu_and_mul.native(split, w, False), exact)
    assert int(dist.max()) <= 1
    # silu rounded to the input dtype first (as silu_and_mul does) lands elsewhere.
    rounded = (torch.nn.functional.silu(split[:, :N]) * split[:, N:] * w[:, None].to(dtype)).to(dtype)
    assert not torch.equal(rounded, moe_silu_and_mul.native(split, w.to(dtype), False))


def test_native_out_dtype_and_weights_dtype():
    split, _, w = pair(4, 16, torch.bfloat16)
    assert moe_silu_and_mul.native(split, w, False, torch.float32).dtype == torch.float32
    assert moe_silu_and_mul.native(split, w.bfloat16(), False).dtype == torch.bfloat16
    assert moe_silu_and_mul.native(split[:0], w[:0], True).shape == (0, 16)


# ----------------------------------------------------------------- bad input
BAD = {
    "1-D": ((torch.randn(8),), ValueError, r"gateup must be 2-D \[M, 2\*N\], got 1-D shape \[8\]"),
    "odd": ((torch.randn(3, 7),), ValueError, r"gateup's last dimension must be even \(2\*N\), got 7"),
    "int": ((torch.ones(3, 8, dtype=torch.int32),), TypeError, "gateup must be float16, bfloat16 or float32"),
    "w-shape": ((torch.randn(6, 8), torch.rand(5)), ValueError, r"row_weights must be \[M\] = \[6\], got \[5\]"),
    "w-2d": ((torch.randn(6, 8), torch.rand(6, 1)), ValueError, r"row_weights must be \[M\] = \[6\], got \[6, 1\]"),
    "w-dtype": (
        (torch.randn(6, 8, dtype=torch.float16), torch.rand(6, dtype=torch.bfloat16)),
        TypeError,
        r"row_weights must be float32 or gateup's dtype \(float16\), got torch.bfloat16",
    ),
    "out-dtype": ((torch.randn(2, 8), None, False, torch.int8), TypeError, "out_dtype must be None, float16"),
    "layout": ((torch.randn(2, 8), None, "interleaved"), TypeError, "interleaved must be a bool, got str"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_a_named_error(name):
    args, error, message = BAD[name]
    with pytest.raises(error, match="moe_silu_and_mul: " + message):
        moe_silu_and_mul(*args)


def test_non_contiguous_columns_fall_back_to_native():
    x = torch.randn(16, 6).t()  # [6, 16], column stride 6
    with moe_silu_and_mul.priority(["triton", "native"]):
        assert moe_silu_and_mul.select(x, None, True).name == "native"
        assert torch.equal(moe_silu_and_mul(x, None, True), moe_silu_and_mul.native(x, None, True))


@pytest.mark.interpreter
def test_interpreter_declines_bf16_anywhere():
    x = torch.randn(2, 8)
    provider = moe_silu_and_mul.providers["triton"]
    assert provider.accepts(x, torch.rand(2), True, torch.float16) is True
    assert provider.accepts(x, None, True, torch.bfloat16) is not True
    assert provider.accepts(x.bfloat16(), None, True) is not True


# --------------------------------------------------------- declaration, cost
def test_declared_for_list_verify_warmup_bench():
    assert exactfuse.get("moe_silu_and_mul") is moe_silu_and_mul
    assert moe_silu_and_mul.warmup_fn is not None and {"default", "quick"} <= set(moe_silu_and_mul.grids)
    ids = [c.id for c in moe_silu_and_mul.grids["default"](torch.device("meta"), torch.bfloat16)]
    assert len(ids) == len(set(ids)) == 6 * 4 * 2 * 2
    quick = [c.id for c in moe_silu_and_mul.grids["quick"](torch.device("meta"), torch.bfloat16)]
    assert quick and set(quick) <= set(ids)
    required = {(0, 64), (7, 384), (33, 960), (5, 512), (1, 1024), (6, 768), (384, 1024), (1536, 2048)}
    required |= {(4096, 3072), (49152, 1024)} | {(m, n) for m in (1, 2, 4, 8, 16) for n in (768, 1024, 1536)}
    assert required <= set(moe_ops.FULL_SHAPES)


def test_cost_counts_minimum_bytes():
    x = torch.empty(6, 2 * 768, dtype=torch.bfloat16, device="meta")
    w = torch.empty(6, dtype=torch.float32, device="meta")
    assert moe_silu_and_mul.bytes_fn(x, None, True) == 6 * 1536 * 2 + 6 * 768 * 2
    assert moe_silu_and_mul.bytes_fn(x, w, False, torch.float32) == 6 * 1536 * 2 + 6 * 4 + 6 * 768 * 4


def test_layer():
    split, inter, w = pair(5, 24, torch.float32)
    layer = exactfuse.MoeSiluAndMul(interleaved=True)
    assert torch.equal(layer(inter, w), moe_silu_and_mul.native(inter, w, True))
    assert torch.equal(exactfuse.MoeSiluAndMul(interleaved=False)(split), moe_silu_and_mul.native(split))
    assert "interleaved=True" in repr(layer)
    assert exactfuse.MoeSiluAndMul(False, torch.float16)(split).dtype == torch.float16
    with pytest.raises(TypeError, match="MoeSiluAndMul: interleaved must be a bool"):
        exactfuse.MoeSiluAndMul(interleaved=1)


# Every argument form through torch.ops.exactfuse (schema ``ScalarType? out_dtype``).
VARIANTS = {
    "split-none": (None, False, None),
    "inter-w32": (torch.float32, True, None),
    "inter-wx-out_fp16": ("x", True, torch.float16),
}


def _variant_args(name, dtype=torch.float32, device="cpu"):
    w_dtype, interleaved, out_dtype = VARIANTS[name]
    split, inter, w = pair(6, 48, dtype, device, weights=dtype if w_dtype == "x" else w_dtype)
    return (inter if interleaved else split, w, interleaved, out_dtype)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_opcheck_variants(name):
    torch.library.opcheck(moe_silu_and_mul.torch_op, _variant_args(name))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_compile_fullgraph_equals_eager_cpu(name):
    args = _variant_args(name)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: moe_silu_and_mul(*a), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(*args), moe_silu_and_mul(*args))


# ----------------------------------------------------- Triton under the interpreter
@pytest.mark.interpreter
@INTERP_DTYPES
def test_interpreter_contract(dtype):
    """Quick matrix: M = 0 .. 7, N = 7 .. 1024, both layouts, weights fp32/input dtype, out_dtype, specials."""
    failures = []
    for case in moe_silu_and_mul.cases("cpu", dtype, quick=True):
        assert moe_silu_and_mul.providers["triton"].accepts(*case.args, **case.kwargs) is True, case.id
        result = check_provider(moe_silu_and_mul, "triton", case)
        if not result.passed:
            failures.append(f"{case.id}: {result.summary()}")
    assert not failures, "\n".join(failures)


@pytest.mark.interpreter
@INTERP_DTYPES
@pytest.mark.parametrize(("M", "N"), [(0, 64), (1, 7), (7, 384), (33, 960), (5, 512), (6, 768)], ids=str)
def test_interpreter_layouts_bitwise_equal(M, N, dtype):
    split, inter, w = pair(M, N, dtype)
    a, b = _triton(split, w, False), _triton(inter, w, True)
    assert a.shape == (M, N) and torch.equal(a, b)


@pytest.mark.interpreter
@LAYOUT
def test_interpreter_three_runs_bitwise_identical(interleaved):
    split, inter, w = pair(9, 384, torch.float16)
    x = inter if interleaved else split
    first = _triton(x, w, interleaved)
    for _ in range(2):
        assert torch.equal(_triton(x, w, interleaved), first)


@pytest.mark.interpreter
@pytest.mark.parametrize("N", [768, 1024, 1536])
@pytest.mark.parametrize("M", [1, 2, 4, 8, 16])
def test_interpreter_small_shared_expert_batches(M, N):
    """Small-batch family (M = 1..16, where a kernel this op replaces produced NaN): finite and correct."""
    for interleaved in (False, True):
        _assert_contract(M, N, interleaved, torch.float16, "cpu")


@pytest.mark.interpreter
def test_interpreter_row_strided_weights_and_input():
    base = torch.randn(6, 2 * 80)
    x = base[:, : 2 * 64]  # row stride 160
    w = torch.rand(6, 3)[:, 1]  # stride 3, like one column of top-k weights
    assert torch.equal(_triton(x, w, True), _triton(x.contiguous(), w.contiguous(), True))
    _assert_contract(6, 64, True, torch.float32, "cpu")


@pytest.mark.interpreter
def test_interpreter_warmup_runs_the_launcher():
    assert exactfuse.warmup("moe_silu_and_mul", dtypes=(torch.float16,), device="cpu", widths=(16,)) == [
        "moe_silu_and_mul"
    ]


# ------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_contract_matrix(dtype):
    """Every declared case: edge and model shapes up to 49152 x 1024, both layouts, weights, out_dtype, specials."""
    assert moe_silu_and_mul.select(*next(moe_silu_and_mul.iter_cases("cuda", dtype)).args).name == "triton"
    assert_contract_matrix(moe_silu_and_mul, "cuda", dtype)


GPU_SHAPES = [(1, 768), (6, 1024), (16, 1536), (384, 1024), (1536, 2048), (4096, 3072), (49152, 768)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize(("M", "N"), GPU_SHAPES, ids=lambda v: str(v))
def test_gpu_layouts_bitwise_equal_and_deterministic(M, N, dtype):
    split, inter, w = pair(M, N, dtype, "cuda")
    for weights in (None, w):
        first = _triton(inter, weights, True)
        assert torch.equal(_triton(split, weights, False), first)
        assert torch.equal(
            moe_silu_and_mul.native(split, weights, False), moe_silu_and_mul.native(inter, weights, True)
        )
        for _ in range(2):
            assert torch.equal(_triton(inter, weights, True), first)


@pytest.mark.gpu
@pytest.mark.parametrize("N", [768, 1024, 1536])
@pytest.mark.parametrize("M", [1, 2, 4, 8, 16])
def test_gpu_small_shared_expert_batches(M, N):
    for interleaved in (False, True):
        _assert_contract(M, N, interleaved, torch.bfloat16, "cuda")
        _assert_contract(M, N, interleaved, torch.bfloat16, "cuda", w_dtype=None)


@pytest.mark.gpu
@pytest.mark.big_memory
@LAYOUT
def test_gpu_int64_offsets(interleaved):
    """gateup with 2**31 + 16384 elements (4.3 GB bf16): every row checked against native, in chunks."""
    M, N = 2**20 + 8, 1024
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((M, 2 * N), dtype=torch.bfloat16, device="cuda", generator=gen)
    w = torch.rand((M,), device="cuda", generator=gen)
    assert x.numel() == 2**31 + 16384 and needs_int64(M, x.stride(0))
    out = _triton(x, w, interleaved)
    contract = moe_silu_and_mul.contract_for(torch.bfloat16)
    for start in range(0, M, 2**18):
        rows = slice(start, min(start + 2**18, M))
        expected = moe_silu_and_mul.native(x[rows], w[rows], interleaved)
        result = check_on_device(contract, out[rows], expected, (), {}, None)
        assert result.passed, f"rows {rows}: {result.summary()}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(VARIANTS))
def test_gpu_opcheck(name):
    torch.library.opcheck(moe_silu_and_mul.torch_op, _variant_args(name, torch.bfloat16, "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(VARIANTS))
def test_gpu_compile_fullgraph_equals_eager(name):
    args = _variant_args(name, torch.bfloat16, "cuda")
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: moe_silu_and_mul(*a), fullgraph=True)
    assert torch.equal(compiled(*args), moe_silu_and_mul(*args))


@pytest.mark.gpu
@LAYOUT
@torch.no_grad()
def test_gpu_warmup_then_cuda_graph_replay(interleaved):
    """Warmup compiles what capture needs; replays with new data equal eager at several batch sizes."""
    N = 768
    exactfuse.warmup("moe_silu_and_mul", dtypes=(torch.bfloat16,), widths=(N,), interleaved=interleaved)
    watch = CompileWatch(moe_gated_kernel.moe_silu_and_mul_kernel)
    layer = exactfuse.MoeSiluAndMul(interleaved=interleaved)
    for M in (1, 6, 96):
        static_x = torch.randn(M, 2 * N, dtype=torch.bfloat16, device="cuda")
        static_w = torch.rand(M, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = layer(static_x, static_w)
        assert watch.new() == [[]], f"compiled during capture:\n{watch}"
        for seed in range(3):
            _, inter, w = pair(M, N, torch.bfloat16, "cuda", seed=seed)
            split = torch.cat([inter[:, 0::2], inter[:, 1::2]], dim=1)
            static_x.copy_(inter if interleaved else split)
            static_w.copy_(w)
            graph.replay()
            assert torch.equal(static_y, layer(static_x, static_w))
