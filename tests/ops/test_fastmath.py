"""Fast 16-bit activation formulas admitted by exhaustive proof (``exactfuse.ops.fastmath``): the
mechanism on the CPU (interpreter), every proof and the kernels bit for bit on the GPU."""

import logging

import pytest
import torch

from exactfuse.ops import fastmath
from exactfuse.ops.act_and_mul import gelu_and_mul, gelu_mul, silu_and_mul, silu_mul
from exactfuse.ops.act_and_mul import launch as act_launch
from exactfuse.ops.math import activation as kernel_activation
from exactfuse.testing.on_device import bit_identical

HALF = {torch.float16: "fp16", torch.bfloat16: "bf16"}


@pytest.fixture(autouse=True)
def _fresh_proofs():
    fastmath.clear_proofs()
    yield
    fastmath.clear_proofs()


# ------------------------------------------------------------ the mechanism (CPU)
def test_any_nan_matches_any_nan_and_bits_decide_the_rest():
    nan_a = torch.tensor([0x7E00], dtype=torch.int16).view(torch.float16)  # the canonical NaN
    nan_b = torch.tensor([-0x0001], dtype=torch.int16).view(torch.float16)  # 0xFFFF: another NaN
    actual = torch.cat([nan_a, nan_a, torch.tensor([0.0, 1.0, 2.0], dtype=torch.float16)])
    expected = torch.cat([nan_b, torch.tensor([1.0, -0.0, 1.0, 2.0], dtype=torch.float16)])
    assert fastmath.differing(actual, expected).tolist() == [False, True, True, False, False]


def test_all_inputs_is_every_bit_pattern_once():
    x = fastmath.all_inputs(torch.float16, "cpu")
    assert x.shape == (65536,)
    assert torch.unique(x.view(torch.int16)).numel() == 65536


@pytest.mark.interpreter
def test_a_wrong_candidate_is_rejected_with_a_warning_and_the_exact_formula_stays(monkeypatch, caplog):
    # tanh-GELU offered as a SiLU: the proof must find it differs and keep the exact SiLU
    monkeypatch.setitem(fastmath.CANDIDATES, ("silu", torch.float16), (fastmath.GELU_TANH,))
    with caplog.at_level(logging.WARNING, logger="exactfuse.ops.fastmath"):
        result = fastmath.proof("silu", torch.float16, "cpu")
    assert result.formula == fastmath.SILU and not result.fast
    (check,) = result.checks
    assert check.formula == fastmath.GELU_TANH
    assert check.differing > 10000 and len(check.first) == fastmath.SHOWN
    (record,) = caplog.records
    assert "exact: libdevice tanhf" in record.getMessage() and "torch.float16" in record.getMessage()
    assert f"{check.differing} of 65,536 inputs differ" in record.getMessage()


@pytest.mark.interpreter
def test_the_first_candidate_without_a_differing_input_is_chosen(monkeypatch, caplog):
    # The exact SiLU offered as a candidate is bitwise against itself: make the reference the kernel's
    # own formula so a candidate proves; the wrong one before it is rejected, the later one not tried.
    wrong, right, later = fastmath.GELU_ERF, fastmath.SILU_EXP_FAST_DIV, fastmath.SILU_FAST
    monkeypatch.setitem(fastmath.CANDIDATES, ("silu", torch.float16), (wrong, right, later))
    monkeypatch.setattr(fastmath, "reference", lambda activation, x: _interpreter_silu(x))
    with caplog.at_level(logging.WARNING, logger="exactfuse.ops.fastmath"):
        result = fastmath.proof("silu", torch.float16, "cpu")
    assert result.formula == right and result.fast
    assert [c.formula for c in result.checks] == [wrong, right]
    assert result.checks[1].differing == 0 and result.checks[1].first == ()
    assert len(caplog.records) == 1


def _interpreter_silu(x):
    """x / (1 + exp(-x)) in fp32 with numpy's exp, as the interpreter evaluates the candidate."""
    import numpy as np

    f = x.float().numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        y = f / (np.float32(1) + np.exp(-f))
    return torch.from_numpy(y).to(x.dtype)


@pytest.mark.interpreter
def test_proofs_are_cached_per_activation_dtype_and_device(monkeypatch):
    calls = []
    real = fastmath.check_formula
    monkeypatch.setattr(fastmath, "check_formula", lambda *a: calls.append(a) or real(*a))
    first = fastmath.proof("silu", torch.float16, "cpu")
    assert fastmath.proof("silu", torch.float16, "cpu") is first
    # the candidates up to the first that proves out, each run once
    assert [c[1] for c in calls] == [check.formula for check in first.checks]
    assert [c.formula for c in first.checks] == list(fastmath.CANDIDATES["silu", torch.float16][: len(calls)])
    fastmath.proof("gelu_tanh", torch.float16, "cpu")  # no candidates: nothing run
    assert len(calls) == len(first.checks)


