"""The bench harness on the CPU: grids, the correctness gate, rows, files. Nothing is timed.

A throwaway op (unique name, removed from the registry afterwards) carries a
correct provider, a wrong one, one that declines big inputs, one that raises,
and a fake peer; a fake timer reports fixed times per provider.
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import io
import json
import math
import re
import time
import uuid

import pytest
import torch
from rich.console import Console

from exactfuse.bench import cli as bench_cli
from exactfuse.bench import gate, resources, results, runner
from exactfuse.bench.display import RichReporter
from exactfuse.bench.peers import PeerAdapter, register_peer, unregister_peer
from exactfuse.bench.roofline import Roofline
from exactfuse.bench.runner import BenchConfig, bench_op, expand_grid
from exactfuse.bench.timing import recompile_limits, rotation_count
from exactfuse.registry import OPS, Bitwise, Case, Tolerance, Ulp, op

# Fake times (ms per call) by the provider that ran last.
TIMES = {"native": 2.0, "good": 1.0, "picky": 1.0, "fakepeer": 4.0}
LAST: list[str] = [""]
CALLS: collections.Counter = collections.Counter()
SEEN_PTRS: set[int] = set()
ROOF = Roofline(copy_bytes_per_s=1e12)


def fake_timer(body) -> float:
    body()
    return TIMES[LAST[0]]


def _native(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "native"
    return x * 2 + 1


def _good(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "good"
    SEEN_PTRS.add(x.data_ptr())
    FAKE_KERNEL.compile(tuple(x.shape))
    return x * 2 + 1


def _wrong(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "wrong"
    CALLS["wrong"] += 1
    y = x * 2 + 1
    y.view(-1)[0] += 1  # one wrong element
    return y


def _picky(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "picky"
    return x * 2 + 1


def _broken(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("launch failed")


class FakeCompiled:
    """Stands in for Triton's CompiledKernel: n_regs, n_spills, metadata.shared."""

    Metadata = collections.namedtuple("Metadata", "name num_warps num_stages shared")

    def __init__(self):
        self.n_regs, self.n_spills = 32, 0
        self.metadata = self.Metadata("fake_kernel", 4, 1, 1024)
        self.name = "fake_kernel"


class FakeJit:
    """Stands in for a JITFunction: ``device_caches[device][0]`` maps keys to compiled kernels."""

    def __init__(self):
        self.device_caches = {0: ({}, {}, None, None, None)}

    def compile(self, key):
        self.device_caches[0][0].setdefault(key, FakeCompiled())


FAKE_KERNEL = FakeJit()
SHAPES = {"n8": (2, 4), "n64": (8, 8), "n512": (16, 32)}


def _grid(device, dtype):
    for name, shape in SHAPES.items():
        yield Case(name, (torch.arange(math.prod(shape), dtype=dtype, device=device).reshape(shape) / 7,))


@pytest.fixture(scope="module")
def fake_op():
    name = f"bench_test_{uuid.uuid4().hex[:8]}"
    fake = op(_native, name=name, contract=Bitwise(), dtypes=(torch.float32, torch.float16))
    fake.provider("good", kernels=[FAKE_KERNEL])(_good)
    fake.provider("wrong")(_wrong)
    fake.provider("picky", supports_args=lambda x: x.numel() <= 64)(_picky)
    fake.provider("broken")(_broken)
    fake.grid("default")(_grid)
    fake.grid("quick")(lambda device, dtype: (c for c in _grid(device, dtype) if c.id == "n8"))
    fake.grid("badref")(lambda device, dtype: [Case("str", ("not a tensor",))])
    fake.grid("dup")(lambda device, dtype: [Case("a", (torch.ones(2),)), Case("a", (torch.ones(3),))])
    fake.cost(bytes=lambda x: 2 * x.numel() * x.element_size())

    def peer_call(args, kwargs):
        x = args[0]

        def call():
            LAST[0] = "fakepeer"
            return (x * 2 + 1) * 1.01  # outside the fp32 Tolerance

        return call

    register_peer(PeerAdapter("fakepeer", name, available=lambda: True, prepare=peer_call))
    yield fake
    unregister_peer(name, "fakepeer")
    OPS.pop(name, None)


