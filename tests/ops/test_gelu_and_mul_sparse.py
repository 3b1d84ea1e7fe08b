"""gelu_and_mul_sparse: contract matrix, needed roundtrips, bad inputs, fallbacks, layer, compile/graphs/AOT."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

import exactfuse
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER, gelu_and_mul_sparse, sparse_gelu_kernel
from exactfuse.ops.gelu_and_mul_sparse import heuristics as sh
from exactfuse.ops.gelu_and_mul_sparse import launch as sparse_launch
from exactfuse.registry import Case
from exactfuse.registry.contracts import RowBitwise, ZeroMaskTolerance
from exactfuse.testing import check_provider

op = gelu_and_mul_sparse
SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def _run_matrix(device, dtype, quick):
    """Every case of both seeds through the contract; returns (failures, differing rows, rows, report)."""
    failures, differing, rows, report = [], 0, 0, []
    for seed in (0, 1):
        for case in op.iter_cases(device, dtype, quick=quick, seed=seed):
            assert op.providers["triton"].accepts(*case.args) is True, case.id
            res = check_provider(op, "triton", case)
            if not res.passed:
                failures.append(f"seed{seed}-{case.id}: {res.summary()}")
            if "rows" in res.extra:
                differing, rows = differing + res.extra["differing_rows"], rows + res.extra["rows"]
                if res.extra["differing_rows"]:
                    report.append(f"seed{seed}-{case.id}: {res.summary()}")
    return failures, differing, rows, report


def _assert_matrix(device, dtype, quick):
    failures, differing, rows, report = _run_matrix(device, dtype, quick)
    print(f"\n{SHORT[dtype]}: {differing}/{rows} rows differ from native", *report, sep="\n  ")
    assert not failures, "\n".join(failures)
    if isinstance(op.contract_for(dtype, device), RowBitwise):
        assert rows and differing <= rows * (1 - 0.999), f"{differing}/{rows} rows differ (contract: >= 99.9% equal)"


NATIVE_EMPTY_WARNING = "ignore:.*degrees of freedom is <= 0"  # native std() on the T = 0 case


@pytest.mark.interpreter
@pytest.mark.filterwarnings(NATIVE_EMPTY_WARNING)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_interpreter_contract_matrix(dtype):
    _assert_matrix("cpu", dtype, quick=True)


@pytest.mark.gpu
@pytest.mark.filterwarnings(NATIVE_EMPTY_WARNING)
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_contract_matrix(dtype):
    """T in {1,7,128,2048} x d in {1,...,32768} x both GELUs x 2 seeds, plus the edge cases."""
    _assert_matrix("cuda", dtype, quick=False)


@pytest.mark.gpu
def test_gpu_split_kernels_at_the_shapes_the_rule_gives_them():
    """A few split-kernel launches (small batches of wide rows) through the contract: also the small
    target ``sanitize racecheck`` needs (the full chunked matrix runs for minutes under it)."""
    for T, d in ((1, 8193), (16, 16384), (64, 16385), (7, 32768)):
        assert sh.choose_plan(T, d).kernel == "split", (T, d)
        x = torch.randn((T, 2 * d), device="cuda", dtype=torch.bfloat16)
        res = check_provider(op, "triton", Case(f"T{T}-d{d}", (x, STD_MULTIPLIER, "tanh")))
        assert res.passed, res.summary()


@pytest.mark.interpreter
@pytest.mark.filterwarnings(NATIVE_EMPTY_WARNING)
@pytest.mark.parametrize("kernel", ["looped", "split"])
def test_interpreter_chunked_kernels_contract_matrix(kernel, monkeypatch):
    """fp16 through the looped or the split kernels at every width, in chunks that cut every row wider
    than 16 in 2-4 (the split kernels combine 2-4 chunk statistics per row)."""
    chunk = lambda D: 16 if D <= 31 else 64 if D <= 128 else 512  # noqa: E731
    monkeypatch.setattr(sh, "choose_plan", lambda T, D, sms: sh.SparsePlan(kernel, chunk(D), 4))
    _assert_matrix("cpu", torch.float16, quick=True)


@pytest.mark.gpu
@pytest.mark.filterwarnings(NATIVE_EMPTY_WARNING)
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("kernel", ["looped", "split"])
def test_gpu_chunked_kernels_contract_matrix(kernel, dtype, monkeypatch):
    """The full matrix through the looped or the split kernels at every width and T, in their shipped
    configuration (the heuristic uses them for wide rows only); the 4096-wide chunks cut the rows
    from d = 8192 up."""
    monkeypatch.setattr(sh, "choose_plan", lambda T, D, sms: sh.default_plan(kernel, T, D, sms))
    _assert_matrix("cuda", dtype, quick=False)


@pytest.mark.interpreter
def test_split_kernels_combine_chunks_of_unequal_length():
    """d = 100 in chunks of 32: three full chunks and one of 4, the statistics weighted by length;
    a row with its outliers in the short chunk checks the weighting."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 200, generator=gen).to(torch.float16)
    x[:, 96:100] *= 20
    expected = op.native(x, STD_MULTIPLIER, "tanh")
    actual = sparse_launch.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", sh.SparsePlan("split", 32, 1))
    assert RowBitwise().check(actual, expected).extra["differing_rows"] == 0


