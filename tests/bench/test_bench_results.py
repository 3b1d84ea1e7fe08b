"""The bench harness's results on the CPU: summaries, CSV / JSON files, time budgets, shards, resumed and
re-run cases merged into one result, plots. Nothing is timed: the op and the timer are
tests/support/bench_fakes.py's."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
import re
import signal
import time

import pytest
import torch
from rich.console import Console

import exactfuse_cli
from exactfuse.bench import results, runner
from exactfuse.bench.display import RichReporter
from exactfuse.bench.runner import bench_op
from exactfuse_cli import bench as bench_cli
from support.bench_fakes import FAKE_KERNEL, ROOF, bench_config, fake_timer, run_rows


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
    rows = run_rows(fake_op, dtypes=(torch.float32, torch.float16))
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
        bench_config(dtypes=(torch.float32, torch.bfloat16)),
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
    config = bench_config(deadline=time.monotonic() - 1)  # already past: not one case starts
    out = bench_cli.bench_and_write(
        [fake_op], config, timer=fake_timer, roofline=ROOF, meta={"gpu": "cpu"}, out_dir=tmp_path, console=console
    )
    assert out == {} and "time budget reached" in console.file.getvalue()
    all_rows = bench_op(fake_op, torch.float32, bench_config(), timer=fake_timer, roofline=ROOF)
    cases = list(dict.fromkeys(r.shape for r in all_rows))
    assert len(cases) > 1
    # the clock passes the deadline once the first case is done
    clock = iter([0.0] + [10.0] * 1000)
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    not_run: list[str] = []
    rows = bench_op(
        fake_op, torch.float32, bench_config(deadline=1.0), timer=fake_timer, roofline=ROOF, not_run=not_run
    )
    assert {r.shape for r in rows} == {cases[0]}
    assert not_run == [f"fp32/{c}" for c in cases[1:]]


def test_an_interrupted_run_writes_the_cases_done_and_lists_the_rest_for_resume(fake_op, tmp_path):
    all_rows = bench_op(fake_op, torch.float32, bench_config(), timer=fake_timer, roofline=ROOF)
    cases = list(dict.fromkeys(r.shape for r in all_rows))
    per_case = len(all_rows) // len(cases)
    calls = iter(range(10**6))

    def interrupting_timer(body):  # SIGINT, or SIGTERM under the CLI, while the second case is timed
        if next(calls) >= per_case:
            raise KeyboardInterrupt
        return fake_timer(body)

    console = Console(file=io.StringIO(), width=150)
    with pytest.raises(runner.BenchInterruptedError) as info:
        bench_cli.bench_and_write(
            [fake_op], bench_config(), timer=interrupting_timer, roofline=ROOF, meta={"gpu": "cpu"},
            out_dir=tmp_path, console=console, reporter=RichReporter(console),
        )  # fmt: skip
    assert info.value.not_run == [f"fp32/{c}" for c in cases[1:]]
    rows, meta = results.load_rows(tmp_path / f"{fake_op.name}.json")
    assert {r.shape for r in rows} == {cases[0]} and meta["incomplete"]["cases_not_run"] == info.value.not_run
    text = console.file.getvalue()
    assert f"[1/{len(cases)}] {cases[0]}" in text and "interrupted" in text  # one line a case in a log file
    assert bench_cli.resume_cases(str(tmp_path / f"{fake_op.name}.json"), [fake_op]) == set(info.value.not_run)


def test_an_interrupt_in_an_ops_first_case_stops_the_run(fake_op, tmp_path):
    """Stopped before any row of an op was measured, the run ends there: it does not go on to the next op
    (a ``timeout`` sends SIGTERM once and then waits on a run that never ends)."""
    timed = []

    def interrupting_timer(body):
        timed.append(body)
        raise KeyboardInterrupt

    console = Console(file=io.StringIO(), width=150)
    with pytest.raises(runner.BenchInterruptedError):
        bench_cli.bench_and_write(
            [fake_op, fake_op], bench_config(), timer=interrupting_timer, roofline=ROOF, meta={"gpu": "cpu"},
            out_dir=tmp_path, console=console, reporter=RichReporter(console),
        )  # fmt: skip
    assert len(timed) == 1 and not list(tmp_path.iterdir())


def test_sigterm_interrupts_like_sigint():
    before = signal.getsignal(signal.SIGTERM)
    with bench_cli.sigterm_interrupts(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is before


def test_shards_split_the_grid_and_merge_back(fake_op, tmp_path):
    full = bench_op(fake_op, torch.float32, bench_config(), timer=fake_timer, roofline=ROOF)
    paths = []
    for i in range(2):
        out = tmp_path / f"shard{i}"
        bench_cli.bench_and_write(
            [fake_op],
            bench_config(shard=(i, 2)),
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
        exactfuse_cli.shard("2/2")


def test_resume_runs_the_cases_not_run_and_merges_into_one_complete_result(fake_op, tmp_path, monkeypatch):
    console = Console(file=io.StringIO(), width=150)
    full = bench_op(fake_op, torch.float32, bench_config(), timer=fake_timer, roofline=ROOF)
    clock = iter([0.0] + [10.0] * 1000)  # the first run: past its deadline once the first case is done
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    first = tmp_path / "first"
    bench_cli.bench_and_write(
        [fake_op],
        bench_config(deadline=1.0),
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
        bench_config(cases=cases),
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
    full = bench_op(fake_op, torch.float32, bench_config(), timer=fake_timer, roofline=ROOF)
    shapes = list(dict.fromkeys(r.shape for r in full))
    assert len(shapes) > 1
    pattern = f"/{re.escape(shapes[-1])}$"
    first, second = tmp_path / "first", tmp_path / "second"
    for out, config, rev in ((first, bench_config(), "old"), (second, bench_config(case_pattern=pattern), "new")):
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
    assert exactfuse_cli.case_pattern("d(12288|32768)$") == "d(12288|32768)$"
    with pytest.raises(argparse.ArgumentTypeError, match="regular expression"):
        exactfuse_cli.case_pattern("d(12288")


def test_gpu_slug():
    assert results.gpu_slug("NVIDIA H200") == "h200"
    assert results.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"


def test_plot_writes_a_png(fake_op, tmp_path):
    pytest.importorskip("matplotlib")
    from exactfuse.bench.plot import plot

    path = plot(run_rows(fake_op), tmp_path / "bench.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    console = Console(file=io.StringIO())
    bench_cli.draw_plots(str(tmp_path / "per-{op}.png"), {fake_op.name: run_rows(fake_op)}, "title", console)
    assert (tmp_path / f"per-{fake_op.name}.png").exists()