def _config(**kw) -> BenchConfig:
    defaults = dict(dtypes=(torch.float32,), compile=False, device="cpu", l2_bytes=1)
    return BenchConfig(**{**defaults, **kw})


def _run(fake_op, **kw) -> list[results.Row]:
    config = _config(**kw)
    rows = []
    for dtype in config.dtypes:
        rows += bench_op(fake_op, dtype, config, timer=fake_timer, roofline=ROOF)
    return rows


def _rows(fake_op, **kw) -> dict[tuple[str, str], results.Row]:
    return {(r.shape, r.provider): r for r in _run(fake_op, **kw)}


# ------------------------------------------------------------------ grids
def test_expand_grid_gives_the_declared_cases_in_the_dtype(fake_op):
    cases = expand_grid(fake_op, "default", "cpu", torch.float16)
    assert [c.id for c in cases] == ["n8", "n64", "n512"]
    assert all(c.args[0].dtype == torch.float16 for c in cases)
    assert [c.id for c in expand_grid(fake_op, "quick", "cpu", torch.float32)] == ["n8"]


def test_expand_grid_errors_name_the_grid(fake_op):
    with pytest.raises(
        KeyError, match="no bench grid 'huge'; declared grids: \\['badref', 'default', 'dup', 'quick'\\]"
    ):
        expand_grid(fake_op, "huge", "cpu", torch.float32)
    with pytest.raises(ValueError, match="repeats case id 'a'"):
        expand_grid(fake_op, "dup", "cpu", torch.float32)


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
    rows = _rows(fake_op)
    for shape in SHAPES:
        wrong = rows[(shape, "wrong")]
        assert wrong.status == "failed" and wrong.time_us is None and wrong.pct_roofline is None
        assert wrong.mismatches == 1 and "FAIL Bitwise" in wrong.note
    assert CALLS["wrong"] == len(SHAPES)  # the gate's single call per shape, no timing calls


def test_rows_of_correct_skipped_broken_and_peer_providers(fake_op):
    rows = _rows(fake_op)
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


def test_a_failing_reference_makes_error_rows_and_the_run_goes_on(fake_op):
    rows = _rows(fake_op, grid="badref")
    assert {r.status for r in rows.values()} == {"error"} and ("str", "good") in rows
    assert all(r.note.startswith("reference failed: AttributeError") for r in rows.values())


def test_kernel_resources_attributed_to_the_row_that_compiled_them(fake_op):
    FAKE_KERNEL.device_caches[0][0].clear()
    rows = _rows(fake_op)
    assert rows[("n8", "good")].kernels == [
        {"name": "fake_kernel", "num_warps": 4, "num_stages": 1, "n_regs": 32, "n_spills": 0, "shared": 1024}
    ]
    rows_again = _rows(fake_op)  # already compiled: nothing new to attribute
    assert rows_again[("n8", "good")].kernels == []
    assert resources.snapshot([object()]) == {} and resources.describe(object()) is None


def test_inputs_rotate_through_distinct_buffers_when_they_fit_in_l2(fake_op):
    SEEN_PTRS.clear()
    rows = _rows(fake_op, l2_bytes=64 * 1024, max_buffers=4)
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
        rows = _rows(fake_op, compile=True, compile_backend="eager", providers=["native-compiled", "good"])
    assert getattr(dynamo_config, name) == before
    compiled = rows[("n64", "native-compiled")]
    assert (compiled.kind, compiled.status, compiled.max_abs_err) == ("compiled", "ok", 0.0)
    # the compiled spec runs native's body, so the fake timer reports native's time
    assert compiled.time_us == pytest.approx(2000.0) and rows[("n64", "good")].speedup_vs_native_compiled == 2.0
    assert ("n64", "native") not in rows and ("n64", "wrong") not in rows