def test_looped_kernel_keeps_the_gate_in_l2_only_for_the_widest_rows():
    # 0.90-0.91x the time at d = 32768, 1.006-1.026x at d = 8192-16384 (docs/heuristics.md)
    assert [sh.looped_keep_gate(d) for d in (8192, 12288, 16384, 16385, 32768)] == [False] * 3 + [True] * 2


def test_plan_rejects_an_unknown_kernel():
    with pytest.raises(ValueError, match=r"kernel must be one of \('whole', 'looped', 'split'\), got 'tiled'"):
        sh.SparsePlan("tiled", 8, 1)


# ------------------------------------------------- the roundtrips are needed
def _heavy_tailed(T, d, dtype, device):
    """Gate with a log-normal scale per element: outliers make gate - cutoff inexact in fp16/bf16."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, 2 * d, generator=gen)
    x[:, :d] *= torch.exp(torch.randn(T, d, generator=gen))
    return x.to(dtype).to(device)


def _ablate(x, boundary):
    expected = op.native(x, STD_MULTIPLIER, "tanh")
    mask = sparse_gelu_kernel.ROUND_ALL & ~sparse_gelu_kernel.ROUND_BOUNDARIES.get(boundary, 0)
    plan = dataclasses.replace(sh.choose_plan(*x.shape, 132), round_mask=mask)
    actual = sparse_launch.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", plan)
    return RowBitwise().check(actual, expected)


# Interpreter, fp16, T = 512, d = 64 (rows that must all match), rows differing
# when only that roundtrip is skipped: mean 18, std 109, std*m 127,
# mean+std*m 314, gate-cutoff 10, gelu 195 (zero-mask mismatches: 1 for std*m).
@pytest.mark.interpreter
@pytest.mark.parametrize("boundary", ["all-kept", *sparse_gelu_kernel.ROUND_BOUNDARIES])
def test_interpreter_each_roundtrip_is_needed(boundary):
    res = _ablate(_heavy_tailed(512, 64, torch.float16, "cpu"), boundary)
    print(f"\nskip {boundary}: {res.detail}")
    assert res.passed == (boundary == "all-kept"), res.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("boundary", ["all-kept", *sparse_gelu_kernel.ROUND_BOUNDARIES])
@pytest.mark.parametrize("d", [64, 4096])
def test_gpu_each_roundtrip_is_needed(boundary, dtype, d):
    """Skipping any one roundtrip makes more rows differ than the contract allows (counts printed)."""
    res = _ablate(_heavy_tailed(2048, d, dtype, "cuda"), boundary)
    print(f"\n{SHORT[dtype]} d={d} skip {boundary}: {res.detail}")
    assert res.passed == (boundary == "all-kept"), res.summary()


# -------------------------------------------------------- contract classes
def test_row_bitwise_counts_rows_and_allows_a_fraction():
    e = torch.randn(2048, 256, dtype=torch.float16)
    a = e.clone()
    a[5, 3] = a[5, 3] * 2
    a[9, 0] = 0.0
    res = RowBitwise().check(a, e)
    assert res.passed and res.extra == {"rows": 2048, "differing_rows": 2, "zero_mask_mismatches": 1}
    a[11, 1] = -a[11, 1]
    assert not RowBitwise().check(a, e).passed  # 3 > floor(2048 * 0.001)
    a = -e  # systematic: every row differs
    assert RowBitwise().check(a, e).extra["differing_rows"] == 2048 and not RowBitwise().check(a, e).passed


def test_row_bitwise_narrow_rows_must_all_match_and_zero_signs_count():
    e = torch.zeros(4096, 128, dtype=torch.bfloat16)
    a = e.clone()
    a[7, 0] = -0.0
    res = RowBitwise().check(a, e)
    assert not res.passed and res.extra["differing_rows"] == 1
    assert RowBitwise().check(torch.zeros(1, 4096), torch.ones(1, 4096)).passed  # one row of slack per call


def test_zero_mask_tolerance_fails_on_a_tiny_value_for_an_exact_zero():
    e = torch.zeros(4, 31)
    a = e.clone()
    a[1, 2] = 1e-9  # within Tolerance, but the sparsity mask differs
    assert not ZeroMaskTolerance().check(a, e).passed
    assert ZeroMaskTolerance().check(torch.zeros(2, 256) + 1e-9 * (torch.arange(256) == 0), torch.zeros(2, 256)).passed


# --------------------------------------------------------------- bad input
def test_bad_arguments_name_themselves():
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match=r"gelu_and_mul_sparse: x's last dimension must be even \(2\*d\), got 7"):
        op(torch.randn(3, 7), 1.0, "tanh")
    with pytest.raises(TypeError, match="gelu_and_mul_sparse: x must be float16, bfloat16 or float32"):
        op(torch.ones(3, 8, dtype=torch.int32), 1.0, "tanh")
    with pytest.raises(ValueError, match="gelu_and_mul_sparse: approximate must be 'none' or 'tanh', got 'erf'"):
        op(x, 1.0, "erf")
    with pytest.raises(TypeError, match="gelu_and_mul_sparse: std_multiplier must be a Python float.*got Tensor"):
        op(x, torch.tensor(1.0), "tanh")


# ---------------------------------------------------------------- fallbacks
@pytest.mark.interpreter
@pytest.mark.parametrize(
    ("make", "provider"),
    [
        (lambda: torch.randn(2, 2 * 32768, dtype=torch.float16), "triton"),
        (lambda: torch.randn(2, 2 * 32769, dtype=torch.float16), "native"),  # d > 32768
        (lambda: torch.randn(8, 64)[:, ::2], "native"),  # last-dim stride 2
        (lambda: torch.randn(3, 4, 16).transpose(0, 1), "native"),  # rows not viewable as 2-D
        (lambda: torch.randn(4, 64, dtype=torch.bfloat16), "native"),  # no bf16 in the interpreter
        (lambda: torch.randn(5, 40)[:, :32], "triton"),  # 2-D rows with a stride
    ],
    ids=["d32768", "d32769", "last-stride-2", "non-viewable-3d", "bf16-interpreter", "strided-rows"],
)
def test_which_provider_runs(make, provider):
    x = make()
    with op.priority(["triton", "native"]):
        assert op.select(x, STD_MULTIPLIER, "tanh").name == provider
        if provider == "native":
            assert torch.equal(op(x, STD_MULTIPLIER, "tanh"), op.native(x, STD_MULTIPLIER, "tanh"))


@pytest.mark.parametrize(
    ("d", "T", "expected"),
    [
        (1, 1, (1024, 1, 8)),
        (31, 1, (32, 32, 8)),
        (1000, 1, (1, 1024, 8)),
        (4096, 1, (1, 4096, 16)),
        (32768, 1, (1, 32768, 32)),
        (2048, 132, (1, 2048, 16)),  # one program per SM: more warps per row
        (2048, 133, (1, 2048, 8)),
        (2048, 396, (1, 2048, 4)),  # three programs per SM: fewer
        (8192, 256, (1, 8192, 16)),
        (1, 1024 * 396, (1024, 1, 4)),  # stacked rows count as programs
    ],
)
def test_launch_heuristic(d, T, expected):
    assert sh.sparse_config(d, T) == expected


@pytest.mark.parametrize(
    ("T", "d", "kernel"),
    [
        (1024, 8192, "looped"),
        (2048, 12288, "looped"),
        (4096, 32768, "looped"),
        (1023, 12288, "whole"),
        (4096, 4096, "whole"),
        (1, 8192, "whole"),
        (1, 8193, "split"),
        (16, 16384, "split"),
        (17, 16384, "whole"),
        (64, 16385, "split"),
        (65, 32768, "whole"),
    ],
)
def test_kernel_choice(T, d, kernel):
    """Wide rows loop in large batches and split across programs in small ones."""
    chosen = sh.choose_plan(T, d)
    assert chosen.kernel == kernel
    if kernel == "whole":
        assert (chosen.block, chosen.num_warps) == sh.sparse_config(d, T)[1:]


def test_launch_heuristic_rejects_widths_beyond_the_kernel():
    with pytest.raises(ValueError, match=r"d must be in \[1, 32768\] for the Triton kernel, got 32769"):
        sh.sparse_config(32769)


# -------------------------------------------------------------------- layer
def _hf_reference(x, sparsity, approximate):
    """Hugging Face Gemma3n's sequence: the icdf tensor cast to the activation dtype."""
    d = x.shape[-1] // 2
    gate, up = x[..., :d], x[..., d:]
    m = torch.distributions.Normal(0, 1).icdf(torch.tensor(sparsity, dtype=torch.float32)).type(x.dtype)
    cutoff = gate.mean(-1, keepdim=True) + gate.std(-1, keepdim=True, unbiased=False) * m
    return F.gelu(F.relu(gate - cutoff), approximate=approximate) * up


