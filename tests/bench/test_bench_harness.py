"""The bench harness on the CPU: grids, the correctness gate, rows, the CLI (result files:
test_bench_results.py). Nothing is timed: the op and the timer are tests/support/bench_fakes.py's."""

from __future__ import annotations

import argparse
import io

import pytest
import torch
from rich.console import Console

import exactfuse_cli
from exactfuse.bench import gate, resources
from exactfuse.bench.runner import bench_op, expand_grid
from exactfuse.bench.timing import recompile_limits, rotation_count
from exactfuse.registry import OPS, Case, LazyCase
from exactfuse_cli import bench as bench_cli
from support.bench_fakes import (
    BUILT,
    CALLS,
    FAKE_KERNEL,
    ROOF,
    SEEN_PTRS,
    SHAPES,
    bench_config,
    fake_timer,
    rows_by_case,
)


# ------------------------------------------------------------------ grids
def test_expand_grid_gives_the_declared_cases_in_the_dtype(fake_op):
    cases = expand_grid(fake_op, "default", "cpu", torch.float16)
    assert [c.id for c in cases] == ["n8", "n64", "n512"]
    assert all(c.args[0].dtype == torch.float16 for c in cases)
    assert [c.id for c in expand_grid(fake_op, "quick", "cpu", torch.float32)] == ["n8"]


def test_expand_grid_errors_name_the_grid(fake_op):
    with pytest.raises(
        KeyError, match="no bench grid 'huge'; declared grids: \\['badref', 'default', 'dup', 'lazy', 'quick'\\]"
    ):
        expand_grid(fake_op, "huge", "cpu", torch.float32)
    with pytest.raises(ValueError, match="repeats case id 'a'"):
        expand_grid(fake_op, "dup", "cpu", torch.float32)


def test_lazy_cases_are_built_one_at_a_time_and_only_when_selected(fake_op):
    BUILT.clear()
    assert [c.id for c in expand_grid(fake_op, "lazy", "cpu", torch.float32)] == list(SHAPES) and not BUILT
    rows = bench_op(fake_op, torch.float32, bench_config(grid="lazy", case_pattern="/n8$"), timer=fake_timer,
                    roofline=ROOF)  # fmt: skip
    assert (
        BUILT == ["n8"]
        and {r.shape for r in rows} == {"n8"}
        and not any(r.note.startswith("reference failed") for r in rows)
    )
    wrong = LazyCase("a", lambda: Case("b", ()))
    with pytest.raises(ValueError, match="lazy case 'a' built a case with id 'b'"):
        wrong.materialize()


@pytest.mark.parametrize(("name", "count"), [("sparse_paged_attention", 30), ("short_conv", 17),
                                           ("causal_conv1d", 5), ("causal_conv1d_update", 10)])  # fmt: skip
def test_large_grids_name_their_cases_without_building_them(name, count):
    cases = expand_grid(OPS[name], "default", "cpu", torch.bfloat16)
    assert all(isinstance(c, LazyCase) for c in cases) and len(cases) == count


@pytest.mark.parametrize("name", ["silu_and_mul", "gelu_and_mul"])
def test_activation_grids_expand_on_meta(name):
    cases = expand_grid(OPS[name], "default", "meta", torch.bfloat16)
    assert len(cases) == 15 and cases[0].id == "T1-d768" and cases[-1].id == "T32768-d14336"
    quick = expand_grid(OPS[name], "quick", "meta", torch.bfloat16)
    assert {c.id for c in quick} <= {c.id for c in cases} and quick


@pytest.mark.parametrize("name", sorted(n for n in OPS if not n.startswith("bench_test_")))
def test_every_op_declares_default_and_quick_grids_and_bytes(name):
    assert {"default", "quick"} <= set(OPS[name].grids), f"{name}: grids {sorted(OPS[name].grids)}"
    assert OPS[name].bytes_fn is not None, f"{name}: no op.cost(bytes=...) for the roofline"


# ------------------------------------------------------------------- gate
def test_gate_refuses_a_wrong_provider_and_never_times_it(fake_op):
    CALLS.clear()
    rows = rows_by_case(fake_op)
    for shape in SHAPES:
        wrong = rows[(shape, "wrong")]
        assert wrong.status == "failed" and wrong.time_us is None and wrong.pct_roofline is None
        assert wrong.mismatches == 1 and "FAIL Bitwise" in wrong.note
    assert CALLS["wrong"] == len(SHAPES)  # the gate's single call per shape, no timing calls


