"""``exactfuse bench``: the run on the parsed arguments (called by ``exactfuse_cli.commands``) over the
harness in ``exactfuse.bench``. Before the timing pass a warm-up compiles in worker processes what it will
run (``exactfuse.bench.warm``; ``--jobs``, by default on a CUDA machine with 8 or more cores).

Exit codes: 0 every exactfuse provider passed its gate, 1 one failed its
contract or raised, 2 usage error or no CUDA GPU, 130 interrupted (SIGINT or
SIGTERM, e.g. from ``timeout``): the rows of the cases done are written, with
the cases left under ``meta.incomplete.cases_not_run`` for ``--resume`` (stopped in the warm-up, nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape

from exactfuse.bench import results, warm
from exactfuse.bench.display import RichReporter, summary_table
from exactfuse.bench.peers import PEERS, load_peers, peers_for
from exactfuse.bench.roofline import Roofline, measure_roofline
from exactfuse.bench.runner import COMPILED, NATIVE, BenchConfig, BenchInterruptedError, Candidates, Reporter, bench_op
from exactfuse.bench.timing import Timer, cudagraph_timer, l2_cache_bytes, recompile_limits
from exactfuse.registry import OPS, Op
from exactfuse.utils import DTYPES_BY_NAME
from exactfuse_cli.commands import compile_workers, compiled_marker, mark_compiled

DTYPES = DTYPES_BY_NAME

QUICK_REP_MS = 4.0


class UsageError(ValueError):
    """Bad options: the message says what to pass instead."""


def resume_cases(path: str, ops: list[Op]) -> frozenset[str]:
    """The cases ``--resume FILE`` runs: those FILE lists as not run; FILE must be one of ``ops``' results."""
    try:
        rows, meta = results.load_rows(path)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"--resume: cannot read results from {path}: {exc}") from None
    names = {r.op for r in rows}
    if len(ops) != 1 or names != {ops[0].name}:
        raise UsageError(f"--resume: {path} holds {sorted(names)}; pass --op with that one op")
    not_run = meta.get("incomplete", {}).get("cases_not_run", [])
    if not not_run:
        raise UsageError(f"--resume: {path} lists no cases not run (that run was complete)")
    return frozenset(not_run)


def select_ops(names: Sequence[str] | None, grid: str) -> tuple[list[Op], list[str]]:
    """Ops to run and notes on ops skipped; named ops must exist and declare ``grid``."""
    import exactfuse.ops  # noqa: F401  (declares every op)

    if names:
        unknown = [n for n in names if n not in OPS]
        if unknown:
            raise UsageError(f"--op: unknown op(s) {unknown}; known ops: {sorted(OPS)}")
        chosen = [OPS[n] for n in dict.fromkeys(names)]
        missing = [o.name for o in chosen if grid not in o.grids]
        if missing:
            raise UsageError(f"--grid {grid}: op(s) {missing} declare no such grid")
        return chosen, []
    chosen = [o for o in OPS.values() if grid in o.grids]
    notes = [f"{o.name}: no {grid!r} grid declared, skipped" for o in OPS.values() if grid not in o.grids]
    return chosen, notes


def check_providers(names: Sequence[str] | None, ops: list[Op]) -> None:
    if not names:
        return
    known = {NATIVE, COMPILED}
    load_peers()
    for o in ops:
        known.update(o.providers)
        known.update(PEERS.get(o.name, {}))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--provider: unknown provider(s) {unknown}; known here: {sorted(known)}")


def bench_and_write(
    ops: list[Op],
    config: BenchConfig,
    *,
    timer: Timer,
    roofline: Roofline,
    meta: dict,
    out_dir: str | Path | None,
    console: Console,
    reporter: Reporter | None = None,
) -> dict[str, list[results.Row]]:
    """Run every (op, dtype), write ``<op>.csv``/``<op>.json`` to ``out_dir`` and print summaries."""
    candidates = Candidates(config)
    all_rows: dict[str, list[results.Row]] = {}
    with recompile_limits():
        for op in ops:
            started = time.perf_counter()
            rows: list[results.Row] = []
            not_run: list[str] = []
            interrupted = None
            for dtype in config.dtypes:
                if dtype not in op.dtypes:
                    console.print(f"[dim]{op.name}: {dtype} is not one of its dtypes, skipped[/]")
                    continue
                try:
                    rows += bench_op(
                        op,
                        dtype,
                        config,
                        timer=timer,
                        roofline=roofline,
                        candidates=candidates,
                        reporter=reporter,
                        not_run=not_run,
                    )
                except BenchInterruptedError as exc:
                    rows += exc.rows
                    interrupted = exc
                    break
            if interrupted is not None:
                console.print(f"[yellow]{op.name}: interrupted, {len(not_run)} case(s) not run[/]")
            elif not_run:
                console.print(f"[yellow]{op.name}: time budget reached, {len(not_run)} case(s) not run[/]")
            if not rows:
                if interrupted is not None:  # stopped in its first case: the ops after it must not start
                    raise interrupted
                continue
            all_rows[op.name] = rows
            summary = results.summarize(rows)
            if summary:
                console.print(summary_table(op.name, summary))
            if out_dir is not None:
                op_meta = dict(meta, incomplete={"cases_not_run": not_run}) if not_run else meta
                csv_path, json_path = results.write_op_results(out_dir, op.name, rows, op_meta)
                console.print(f"[dim]wrote {csv_path} and {json_path}[/]")
            console.print(f"{op.name}: {time.perf_counter() - started:.1f} s{_longest_row(rows)}", highlight=False)
            if interrupted is not None:
                raise interrupted
    return all_rows