@pytest.mark.parametrize("contract", [Bitwise(), Ulp(1), Ulp(3), Tolerance()], ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_device_check_agrees_with_contract_check(contract, dtype):
    gen = torch.Generator().manual_seed(1)
    expected = torch.randn((13, 17), generator=gen).to(dtype)
    actual = expected.clone()
    flat = actual.view(-1)
    flat[3] = torch.nextafter(flat[3], torch.tensor(float("inf"), dtype=dtype))
    flat[40] = torch.nextafter(torch.nextafter(flat[40], flat[40] * 2), flat[40] * 4)
    flat[50] = flat[50] * 1.5
    flat[60], expected.view(-1)[60] = float("nan"), float("nan")
    expected.view(-1)[70], flat[70] = 0.0, -0.0
    want = contract.check(actual, expected)
    got = gate.device_check(contract, actual, expected, chunk=7)
    assert (got.passed, got.mismatches, got.max_ulp) == (want.passed, want.mismatches, want.max_ulp)
    assert got.max_abs_err == pytest.approx(want.max_abs_err) and got.worst_index == want.worst_index
    assert gate.device_check(contract, expected, expected.clone(), chunk=7).passed


def test_bit_identical_rules():
    a = torch.tensor([0.0, float("nan"), 1.0])
    assert gate.bit_identical(a, a.clone())
    assert not gate.bit_identical(a, torch.tensor([-0.0, float("nan"), 1.0]))
    assert not gate.bit_identical(a, a.double())


# ---------------------------------------------------------------- results
def test_summary_geomean_median_wins_losses():
    def row(provider, kind, shape, t):
        return results.Row("o", "bf16", shape, provider, kind, status="ok", time_us=t)

    rows = [row("native", "reference", s, 10.0) for s in "abc"]
    rows += [row("triton", "exactfuse", "a", 5.0), row("triton", "exactfuse", "b", 20.0)]
    rows += [row("triton", "exactfuse", "c", 10.0), row("x", "exactfuse", "c", None)]
    (s,) = results.summarize(rows)
    assert (s["provider"], s["baseline"], s["shapes"], s["wins"], s["losses"]) == ("triton", "native", 3, 1, 1)
    assert s["geomean"] == pytest.approx(1.0) and s["median"] == 1.0 and (s["min"], s["max"]) == (0.5, 2.0)


def test_csv_and_json_schema(fake_op, tmp_path):
    rows = _run(fake_op, dtypes=(torch.float32, torch.float16))
    meta = {"gpu": "Fake GPU", "torch": "t", "triton": "tr", "git_rev": "abc123", "date": "2026-01-01T00:00:00+00:00"}
    csv_path, json_path = results.write_op_results(tmp_path, fake_op.name, rows, meta)
    assert csv_path.name == f"{fake_op.name}.csv" and json_path.name == f"{fake_op.name}.json"
    with csv_path.open() as f:
        reader = csv.DictReader(f)
        records = list(reader)
    assert tuple(reader.fieldnames) == results.CSV_FIELDS and len(records) == len(rows)
    for key in ("op", "dtype", "shape", "provider", "status", "time_us", "pct_roofline", "n_regs", "gpu", "git_rev"):
        assert key in results.CSV_FIELDS
    good = next(r for r in records if r["provider"] == "good" and r["dtype"] == "fp16")
    assert good["gpu"] == "Fake GPU" and good["git_rev"] == "abc123" and float(good["time_us"]) > 0
    assert next(r for r in records if r["provider"] == "wrong")["time_us"] == ""
    document = json.loads(json_path.read_text())
    assert document["schema"] == results.SCHEMA and document["meta"] == meta
    assert set(document["rows"][0]) == set(results.Row.__dataclass_fields__)
    assert {s["dtype"] for s in document["summary"]} == {"fp32", "fp16"}
    assert set(document["summary"][0]) >= {"provider", "baseline", "geomean", "median", "min", "max", "wins", "losses"}
    loaded, loaded_meta = results.load_rows(json_path)
    assert loaded_meta == meta and [r.provider for r in loaded] == [r.provider for r in rows]


def test_bench_and_write_runs_every_op_and_dtype(fake_op, tmp_path):
    FAKE_KERNEL.device_caches[0][0].clear()
    console = Console(file=io.StringIO(), width=150)
    out = bench_cli.bench_and_write(
        [fake_op],
        _config(dtypes=(torch.float32, torch.bfloat16)),
        timer=fake_timer,
        roofline=ROOF,
        meta={"gpu": "cpu"},
        out_dir=tmp_path,
        console=console,
        reporter=RichReporter(console),
    )
    assert {r.dtype for r in out[fake_op.name]} == {"fp32"}  # bf16 is not among the op's dtypes
    text = console.file.getvalue()
    assert "bfloat16 is not one of its dtypes" in text and "n512" in text and "fakepeer" in text
    assert "32r/0s/1024B" in text  # kernel resources beside the timing
    assert "speedup of exactfuse providers" in text and "2.00x" in text  # the summary: good vs native
    assert (tmp_path / f"{fake_op.name}.csv").exists() and bench_cli._failures(out)


def test_time_budget_keeps_the_cases_done_and_lists_the_rest(fake_op, tmp_path, monkeypatch):
    console = Console(file=io.StringIO(), width=150)
    config = _config(deadline=time.monotonic() - 1)  # already past: not one case starts
    out = bench_cli.bench_and_write(
        [fake_op], config, timer=fake_timer, roofline=ROOF, meta={"gpu": "cpu"}, out_dir=tmp_path, console=console
    )
    assert out == {} and "time budget reached" in console.file.getvalue()
    all_rows = bench_op(fake_op, torch.float32, _config(), timer=fake_timer, roofline=ROOF)
    cases = list(dict.fromkeys(r.shape for r in all_rows))
    assert len(cases) > 1
    # the clock passes the deadline once the first case is done
    clock = iter([0.0] + [10.0] * 1000)
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    not_run: list[str] = []
    rows = bench_op(fake_op, torch.float32, _config(deadline=1.0), timer=fake_timer, roofline=ROOF, not_run=not_run)
    assert {r.shape for r in rows} == {cases[0]}
    assert not_run == [f"fp32/{c}" for c in cases[1:]]


def test_shards_split_the_grid_and_merge_back(fake_op, tmp_path):
    full = bench_op(fake_op, torch.float32, _config(), timer=fake_timer, roofline=ROOF)
    paths = []
    for i in range(2):
        out = tmp_path / f"shard{i}"
        bench_cli.bench_and_write(
            [fake_op],
            _config(shard=(i, 2)),
            timer=fake_timer,
            roofline=ROOF,
            meta={"gpu": "cpu", "git_rev": f"rev{i}"},
            out_dir=out,
            console=Console(file=io.StringIO()),
        )
        paths.append(out / f"{fake_op.name}.json")
    op_name, rows, meta = results.merge_results(paths)
    assert op_name == fake_op.name
    assert sorted((r.shape, r.provider) for r in rows) == sorted((r.shape, r.provider) for r in full)
    assert [s["git_rev"] for s in meta["shards"]] == ["rev0", "rev1"] and "incomplete" not in meta
    shard0 = {r.shape for r in results.load_rows(paths[0])[0]}
    assert shard0 and shard0 != {r.shape for r in full}  # each shard ran part of the grid
    with pytest.raises(argparse.ArgumentTypeError, match="0 <= I < N"):
        bench_cli._shard("2/2")


def test_resume_runs_the_cases_not_run_and_merges_into_one_complete_result(fake_op, tmp_path, monkeypatch):
    console = Console(file=io.StringIO(), width=150)
    full = bench_op(fake_op, torch.float32, _config(), timer=fake_timer, roofline=ROOF)
    clock = iter([0.0] + [10.0] * 1000)  # the first run: past its deadline once the first case is done
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    first = tmp_path / "first"
    bench_cli.bench_and_write(
        [fake_op],
        _config(deadline=1.0),
        timer=fake_timer,
        roofline=ROOF,
        meta={"gpu": "cpu"},
        out_dir=first,
        console=console,
    )
    monkeypatch.undo()
    first_json = first / f"{fake_op.name}.json"
    cases = bench_cli.resume_cases(str(first_json), [fake_op])
    assert cases and all(c.startswith("fp32/") for c in cases)
    second = tmp_path / "second"
    out = bench_cli.bench_and_write(
        [fake_op],
        _config(cases=cases),
        timer=fake_timer,
        roofline=ROOF,
        meta={"gpu": "cpu"},
        out_dir=second,
        console=console,
    )
    assert {f"fp32/{r.shape}" for r in out[fake_op.name]} == set(cases)  # only the cases not run
    _, rows, meta = results.merge_results([first_json, second / f"{fake_op.name}.json"])
    assert sorted((r.shape, r.provider) for r in rows) == sorted((r.shape, r.provider) for r in full)
    assert "incomplete" not in meta  # the second run filled in every case the first listed
    with pytest.raises(bench_cli.UsageError, match="no cases not run"):
        bench_cli.resume_cases(str(second / f"{fake_op.name}.json"), [fake_op])
    with pytest.raises(bench_cli.UsageError, match="cannot read"):
        bench_cli.resume_cases(str(tmp_path / "missing.json"), [fake_op])
    with pytest.raises(bench_cli.UsageError, match="pass --op with that one op"):
        bench_cli.resume_cases(str(first_json), [fake_op, fake_op])


def test_case_pattern_reruns_some_shapes_and_the_merge_keeps_the_newer_rows(fake_op, tmp_path):
    console = Console(file=io.StringIO(), width=150)
    full = bench_op(fake_op, torch.float32, _config(), timer=fake_timer, roofline=ROOF)
    shapes = list(dict.fromkeys(r.shape for r in full))
    assert len(shapes) > 1
    pattern = f"/{re.escape(shapes[-1])}$"
    first, second = tmp_path / "first", tmp_path / "second"
    for out, config, rev in ((first, _config(), "old"), (second, _config(case_pattern=pattern), "new")):
        bench_cli.bench_and_write(
            [fake_op],
            config,
            timer=fake_timer,
            roofline=ROOF,
            meta={"gpu": "cpu", "git_rev": rev},
            out_dir=out,
            console=console,
        )
    again, _ = results.load_rows(second / f"{fake_op.name}.json")
    assert {r.shape for r in again} == {shapes[-1]}  # only the matching case ran
    _, rows, meta = results.merge_results([first / f"{fake_op.name}.json", second / f"{fake_op.name}.json"])
    assert sorted((r.shape, r.provider) for r in rows) == sorted((r.shape, r.provider) for r in full)  # no duplicates
    newer = [r for r in rows if r.shape == shapes[-1]]
    assert newer == [dataclasses.replace(r, shard=1) for r in again]  # the later file's rows replaced the earlier
    assert [s["git_rev"] for s in meta["shards"]] == ["old", "new"]
    assert {r.shard for r in rows if r.shape != shapes[-1]} == {0}  # each row names the run that measured it
    results.write_op_results(tmp_path / "merged", fake_op.name, rows, meta)
    with open(tmp_path / "merged" / f"{fake_op.name}.csv") as f:
        revs = {(r["shape"], r["git_rev"]) for r in csv.DictReader(f)}
    assert revs == {(shape, "new" if shape == shapes[-1] else "old") for shape in shapes}  # the CSV's run columns
    merged = tmp_path / "merged" / f"{fake_op.name}.json"
    _, again_rows, again_meta = results.merge_results([merged])
    assert [s["git_rev"] for s in again_meta["shards"]] == ["old", "new"]  # a merged file keeps its runs
    assert [r.shard for r in again_rows] == [r.shard for r in rows]
    # a file merged before rows named their runs: the runs' --case patterns tell them apart
    document = json.loads(merged.read_text())
    for r in document["rows"]:
        del r["shard"]
    document["meta"]["shards"][0]["command"] = "exactfuse bench --op x"
    document["meta"]["shards"][1]["command"] = f"exactfuse bench --op x --case '{pattern}'"
    merged.write_text(json.dumps(document))
    _, old_rows, _ = results.merge_results([merged])
    assert [r.shard for r in old_rows] == [r.shard for r in rows]
    document["meta"]["shards"][1]["command"] = "exactfuse bench --op x --shard 1/2"
    merged.write_text(json.dumps(document))
    assert {r.shard for r in results.merge_results([merged])[1]} == {None}  # a split grid: not guessed
    assert bench_cli._case_pattern("d(12288|32768)$") == "d(12288|32768)$"
    with pytest.raises(argparse.ArgumentTypeError, match="regular expression"):
        bench_cli._case_pattern("d(12288")


def test_gpu_slug():
    assert results.gpu_slug("NVIDIA H200") == "h200"
    assert results.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"


def test_plot_writes_a_png(fake_op, tmp_path):
    pytest.importorskip("matplotlib")
    from exactfuse.bench.plot import plot

    path = plot(_run(fake_op), tmp_path / "bench.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    console = Console(file=io.StringIO())
    bench_cli.draw_plots(str(tmp_path / "per-{op}.png"), {fake_op.name: _run(fake_op)}, "title", console)
    assert (tmp_path / f"per-{fake_op.name}.png").exists()


# -------------------------------------------------------------------- CLI
def _parse(argv):
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
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