@pytest.mark.interpreter
def test_a_proof_inside_fake_tensor_mode_runs_on_real_tensors():
    """What a launcher traced by torch.compile / make_fx meets on its first call."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        check = fastmath.check_formula("silu", fastmath.GELU_TANH, torch.float16, "cpu")
    assert check.differing > 10000 and all(isinstance(v, float) for v in check.first)


@pytest.mark.parametrize("activation", sorted(fastmath.EXACT))
def test_fp32_is_never_proven(monkeypatch, activation):
    monkeypatch.setitem(fastmath.CANDIDATES, (activation, torch.float32), (fastmath.SILU_FAST,))
    monkeypatch.setattr(fastmath, "check_formula", lambda *a: pytest.fail("fp32 must not be proven"))
    assert fastmath.proof(activation, torch.float32, "cpu").formula == fastmath.EXACT[activation]
    assert fastmath.proof(activation, torch.float32, "cpu").checks == ()
    assert fastmath.chosen_formula(activation, torch.float32, torch.device("cuda", 0)) == fastmath.EXACT[activation]


def test_cpu_tensors_take_the_exact_formula_without_a_proof(monkeypatch):
    monkeypatch.setattr(fastmath, "check_formula", lambda *a: pytest.fail("no proof off CUDA"))
    for activation, exact in fastmath.EXACT.items():
        assert fastmath.chosen_formula(activation, torch.float16, torch.device("cpu")) == exact


def test_every_formula_belongs_to_a_known_activation_and_candidates_are_fast():
    assert {a for a, _ in fastmath.FORMULAS.values()} == set(fastmath.EXACT)
    assert act_launch.ACTIVATIONS.items() <= fastmath.EXACT.items()
    for (activation, dtype), formulas in fastmath.CANDIDATES.items():
        assert dtype in HALF
        for f in formulas:
            assert fastmath.FORMULAS[f][0] == activation and f != fastmath.EXACT[activation]


@pytest.mark.interpreter
@pytest.mark.parametrize("formula", sorted(fastmath.FORMULAS))
def test_every_formula_evaluates_its_activation_within_the_interpreter_tolerance(formula):
    """The proof's kernel over all 65,536 fp16 inputs: each formula id evaluates its own activation (CPU)."""
    activation = fastmath.FORMULAS[formula][0]
    x = fastmath.all_inputs(torch.float16, "cpu")
    y = torch.empty_like(x)
    n = fastmath.INPUTS
    fastmath.prove_kernel[(1,)](x, y, n, ACTIVATION=kernel_activation, FORMULA=formula, BLOCK=n)
    ref = fastmath.reference(activation, x.float()).half()
    finite = ref.isfinite() & x.isfinite()
    torch.testing.assert_close(y[finite], ref[finite], atol=2e-3, rtol=2e-3)


@pytest.mark.interpreter
@pytest.mark.parametrize("formula", sorted(f for f, (a, _) in fastmath.FORMULAS.items() if a in act_launch.ACTIVATIONS))
def test_the_act_kernel_runs_every_formula_within_the_interpreter_tolerance(monkeypatch, formula):
    """The launcher's FORMULA reaches the kernel: each formula of an activation evaluates it (CPU)."""
    activation = fastmath.FORMULAS[formula][0]
    monkeypatch.setattr(act_launch, "chosen_formula", lambda *a: formula)
    x = torch.randn(64, 256, dtype=torch.float16) * 4
    if activation == "silu":
        out, ref = act_launch.silu_and_mul_triton(x), silu_and_mul.native(x)
    else:
        approximate = activation.removeprefix("gelu_")
        out, ref = act_launch.gelu_and_mul_triton(x, approximate), gelu_and_mul.native(x, approximate)
    torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3)