def _longest_row(rows: list[results.Row]) -> str:
    """``; longest row: <provider> <dtype>/<shape> S s``: where an op's bench time went."""
    clocked = [r for r in rows if r.seconds is not None]
    if not clocked:
        return ""
    r = max(clocked, key=lambda r: r.seconds)
    return f"; longest row: {r.provider} {r.dtype}/{r.shape} {r.seconds:.1f} s"


def _failures(all_rows: dict[str, list[results.Row]]) -> list[results.Row]:
    return [r for rows in all_rows.values() for r in rows if r.kind == "exactfuse" and r.status in ("failed", "error")]


def draw_plots(target: str, all_rows: dict[str, list[results.Row]], title: str, console: Console) -> None:
    """One PNG of every op, or one per op when ``target`` contains ``{op}``."""
    from exactfuse.bench.plot import PlotUnavailableError, plot

    if "{op}" in target:
        jobs = [(target.replace("{op}", name), rows) for name, rows in all_rows.items()]
    else:
        jobs = [(target, [r for rows in all_rows.values() for r in rows])]
    for path, rows in jobs:
        try:
            console.print(f"[dim]plot: {plot(rows, path, title=title)}[/]")
        except (PlotUnavailableError, ValueError) as exc:
            console.print(f"[yellow]no plot {path}: {exc}[/]")


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM (``timeout``, a job scheduler) raises ``KeyboardInterrupt`` as SIGINT does, so that a stopped
    run still writes what it measured."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def warm_jobs(requested: int | None) -> int:
    """Processes of the warm-up before the timing pass (``--jobs``; 1: no warm-up). By default a process
    per core but two, at most 16, on a CUDA machine with 8 or more cores (as ``verify --jobs``); else 1."""
    return requested if requested is not None else compile_workers()


def warm_up(ops: list[Op], config: BenchConfig, jobs: int, console: Console) -> bool:
    """The warm-up (``exactfuse.bench.warm``) in ``jobs`` processes, at most one a task, and its line;
    none with one process. A failure in it is a dim line and the run goes on; False when SIGINT or SIGTERM
    stopped it (its workers ended), and the run stops there."""
    if jobs <= 1:
        return True
    started = time.perf_counter()
    try:
        tasks = warm.warm_tasks(ops, config)
        if tasks and all(os.path.exists(_marker(config, task.key)) for task in tasks):
            console.print(f"warm-up: none, a run here has made the first calls of its {len(tasks)} tasks")
            return True
        jobs = min(jobs, len(tasks))
        done = warm.warm_up(tasks, config, jobs) if jobs > 1 else None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted in the warm-up, before any case was timed[/]")
        return False
    except Exception as exc:  # the timing pass compiles what the warm-up did not
        console.print(f"[dim]warm-up not run: {escape(f'{type(exc).__name__}: {exc}')}[/]", highlight=False)
        return True
    if done is not None:
        for note in done.notes:
            console.print(f"[dim]warm-up: {escape(note)}[/]", highlight=False)
        seconds = time.perf_counter() - started
        longest = ", ".join(f"{task} {s:.1f} s" for task, s in done.longest())
        retried = f", {done.retried} run again out of memory" if done.retried else ""
        # the tasks' own seconds over the processes against the wall: how much of it is imports, waits and balance
        busy = sum(done.seconds.values())
        console.print(
            f"warm-up: {len(tasks)} tasks in {jobs} processes{retried}, {seconds:.1f} s ({busy:.0f} s of tasks, "
            f"{busy / jobs:.1f} s a process); longest: {escape(longest)}",
            highlight=False,
        )
    return True


def phase_line(clock: dict[str, float]) -> str:
    """``bench: T s in all: imports I s, rates R s, peers P s, warm-up W s, ...``: where the run's time went.
    ``clock``: the perf_counter at the end of each phase in order, the first counted from the process's start
    (``exactfuse_cli.STARTED``): the imports (torch, exactfuse, the command line), the copy and matmul rates,
    the peers' versions (their imports), then the warm-up, the timing pass and the plots."""
    from exactfuse_cli import STARTED

    ends = [("", STARTED), *clock.items()]
    parts = [f"{name} {end - ends[i - 1][1]:.1f} s" for i, (name, end) in enumerate(ends) if i]
    return f"bench: {ends[-1][1] - STARTED:.1f} s in all: {', '.join(parts)}"


def _marker(config: BenchConfig, key: tuple[str, ...]) -> str:
    """The marker (``commands.compiled_marker``) of a (op, dtype, case, candidate) of ``config``'s grid: the
    timing pass made that candidate's first call on that case here, so its compiles are in the caches and a
    warm-up of it would compile nothing."""
    return compiled_marker(*_marked(config, key))