def test_rows_of_correct_skipped_broken_and_peer_providers(fake_op):
    rows = rows_by_case(fake_op)
    good = rows[("n64", "good")]
    assert (good.status, good.contract, good.max_ulp) == ("ok", "Bitwise", 0)
    assert good.time_us == pytest.approx(1000.0) and good.speedup_vs_native == pytest.approx(2.0)
    assert good.bytes == 2 * 64 * 4 and good.roofline_us == pytest.approx(512 / 1e12 * 1e6)
    assert good.pct_roofline == pytest.approx(100 * 512e-12 / 1e-3)
    assert rows[("n64", "native")].status == "reference" and rows[("n64", "native")].speedup_vs_native == 1.0
    assert rows[("n64", "picky")].status == "ok" and rows[("n512", "picky")].status == "skipped"
    broken = rows[("n8", "broken")]
    assert broken.status == "error" and "RuntimeError: launch failed" in broken.note
    peer = rows[("n8", "fakepeer")]
    assert (peer.kind, peer.status, peer.contract) == ("peer", "inexact", "Tolerance")
    assert peer.time_us == pytest.approx(4000.0) and peer.max_abs_err > 0
    # every row, timed, skipped or broken, carries the wall seconds it took
    assert all(r.seconds is not None and r.seconds >= 0 for r in rows.values())
    longest = max(rows.values(), key=lambda r: r.seconds)
    assert bench_cli._longest_row(list(rows.values())).endswith(
        f"{longest.provider} fp32/{longest.shape} {longest.seconds:.1f} s"
    )


def test_a_failing_reference_makes_error_rows_and_the_run_goes_on(fake_op):
    rows = rows_by_case(fake_op, grid="badref")
    assert {r.status for r in rows.values()} == {"error"} and ("str", "good") in rows
    assert all(r.note.startswith("reference failed: AttributeError") for r in rows.values())


def test_kernel_resources_attributed_to_the_row_that_compiled_them(fake_op):
    FAKE_KERNEL.device_caches[0][0].clear()
    rows = rows_by_case(fake_op)
    assert rows[("n8", "good")].kernels == [
        {"name": "fake_kernel", "num_warps": 4, "num_stages": 1, "n_regs": 32, "n_spills": 0, "shared": 1024}
    ]
    rows_again = rows_by_case(fake_op)  # already compiled: nothing new to attribute
    assert rows_again[("n8", "good")].kernels == []
    assert resources.snapshot([object()]) == {} and resources.describe(object()) is None


def test_inputs_rotate_through_distinct_buffers_when_they_fit_in_l2(fake_op):
    SEEN_PTRS.clear()
    rows = rows_by_case(fake_op, l2_bytes=64 * 1024, max_buffers=4)
    assert rows[("n8", "good")].buffers == 4
    assert len(SEEN_PTRS) >= 4 * len(SHAPES) - 1  # gate call + 4 buffer sets per shape
    assert rows[("n8", "good")].time_us == pytest.approx(1000.0 / 4)