@pytest.mark.interpreter
def test_verify_shows_one_proof_row_per_activation_and_dtype():
    from rich.console import Console

    from exactfuse_cli import verify

    assert verify._proof_table({"w4a16_gemm"}, None, torch.device("cpu")) is None
    console = Console(width=1000, record=True)  # wide enough that no row wraps
    console.print(verify._proof_table({"silu_mul", "gelu_and_mul"}, None, torch.device("cpu")))
    text = console.export_text()
    assert "fast-math proofs" in text
    rows = [line for line in text.splitlines() if line.startswith("│ ")]
    assert [r.split("│")[1:3] for r in rows] == [
        [f" {a:<10} ", f" {d:<5} "] for a in ("silu", "gelu_none", "gelu_tanh") for d in ("fp16", "bf16", "fp32")
    ]
    assert "eager's fp16 result at -2.7246, -4.9219:" in rows[0]  # the first fp16 candidate's check
    assert "fp32 is never proven" in rows[2]


# ------------------------------------------------------------------- the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(HALF), ids=list(HALF.values()))
@pytest.mark.parametrize("activation", sorted(fastmath.EXACT))
def test_gpu_proof(activation, dtype):
    """Every listed candidate's proof on this GPU: the first one is admitted (a failure here means the
    kernels run the exact formula and CANDIDATES should say so), and the exact formula is bitwise."""
    result = fastmath.proof(activation, dtype, "cuda")
    candidates = fastmath.CANDIDATES.get((activation, dtype), ())
    failed = [f"{c.name}: {c.summary()}" for c in result.checks if c.differing]
    assert not failed, f"{activation} {HALF[dtype]}: {failed}"
    assert result.formula == (candidates[0] if candidates else fastmath.EXACT[activation])
    exact = fastmath.check_formula(activation, fastmath.EXACT[activation], dtype, "cuda")
    assert exact.differing == 0, f"{exact.name}: {exact.summary()}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(HALF), ids=list(HALF.values()))
@pytest.mark.parametrize("name", ["silu_and_mul", "silu_mul", "gelu_and_mul", "gelu_mul"])
def test_gpu_kernel_bitwise_on_every_gate_value(name, dtype):
    """All 65,536 gate values (rows of 4096) times random up values, through the op's Triton provider
    with the chosen formula, against eager, for each GELU form."""
    op = {"silu_and_mul": silu_and_mul, "silu_mul": silu_mul, "gelu_and_mul": gelu_and_mul, "gelu_mul": gelu_mul}
    gate = fastmath.all_inputs(dtype, "cuda").view(16, 4096)
    up = torch.randn(16, 4096, device="cuda").to(dtype)
    forms = [{}] if name.startswith("silu") else [{"approximate": "none"}, {"approximate": "tanh"}]
    for kwargs in forms:
        args = (torch.cat([gate, up], dim=-1),) if name.endswith("and_mul") else (gate, up)
        out = op[name].providers["triton"].fn(*args, **kwargs)
        ref = op[name].native(*args, **kwargs)
        assert bit_identical(out, ref), f"{name} {HALF[dtype]} {kwargs}: {fastmath.differing(out, ref).sum()} differ"
    if name.startswith("silu"):
        assert fastmath.chosen_formula("silu", dtype, gate.device) == fastmath.CANDIDATES["silu", dtype][0]


@pytest.mark.gpu
def test_gpu_capture_before_any_proof_takes_the_exact_formula(monkeypatch, caplog):
    x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    with monkeypatch.context() as m:  # compile the exact kernel first: nothing may compile in the capture
        m.setattr(act_launch, "chosen_formula", lambda *a: fastmath.SILU)
        exact_y = act_launch.silu_and_mul_triton(x)
    graph = torch.cuda.CUDAGraph()
    with caplog.at_level(logging.WARNING, logger="exactfuse.ops.fastmath"), torch.cuda.graph(graph):
        y = act_launch.silu_and_mul_triton(x)
    graph.replay()
    assert torch.equal(y, exact_y) and torch.equal(y, silu_and_mul.native(x))
    assert "exactfuse.warmup" in caplog.text
    assert fastmath._CHOSEN == {}  # nothing cached: the next eager call proves
    act_launch.silu_and_mul_triton(x)
    chosen = fastmath.chosen_formula("silu", torch.bfloat16, x.device)
    assert chosen == fastmath.CANDIDATES["silu", torch.bfloat16][0] and len(fastmath._CHOSEN) == 1


@pytest.mark.gpu
def test_gpu_proof_under_fake_tensor_tracing():
    """make_fx traces the launcher on fake tensors: the proof runs on real ones, the graph keeps it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    gm = make_fx(lambda t: torch.ops.exactfuse.silu_and_mul(t), tracing_mode="fake")(x)
    assert fastmath.proof("silu", torch.bfloat16, "cuda").checks  # proven during the trace
    assert bit_identical(gm(x), silu_and_mul.native(x))