def _marked(config: BenchConfig, key: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The marker's kind and task for ``key`` (op, dtype, case, candidate) in ``config``'s grid."""
    return "bench", (config.grid, *key)


def mark_rows(config: BenchConfig, all_rows: dict[str, list[results.Row]]) -> None:
    """Mark each row's (op, dtype, case, candidate) as called here (:func:`_marker`): the next run's warm-up
    leaves out what every task of it would recompile. A row that failed or erred is marked too: its first
    call ran and compiled what it could."""
    for rows in all_rows.values():
        for row in rows:
            mark_compiled(*_marked(config, (row.op, row.dtype, row.shape, row.provider)))


def bench_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def run(args: argparse.Namespace, console: Console) -> int:
    """Run ``exactfuse bench`` with parsed ``args``; returns the exit code."""
    if not torch.cuda.is_available():
        console.print(
            "[red]exactfuse bench needs a CUDA GPU[/]: torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}). "
            "Use `exactfuse verify` to check the contracts on the CPU."
        )
        return 2
    clock = {"imports": time.perf_counter()}
    grid = "quick" if args.quick else args.grid
    try:
        ops, notes = select_ops(args.ops, grid)
        check_providers(args.providers, ops)
        cases = resume_cases(args.resume, ops) if args.resume else None
    except UsageError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    for note in notes:
        console.print(f"[dim]{note}[/]")
    if not ops:
        console.print(f"[red]no op declares a {grid!r} bench grid[/]")
        return 2

    device = bench_device()
    # the quick grid's replays, 4 ms a measurement: its timing pass took 35.5 s so on an H100 (without the
    # peers' wheels) against 44.9 s at 10 ms (with them): benchmarks/results/h100/sweeps/main_job_times.txt
    rep_ms = args.rep_ms or (QUICK_REP_MS if grid == "quick" else 20.0)
    config = BenchConfig(
        grid=grid,
        dtypes=tuple(DTYPES[d] for d in dict.fromkeys(args.dtypes or ["bf16"])),
        providers=args.providers,
        peers=grid != "quick",
        compile=not args.no_compile,
        device=str(device),
        l2_bytes=l2_cache_bytes(device),
        deadline=time.monotonic() + args.time_budget if args.time_budget else None,
        shard=args.shard,
        cases=cases,
        case_pattern=args.case,
    )
    console.print(
        "[dim]measuring copy bandwidth" + (" and bf16 matmul rate" if any(o.flops_fn for o in ops) else "") + "...[/]"
    )
    roofline = measure_roofline(device, matmul=any(o.flops_fn is not None for o in ops))
    clock["rates"] = time.perf_counter()
    candidates = Candidates(config)
    peers = {f"{p.name}({o.name})": p.version() for o in ops for p in peers_for(o.name, candidates.wanted_peer)}
    meta = results.collect_meta(
        device,
        grid=grid,
        l2_bytes=config.l2_bytes,
        roofline=roofline.as_dict(),
        timing={"method": "triton.testing.do_bench_cudagraph", "return_mode": "median", "rep_ms": rep_ms},
        peers=peers,
    )
    console.print(
        f"[bold]{meta['gpu']}[/] torch {meta['torch']} triton {meta['triton']} git {meta['git_rev']}; "
        f"copy {roofline.copy_bytes_per_s / 1e9:,.0f} GB/s"
        + (f", bf16 matmul {roofline.matmul_flops_per_s / 1e12:,.0f} TFLOP/s" if roofline.matmul_flops_per_s else "")
        + f"; L2 {config.l2_bytes / 2**20:.0f} MiB; peers: "
        + (
            ", ".join(peers)
            or ("none importable" if config.peers else "not timed on the quick grid (--provider NAME times one)")
        )
    )
    out_dir = Path(args.out) if args.out else Path("benchmarks/results") / meta["gpu_slug"]
    reporter = RichReporter(console)
    clock["peers"] = time.perf_counter()
    try:
        with sigterm_interrupts():
            if not warm_up(ops, config, warm_jobs(args.jobs), console):
                return 130
            clock["warm-up"] = time.perf_counter()
            all_rows = bench_and_write(
                ops,
                config,
                timer=cudagraph_timer(rep_ms),
                roofline=roofline,
                meta=meta,
                out_dir=out_dir,
                console=console,
                reporter=reporter,
            )
        mark_rows(config, all_rows)
        clock["timing pass"] = time.perf_counter()
    except BenchInterruptedError:
        console.print(f"[yellow]interrupted; rerun with --resume {out_dir}/<op>.json for the cases left[/]")
        return 130
    finally:
        reporter.close()
    if args.plot:
        draw_plots(args.plot, all_rows, f"{meta['gpu']}, git {meta['git_rev']}, {grid} grid", console)
        clock["plots"] = time.perf_counter()
    console.print(phase_line(clock), highlight=False)
    failures = _failures(all_rows)
    if failures:
        console.print(f"[red]{len(failures)} exactfuse provider row(s) failed their gate or raised[/]")
        return 1
    return 0