@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_layer_multipliers(dtype):
    exact = exactfuse.GeluAndMulSparse(0.95)
    hf = exactfuse.GeluAndMulSparse(0.95, multiplier="hf")
    assert exact.std_multiplier == pytest.approx(1.6448536, abs=1e-6)
    assert exact.multiplier_for(dtype) == exact.std_multiplier
    assert hf.multiplier_for(dtype) == float(torch.tensor(exact.std_multiplier).to(dtype))
    x = torch.randn(6, 2, 128).to(dtype)
    assert torch.equal(hf(x), _hf_reference(x, 0.95, "tanh"))
    assert torch.equal(exact(x), op.native(x, exact.std_multiplier, "tanh"))


@pytest.mark.parametrize("sparsity", [0.0, 1.0, -0.5, 1.5, math.nan])
def test_layer_rejects_sparsity_outside_the_open_unit_interval(sparsity):
    with pytest.raises(ValueError, match=r"activation_sparsity must be in \(0, 1\).*use GeluAndMul"):
        exactfuse.GeluAndMulSparse(sparsity)


def test_layer_rejects_unknown_options():
    with pytest.raises(ValueError, match="multiplier must be 'exact' or 'hf', got 'vllm'"):
        exactfuse.GeluAndMulSparse(0.95, multiplier="vllm")
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        exactfuse.GeluAndMulSparse(0.95, approximate="fast")