def test_rotation_count():
    l2 = 60 << 20
    assert rotation_count(l2, l2) == 1 and rotation_count(0, l2) == 1
    assert rotation_count(l2 // 2, l2) == 4
    assert rotation_count(1000, l2) == 32 and rotation_count(1000, l2, max_buffers=8) == 8


def test_native_compiled_candidate_and_recompile_limits(fake_op):
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    before = getattr(dynamo_config, name)
    with recompile_limits(5000):
        assert getattr(dynamo_config, name) == 5000
        rows = rows_by_case(fake_op, compile=True, compile_backend="eager", providers=["native-compiled", "good"])
    assert getattr(dynamo_config, name) == before
    compiled = rows[("n64", "native-compiled")]
    assert (compiled.kind, compiled.status, compiled.max_abs_err) == ("compiled", "ok", 0.0)
    # the compiled spec runs native's body, so the fake timer reports native's time
    assert compiled.time_us == pytest.approx(2000.0) and rows[("n64", "good")].speedup_vs_native_compiled == 2.0
    assert ("n64", "native") not in rows and ("n64", "wrong") not in rows


def test_bit_identical_rules():
    a = torch.tensor([0.0, float("nan"), 1.0])
    assert gate.bit_identical(a, a.clone())
    assert not gate.bit_identical(a, torch.tensor([-0.0, float("nan"), 1.0]))
    assert not gate.bit_identical(a, a.double())


# -------------------------------------------------------------------- CLI
def _parse(argv):
    parser = argparse.ArgumentParser()
    exactfuse_cli.add_bench_arguments(parser)
    return parser.parse_args(argv)


def test_cli_arguments():
    args = _parse(["--op", "silu_and_mul", "--op", "gelu_and_mul", "--dtype", "fp16", "--quick", "--no-compile"])
    assert args.ops == ["silu_and_mul", "gelu_and_mul"] and args.dtypes == ["fp16"]
    assert args.quick and args.no_compile and args.grid == "default" and args.providers is None
    with pytest.raises(SystemExit):
        _parse(["--dtype", "int8"])


def test_cli_without_cuda_exits_2_with_a_message(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    console = Console(file=io.StringIO(), width=200)
    assert bench_cli.run(_parse(["--quick"]), console) == 2
    assert "needs a CUDA GPU" in console.file.getvalue()


def test_cli_option_errors_name_what_is_known(fake_op):
    with pytest.raises(bench_cli.UsageError, match="unknown op\\(s\\) \\['nope'\\]"):
        bench_cli.select_ops(["nope"], "default")
    with pytest.raises(bench_cli.UsageError, match="unknown provider\\(s\\) \\['tritonx'\\]"):
        bench_cli.check_providers(["tritonx"], [fake_op])
    bench_cli.check_providers(["good", "native-compiled", "fakepeer"], [fake_op])


def test_every_candidate_of_a_mutating_op_is_gated_on_the_original_arguments():
    """Timing a mutating op changes its arguments; each later candidate (here "picky", timed after
    "good") must still be checked on the case as it was, not on what the timing left behind."""
    import uuid

    from exactfuse.bench.runner import bench_op
    from exactfuse.registry import OPS, Bitwise, Case, op
    from support.bench_fakes import LAST, ROOF, bench_config, fake_timer

    def accumulate(x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        LAST[0] = "native"
        state.add_(x)
        return state * 2

    def provider(name):
        def run(x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
            LAST[0] = name
            state.add_(x)
            return state * 2

        return run

    name = f"bench_mutating_{uuid.uuid4().hex[:8]}"
    o = op(accumulate, name=name, contract=Bitwise(), mutates_args=("state",), dtypes=(torch.float32,))
    o.provider("good")(provider("good"))
    o.provider("picky")(provider("picky"))
    o.grid("default")(lambda device, dtype: [Case("s", (torch.ones(4, 4), torch.zeros(4, 4)))])
    try:
        rows = bench_op(o, torch.float32, bench_config(max_buffers=1), timer=fake_timer, roofline=ROOF)
    finally:
        OPS.pop(name, None)
    status = {r.provider: r.status for r in rows}
    assert status == {"good": "ok", "picky": "ok", "native": "reference"}, [(r.provider, r.note) for r in rows]


def test_the_phase_line_says_where_a_runs_time_went(monkeypatch):
    monkeypatch.setattr(exactfuse_cli, "STARTED", 100.0)
    clock = {"imports": 101.5, "rates": 101.75, "peers": 102.0, "warm-up": 105.5, "timing pass": 110.0, "plots": 110.25}
    assert bench_cli.phase_line(clock) == (
        "bench: 10.2 s in all: imports 1.5 s, rates 0.2 s, peers 0.2 s, warm-up 3.5 s, timing pass 4.5 s, plots 0.2 s"
    )
    assert bench_cli.phase_line({"imports": 101.0}) == "bench: 1.0 s in all: imports 1.0 s"


def test_quick_grid_times_peers_only_where_a_provider_option_names_them(fake_op):
    """``BenchConfig.peers``: off on the quick grid (the CLI's ``--quick``: a peer's autotuning is most of a cold
    run), the peer rows gone; ``--provider`` naming a peer times it there, and the default grid times them all."""
    from exactfuse.bench.runner import BenchConfig, Candidates

    def names(**kw):
        return [c.name for c in Candidates(BenchConfig(device="cpu", compile=False, **kw)).for_op(fake_op)]

    assert "fakepeer" in names() and "fakepeer" not in names(peers=False)
    assert names(peers=False, providers=["good", "fakepeer"]) == ["good", "fakepeer"]
    assert ("n8", "fakepeer") not in rows_by_case(fake_op, peers=False)
