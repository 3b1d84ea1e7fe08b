"""silu_and_mul / gelu_and_mul and silu_mul / gelu_mul: contract matrix, bad inputs, fallbacks, layers,
CUDA graphs."""

import pytest
import torch

import exactfuse
from exactfuse.ops.act_and_mul import gated_kernel, gelu_and_mul, gelu_mul, silu_and_mul, silu_mul
from exactfuse.ops.act_and_mul import heuristics as act_heuristics
from exactfuse.ops.act_and_mul import launch as act_launch
from exactfuse.registry import NoProviderError, platform
from exactfuse.testing import CompileWatch, assert_contract_matrix

X_OPS = {"silu_and_mul": silu_and_mul, "gelu_and_mul": gelu_and_mul}  # x [..., 2d]
PAIR_OPS = {"silu_mul": silu_mul, "gelu_mul": gelu_mul}  # gate, up [..., d]
OPS = X_OPS | PAIR_OPS
SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def _assert_cases_pass(op, device, dtype, quick):
    assert_contract_matrix(op, device, dtype, quick=quick)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_interpreter_contract(name, dtype):
    _assert_cases_pass(OPS[name], "cpu", dtype, quick=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("name", sorted(OPS))
def test_gpu_bitwise_matrix(name, dtype):
    """T in {0,1,7,83,2048} x d in {1,31,512,13824}, N-D, NaN/Inf, both GELU forms."""
    _assert_cases_pass(OPS[name], "cuda", dtype, quick=False)


@pytest.mark.gpu
@pytest.mark.big_memory
def test_gpu_int64_offsets():
    """numel >= 2**31 switches on 64-bit offsets; the last rows must still be right."""
    T, d = 32768 + 3, 32768  # x: 2**31 + 196608 elements of bf16 (4.3 GB)
    x = torch.randn(T, 2 * d, dtype=torch.bfloat16, device="cuda")
    assert x.numel() >= 2**31
    with exactfuse.poison_outputs():
        out = act_launch.silu_and_mul_triton(x)
    tail = slice(T - 64, T)
    assert torch.equal(out[tail], silu_and_mul.native(x[tail]))
    head = slice(0, 64)
    assert torch.equal(out[head], silu_and_mul.native(x[head]))
    assert not torch.isnan(out).any()
    with exactfuse.poison_outputs():  # the two-tensor path over the halves: the same rows
        pair = act_launch.silu_mul_triton(x[:, :d], x[:, d:])
    assert torch.equal(pair, out)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", sorted(X_OPS))
def test_odd_last_dim_is_an_error(name):
    with pytest.raises(ValueError, match=r"x's last dimension must be even \(2\*d\), got 7"):
        X_OPS[name](torch.randn(3, 7))


@pytest.mark.parametrize("name", sorted(X_OPS))
def test_wrong_dtype_is_an_error(name):
    with pytest.raises(TypeError, match="x must be float16, bfloat16 or float32, got torch.int32"):
        X_OPS[name](torch.ones(3, 8, dtype=torch.int32))


@pytest.mark.parametrize("name", sorted(X_OPS))
def test_zero_dim_is_an_error(name):
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        X_OPS[name](torch.tensor(1.0))


@pytest.mark.parametrize("name", sorted(PAIR_OPS))
def test_gate_and_up_errors_name_the_argument(name):
    g = torch.randn(3, 8)
    bad = [
        ((g, torch.randn(3, 7)), ValueError, r"up must have gate's shape \[3, 8\], got \[3, 7\]"),
        ((g, torch.randn(3, 8).double()), TypeError, "up must be float16, bfloat16 or float32, got torch.float64"),
        ((g, g.half()), TypeError, "up must have gate's dtype torch.float32, got torch.float16"),
        ((torch.ones(3, 8, dtype=torch.int32), g), TypeError, "gate must be float16, bfloat16 or float32"),
        ((torch.tensor(1.0), g), ValueError, "gate must have at least 1 dimension"),
        ((g, g.tolist()), TypeError, "up must be a torch.Tensor, got list"),
    ]
    for args, error, match in bad:
        with pytest.raises(error, match=match):
            PAIR_OPS[name](*args)


@pytest.mark.interpreter
def test_the_halves_of_one_tensor_run_the_kernel_as_two_tensors():
    x = torch.randn(6, 80)
    gate, up = x[:, :40], x[:, 40:]  # rows 80 apart
    with silu_mul.priority(["triton"]), silu_and_mul.priority(["triton"]):
        assert silu_mul.select(gate, up).name == "triton"
        assert torch.equal(silu_mul(gate, up), silu_and_mul(x))
    transposed = torch.randn(3, 4, 40).transpose(0, 1)
    with silu_mul.priority(["triton", "native"]):
        assert silu_mul.select(transposed, transposed).name == "native"  # rows not viewable as 2-D


def test_bad_approximate_is_an_error():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'erf'"):
        gelu_and_mul(torch.randn(2, 4), "erf")
    with pytest.raises(ValueError, match="approximate"):
        exactfuse.GeluAndMul("fast")


def test_cpu_tensor_with_triton_forced_is_an_error(monkeypatch):
    # Triton available here (a GPU, or the interpreter), but not for a CPU tensor once the interpreter is
    # off. The platform verdict is read before the patch: it is kept for the process (functools.cache), and
    # read under the patch it would make Triton unavailable for every later test of the worker
    assert silu_and_mul.providers["triton"].available
    monkeypatch.setattr(platform, "interpreter_enabled", lambda: False)
    x = torch.randn(4, 16)
    with silu_and_mul.priority(["triton"]), pytest.raises(NoProviderError) as err:
        silu_and_mul(x)
    msg = str(err.value)
    assert "x=Tensor[4, 16] float32 cpu" in msg
    assert "triton: x is a CPU tensor and TRITON_INTERPRET=1 is not set" in msg


def test_non_contiguous_input_falls_back_to_native():
    x = torch.randn(3, 4, 16).transpose(0, 1)  # rows not viewable as 2-D without a copy
    with silu_and_mul.priority(["triton", "native"]):
        assert silu_and_mul.select(x).name == "native"
        assert torch.equal(silu_and_mul(x), silu_and_mul.native(x))


@pytest.mark.interpreter
def test_strided_2d_rows_use_triton():
    base = torch.randn(5, 40)
    x = base[:, :32]  # row stride 40, last dim contiguous
    with silu_and_mul.priority(["triton"]):
        assert silu_and_mul.select(x).name == "triton"
        torch.testing.assert_close(silu_and_mul(x), silu_and_mul.native(x))


# ------------------------------------------------------------------ heuristic
@pytest.mark.parametrize(
    ("T", "d", "expected"),
    [
        (1, 1, (1024, 1, 8)),
        (4096, 31, (32, 32, 8)),
        (1, 512, (2, 512, 8)),
        (16, 768, (4, 256, 8)),  # BD = 1024 would mask a quarter of the row
        (4096, 768, (4, 256, 4)),
        (1, 1536, (2, 512, 8)),
        (1, 640, (1, 1024, 8)),  # 128 divides 640: too narrow a block, keep the padded one
        (2**20 // 13824 + 1, 13824, (1, 1024, 4)),
        (2**20 // 13824, 13824, (1, 1024, 8)),
    ],
)
def test_launch_heuristic(T, d, expected):
    assert act_heuristics.act_and_mul_config(d, T) == expected
    assert act_heuristics.act_and_mul_config(d) == (*expected[:2], 8)  # traced: the same tile, 8 warps


def test_flat_index_rule():
    assert act_heuristics.flat_index(4096, 4096) and act_heuristics.flat_index(768, 32768)
    assert not act_heuristics.flat_index(768, 4096) and not act_heuristics.flat_index(14336, 256)
    assert not act_heuristics.flat_index(14336)  # traced: the tile for every T
    assert not act_heuristics.flat_index(4096, 4096, fast_math=False)  # exact math: the tile


def _flat_cases(device, dtype):
    """Joined x (contiguous and with a row stride) and separate gate/up, ragged widths."""
    for T, d in ((5, 37), (3, 512), (9, 1)):
        x = torch.randn(T, 2 * d + 6, device=device, dtype=dtype)[:, : 2 * d]
        yield f"T{T}-d{d}-strided", (x,), "silu_and_mul"
        yield f"T{T}-d{d}", (x.contiguous(),), "gelu_and_mul"
        yield f"T{T}-d{d}-pair", (x[:, :d], x[:, d:]), "silu_mul"


def _assert_flat_equals_tile(monkeypatch, device, dtype):
    for case, args, name in _flat_cases(device, dtype):
        op = OPS[name]
        tile = op.run_provider("triton", *args)
        monkeypatch.setattr(act_launch, "flat_index", lambda D, T, fast_math=True: T is not None)  # forced
        with exactfuse.poison_outputs():
            flat = op.run_provider("triton", *args)
        monkeypatch.undo()
        assert torch.equal(flat, tile), case
        if device == "cuda":
            assert torch.equal(flat, op.native(*args)), case


@pytest.mark.interpreter
def test_flat_index_gives_the_tiles_bits(monkeypatch):
    _assert_flat_equals_tile(monkeypatch, "cpu", torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_flat_index_bitwise(monkeypatch, dtype):
    _assert_flat_equals_tile(monkeypatch, "cuda", dtype)
    x = torch.randn(4096, 2 * 4096, device="cuda", dtype=dtype)  # the rule's choice at 2^24 outputs
    with exactfuse.poison_outputs():
        assert torch.equal(silu_and_mul(x), silu_and_mul.native(x))


# --------------------------------------------------------------------- layers
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_layers_match_native(approximate):
    x = torch.randn(2, 3, 64)
    assert torch.equal(exactfuse.SiluAndMul()(x), silu_and_mul.native(x))
    layer = exactfuse.GeluAndMul(approximate)
    assert torch.equal(layer(x), gelu_and_mul.native(x, approximate))
    assert approximate in repr(layer)


# ------------------------------------------------------ warmup and CUDA graphs
class _Mlp(torch.nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.up1 = torch.nn.Linear(hidden, 2 * inter)
        self.down1 = torch.nn.Linear(inter, hidden)
        self.up2 = torch.nn.Linear(hidden, 2 * inter)
        self.down2 = torch.nn.Linear(inter, hidden)
        self.act1 = exactfuse.SiluAndMul()
        self.act2 = exactfuse.GeluAndMul("tanh")

    def forward(self, x):
        x = self.down1(self.act1(self.up1(x)))
        return self.down2(self.act2(self.up2(x)))


@pytest.mark.gpu
@torch.no_grad()
def test_warmup_then_cuda_graph_replay_matches_eager():
    torch.manual_seed(0)
    model = _Mlp(256, 352).cuda().to(torch.bfloat16)
    exactfuse.warmup(["silu_and_mul", "gelu_and_mul"], dtypes=(torch.bfloat16,), widths=(352,))
    watch = CompileWatch(gated_kernel.act_and_mul_kernel)
    static_x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # cuBLAS workspace, not Triton: warmup did that
        model(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    assert watch.new() == [[]], f"compiled during capture:\n{watch}"
    for _ in range(3):
        x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
        static_x.copy_(x)
        graph.replay()
        eager = model(x)
        assert torch.equal(static_y, eager)
    # a prefill-sized batch (T * d >= 2^20: the heuristic's other num_warps) was warmed up too
    model(torch.randn(4096, 256, device="cuda", dtype=torch.bfloat16))
    assert watch.new() == [[]], f"warmup missed the large-batch config:\n{watch}"


@pytest.mark.interpreter
def test_no_provider_error_says_why_each_provider_declined():
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    with silu_and_mul.priority(["triton"]), pytest.raises(NoProviderError) as err:
        silu_and_mul(x)
    assert "triton: x is bfloat16 on the CPU: the Triton interpreter has no bf16 arithmetic" in str(err.value)
    strided = torch.randn(2, 3, 32)[:, :, :16]
    reason = silu_and_mul.providers["triton"].accepts(strided)
    assert reason.startswith("x has strides (96, 32, 1)"), reason


def test_gate_up_check_on_unbacked_sizes_asserts_instead_of_guarding():
    """The fake kernel runs the check with unbacked sizes and outside Dynamo's frame (is_compiling() is
    False there on torch 2.11): equal sizes become a run-time assertion, not a data-dependent guard."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from exactfuse.ops.act_and_mul.checks import check_gate_up

    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        t0, t1 = shape_env.create_unbacked_symint(), shape_env.create_unbacked_symint()
        gate, up = torch.empty(t0, 8), torch.empty(t1, 8)
        check_gate_up("silu_mul", gate, up)
        with pytest.raises(ValueError, match="up must have gate's shape"):
            check_gate_up("silu_mul", gate, torch.empty(t1, 6))