@pytest.mark.interpreter
def test_warmup_runs_the_launcher():
    assert exactfuse.warmup("gelu_and_mul_sparse", dtypes=(torch.float16,), device="cpu", widths=(8,)) == [
        "gelu_and_mul_sparse"
    ]


@pytest.mark.interpreter
def test_warmup_compiles_every_kernel_the_choice_uses(monkeypatch):
    monkeypatch.setattr(sh, "warmup_batches", lambda D, num_sms: (1, 2, 3, 4))
    choices = {(1, 16): ("split", 8, 1), (3, 16): ("looped", 8, 1), (4, 16): ("whole", 16, 2)}
    monkeypatch.setattr(sh, "choose_plan", lambda T, D, sms: sh.SparsePlan(*choices.get((T, D), ("whole", D, 1))))
    calls = []
    launch = sparse_launch.launch_gelu_and_mul_sparse
    monkeypatch.setattr(
        sparse_launch, "launch_gelu_and_mul_sparse", lambda x, *a, **k: calls.append(x.shape) or launch(x, *a, **k)
    )
    exactfuse.warmup("gelu_and_mul_sparse", dtypes=(torch.float16,), device="cpu", widths=(8, 16))
    # d = 8: one launch for all four batches; d = 16: one per distinct choice
    assert calls == [(1, 16), (1, 32), (2, 32), (3, 32), (4, 32)]


def test_warmup_batches_reach_every_load_class_and_kernel():
    for d in (1, 500, 2048, 8192, 12288, 32768):
        bt = sh.sparse_config(d)[0]
        batches = {*range(1, 2 * sh.LOOP_MIN_T), *range(bt, bt * 4 * 132, bt)}
        assert {sh.choose_plan(T, d) for T in sh.warmup_batches(d)} == {sh.choose_plan(T, d) for T in batches}, d


# --------------------------------------------------- compile, graphs, AOT
@pytest.mark.gpu
def test_gpu_opcheck_and_compile_fullgraph():
    x = torch.randn(64, 2 * 4096, dtype=torch.bfloat16, device="cuda")
    torch.library.opcheck(op.torch_op, (x, STD_MULTIPLIER, "tanh"))
    layer = exactfuse.GeluAndMulSparse(0.95)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)
    for T in (64, 17):
        assert torch.equal(compiled(x[:T]), layer(x[:T]))


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_and_replay():
    exactfuse.warmup("gelu_and_mul_sparse", widths=(8192,))
    x = torch.randn(16, 2 * 8192, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = op(x, STD_MULTIPLIER, "tanh")
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, op.run_provider("triton", x, STD_MULTIPLIER, "tanh"))
        assert RowBitwise().check(y, op.native(x, STD_MULTIPLIER, "tanh")).passed


@pytest.mark.gpu
@pytest.mark.big_memory
def test_gpu_int64_row_offsets():
    """T * 2d >= 2**31 switches on 64-bit offsets; the last rows must still be right."""
    T, d = 32769, 32768
    x = torch.randn(T, 2 * d, dtype=torch.bfloat16, device="cuda")
    with exactfuse.poison_outputs():
        out = sparse_launch.gelu_and_mul_sparse_triton(x, STD_MULTIPLIER, "tanh")
    for rows in (slice(0, 64), slice(T - 64, T)):
        assert RowBitwise().check(out[rows], op.native(x[rows], STD_MULTIPLIER, "tanh")).passed
    assert not out.isnan().any()
