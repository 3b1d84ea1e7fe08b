"""The warm-up before the timing pass (exactfuse.bench.warm) on the CPU, with tests/support/bench_fakes.py's
op: its tasks are the timing pass's cases and candidates, a failure in it is a note, an interrupt ends its
workers at once, and ``--jobs`` turns it on and off. Nothing is timed."""

from __future__ import annotations

import argparse
import io
import itertools
import os
import signal
import threading
import time

import pytest
import torch
from rich.console import Console

import exactfuse_cli
from exactfuse.bench import warm
from exactfuse.bench.warm import WarmTask, WarmUp
from exactfuse_cli import bench as bench_cli
from support.bench_fakes import CALLS, LAST, ROOF, bench_config, fake_timer, oom_once_warm_task, sleeping_warm_task

SELECTIONS = {
    "whole-grid": {},
    "case": {"case_pattern": "n(8|512)$"},
    "shard": {"shard": (1, 2)},
    "resume": {"cases": frozenset({"fp32/n64", "fp16/n8"})},
    "provider": {"providers": ["good", "native-compiled", "fakepeer"], "compile": True},
    "compile": {"compile": True},
    "no-compile": {"compile": False},
    "dtypes": {"dtypes": (torch.bfloat16, torch.float16, torch.float32)},  # bf16: not one of the op's dtypes
}


@pytest.mark.parametrize("selection", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_warm_tasks_are_the_cases_and_candidates_the_timing_pass_runs(fake_op, selection):
    config = bench_config(**{"dtypes": (torch.float32, torch.float16), "compile_backend": "eager", **selection})
    all_rows = bench_cli.bench_and_write(
        [fake_op], config, timer=fake_timer, roofline=ROOF, meta={}, out_dir=None, console=Console(file=io.StringIO())
    )
    timed: dict[tuple[str, str], list[str]] = {}
    for row in all_rows[fake_op.name]:
        timed.setdefault((row.dtype, row.shape), []).append(row.provider)
    tasks = warm.warm_tasks([fake_op], config)
    assert all(len(t.candidates) == 1 for t in tasks)  # a task each, so one case's compiles run side by side
    by_case: dict[tuple[str, str], list[str]] = {}
    for t in tasks:
        by_case.setdefault((t.dtype, t.case), []).append(t.candidates[0])
    untimed = {
        key: [c for c in names if c != "native"] for key, names in timed.items()
    }  # the eager spec compiles nothing
    assert by_case == {key: names for key, names in untimed.items() if names}
    assert list(by_case) == [key for key, names in untimed.items() if names]  # in the timing pass's order
    assert all(t.kernels == (1 if t.candidates == ("good",) else 0) for t in tasks)  # the good provider's one kernel
    kinds = [t.kind for t in sorted(tasks, key=lambda t: t.order)]
    assert kinds == sorted(kinds, key=["peer", "compiled", "exactfuse"].index)  # the peers, then the compiled spec
    assert {"peer", "exactfuse"} <= set(kinds) and (("compiled" in kinds) == config.compile)


def test_a_candidate_that_raises_or_declines_is_passed_over(fake_op):
    names = ("good", "wrong", "picky", "broken", "native", "fakepeer")
    wrong_calls = CALLS["wrong"]
    warm.warm_case(WarmTask(fake_op.name, "fp32", "n512", names), bench_config())  # picky declines n512
    assert CALLS["wrong"] == wrong_calls + 1 and LAST[0] == "fakepeer"  # the candidates after broken's raise ran


def test_a_task_that_fails_is_a_note(fake_op):
    config = bench_config()
    assert warm.warm_task(WarmTask(fake_op.name, "fp32", "n64", ("good", "broken")), config) is None
    note = warm.warm_task(WarmTask(fake_op.name, "fp32", "n7", ("good",)), config)
    assert "KeyError" in note and "'n7'" in note


def test_tasks_that_fail_in_worker_processes_are_notes(fake_op):
    """The fake op is declared in this process only: each spawned worker finds no such op."""
    tasks = [WarmTask(fake_op.name, "fp32", case, ("good",)) for case in ("n8", "n64")]
    done = warm.warm_up(tasks, bench_config(), 2)
    assert sorted(done.seconds) == sorted(map(str, tasks)) and all(s >= 0 for s in done.seconds.values())
    assert sorted(done.notes) == sorted(f"{t}: KeyError: '{fake_op.name}'" for t in tasks)


def test_tasks_out_of_memory_run_again_fewer_at_a_time(tmp_path):
    """A large case built by many workers at once runs the card out of memory: those tasks run once more
    after the others, a quarter of the workers at a time; a task out of memory again keeps its note."""
    tasks = [WarmTask("oom", "fp32", str(tmp_path / f"task{i}"), ()) for i in range(4)]
    tasks.append(WarmTask("oom", "fp32", str(tmp_path / "always"), ()))
    done = warm.warm_up(tasks, bench_config(), 4, work=oom_once_warm_task)
    assert done.retried == 5 and warm.retry_jobs(4) == 1 and warm.retry_jobs(14) == 3
    assert done.notes == [f"{tasks[-1]}: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    spans = sorted(tuple(map(float, path.read_text().split())) for path in tmp_path.glob("*.ran"))
    assert len(spans) == 4 and all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # one a time
    assert warm.out_of_memory("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`")
    assert not warm.out_of_memory(None) and not warm.out_of_memory("KeyError: 'n7'")


def test_no_warm_up_once_a_run_here_made_every_first_call(fake_op, monkeypatch, tmp_path):
    """The timing pass marks each (case, candidate) it called; a run whose every task is marked (this
    exactfuse, Triton, torch and GPU, the same grid) starts no workers."""
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    ran = []
    monkeypatch.setattr(warm, "warm_up", lambda tasks, config, jobs: ran.append(len(tasks)) or WarmUp())
    config = bench_config(compile_backend="eager")
    console = Console(file=io.StringIO(), width=200)
    assert bench_cli.warm_up([fake_op], config, 4, console) and len(ran) == 1
    all_rows = bench_cli.bench_and_write(
        [fake_op], config, timer=fake_timer, roofline=ROOF, meta={}, out_dir=None, console=Console(file=io.StringIO())
    )
    bench_cli.mark_rows(bench_config(grid="quick"), all_rows)  # another grid's marks
    assert bench_cli.warm_up([fake_op], config, 4, console) and len(ran) == 2
    bench_cli.mark_rows(config, {fake_op.name: all_rows[fake_op.name][1:]})  # all but one row
    assert bench_cli.warm_up([fake_op], config, 4, console) and len(ran) == 3
    bench_cli.mark_rows(config, all_rows)
    assert bench_cli.warm_up([fake_op], config, 4, console) and len(ran) == 3
    n = len(warm.warm_tasks([fake_op], config))
    assert f"warm-up: none, a run here has made the first calls of its {n} tasks" in console.file.getvalue()


def test_sigterm_in_the_warm_up_ends_its_workers_at_once(tmp_path):
    tasks = [WarmTask("sleeper", "fp32", str(tmp_path / f"task{i}"), ()) for i in range(4)]
    sent = []

    def terminate_once_two_sleep():
        give_up = time.monotonic() + 120
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < give_up:
            time.sleep(0.1)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_two_sleep, daemon=True).start()
    with bench_cli.sigterm_interrupts(), pytest.raises(KeyboardInterrupt):
        warm.warm_up(tasks, bench_config(), 2, work=sleeping_warm_task)
    assert time.monotonic() - sent[0] < 5  # not after the sleeps
    pids = [int(path.read_text()) for path in tmp_path.glob("*.pid")]
    assert len(pids) == 2  # the two tasks not started never start
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_jobs_option_and_its_default(monkeypatch):
    parser = argparse.ArgumentParser()
    exactfuse_cli.add_bench_arguments(parser)
    assert parser.parse_args(["--jobs", "3"]).jobs == 3 and parser.parse_args([]).jobs is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--jobs", "0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for cores, jobs in ((4, 1), (8, 6), (16, 14), (32, 16)):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert bench_cli.warm_jobs(None) == jobs
    assert bench_cli.warm_jobs(1) == 1 and bench_cli.warm_jobs(3) == 3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_cli.warm_jobs(None) == 1


def test_one_process_is_no_warm_up_and_more_are_at_most_one_a_task(fake_op, monkeypatch):
    ran, listed, warm_tasks = [], [], warm.warm_tasks

    def listing(ops, config):
        listed.append(config)
        return warm_tasks(ops, config)

    monkeypatch.setattr(warm, "warm_tasks", listing)
    done = WarmUp(["a [note]"], {"op bf16/x": 2.5, "op bf16/y": 7.5})
    monkeypatch.setattr(warm, "warm_up", lambda tasks, config, jobs: ran.append((len(tasks), jobs)) or done)
    console = Console(file=io.StringIO(), width=200)
    assert bench_cli.warm_up([fake_op], bench_config(), 1, console) and not ran and not listed  # no grid built
    assert console.file.getvalue() == ""
    one_task = bench_config(case_pattern="n8$", providers=["good"])  # the good provider on one case
    assert len(warm_tasks([fake_op], one_task)) == 1
    assert bench_cli.warm_up([fake_op], one_task, 4, console) and listed and not ran
    n = len(warm_tasks([fake_op], bench_config()))
    assert bench_cli.warm_up([fake_op], bench_config(), 2, console) and ran == [(n, 2)]
    assert bench_cli.warm_up([fake_op], bench_config(), n + 5, console) and ran[-1] == (n, n)
    text = console.file.getvalue()
    assert "warm-up: a [note]" in text and f"warm-up: {n} tasks in 2 processes" in text
    assert "longest: op bf16/y 7.5 s, op bf16/x 2.5 s" in text
    assert "(10 s of tasks, 5.0 s a process)" in text  # 2.5 + 7.5 over the 2 processes
    assert f"warm-up: {n} tasks in {n} processes" in text


def test_an_interrupt_in_the_warm_up_stops_the_run_and_a_failure_does_not(fake_op, monkeypatch):
    def interrupted(tasks, config, jobs):
        raise KeyboardInterrupt

    def failing(tasks, config, jobs):
        raise OSError("no processes [here]")

    console = Console(file=io.StringIO(), width=200)
    monkeypatch.setattr(warm, "warm_up", interrupted)
    assert bench_cli.warm_up([fake_op], bench_config(), 4, console) is False
    monkeypatch.setattr(warm, "warm_up", failing)
    assert bench_cli.warm_up([fake_op], bench_config(), 4, console) is True
    text = console.file.getvalue()
    assert "interrupted in the warm-up" in text and "warm-up not run: OSError: no processes [here]" in text
