"""The warm-up before the timing pass: the bench's compiling spread over worker processes.

On an empty cache most of a bench run is compiling, one kernel at a time: the exactfuse providers' Triton
specializations, Inductor's graph of the native spec per shape (``native-compiled``) and the peers' kernels.
The warm-up runs one task per (op, dtype, case, candidate) that the timing pass will run, in spawned
processes, so that the compiles of one case's candidates (its Triton kernels, the spec under torch.compile,
a peer's own compiled form) run side by side; each task builds its case and makes its candidate's first call
as the timing pass makes it (``CaseBench.check``: ``accepts``, then the gate), which compiles what that call
needs into the disk caches the processes share (Triton's under ``TRITON_CACHE_DIR``, Inductor's FX graph
cache under ``TORCHINDUCTOR_CACHE_DIR``). The timing pass then runs in one process as before and loads from
them.

The warm-up times nothing, and nothing it computes reaches the results: a candidate that declines a case
or raises is passed over (the timing pass reports it), a task that fails is a note.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from exactfuse.bench.runner import BenchConfig, Candidates, CaseBench, _error_note, select_cases
from exactfuse.bench.timing import recompile_limits
from exactfuse.registry import OPS, Case, LazyCase, Op
from exactfuse.utils import DTYPE_NAMES, DTYPES_BY_NAME

_KIND_ORDER = {"peer": 0, "compiled": 1}  # then every other kind: the exactfuse providers


@dataclass(frozen=True)
class WarmTask:
    """One case of one op and dtype, and the names of the candidates to call on it (the warm-up gives each
    task one); ``kernels``: how many Triton kernels those candidates declare; ``kind``: the candidate's
    (``Candidate.kind``). The peers' tasks start first (their first calls autotune: FLA's conv backward
    took 47 s of a 74 s cold ``--quick`` warm-up on an H100 when it started behind the compiled specs of the
    ops before it, ``benchmarks/results/h100/sweeps/bench_quick.txt``), then the compiled spec's (Inductor),
    then the exactfuse providers', the most kernels first."""

    op: str
    dtype: str
    case: str
    candidates: tuple[str, ...]
    kernels: int = 0
    kind: str = ""

    @property
    def order(self) -> tuple[int, int]:
        return _KIND_ORDER.get(self.kind, len(_KIND_ORDER)), -self.kernels

    def __str__(self) -> str:
        return f"{self.op} {self.dtype}/{self.case} {','.join(self.candidates)}"

    @property
    def key(self) -> tuple[str, ...]:
        """The task as a row of the timing pass names it: op, dtype, case, candidates."""
        return (self.op, self.dtype, self.case, *self.candidates)


@dataclass
class WarmUp:
    """What a warm-up leaves: a note per task that failed, and each finished task's seconds in its worker
    (``longest``: the tasks that bound the warm-up's time)."""

    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    retried: int = 0  # tasks run again, fewer at a time, after they ran out of GPU memory beside the others

    def longest(self, n: int = 3) -> list[tuple[str, float]]:
        return sorted(self.seconds.items(), key=lambda item: -item[1])[:n]


def warm_tasks(ops: Sequence[Op], config: BenchConfig) -> list[WarmTask]:
    """The tasks of a run of ``config`` over ``ops``, in the timing pass's order: each dtype the op takes,
    each case ``select_cases`` keeps (``--case``, ``--shard``, ``--resume``), each candidate
    ``Candidates.for_op`` gives (``--provider``, ``--no-compile``), a task each, but the eager spec's."""
    candidates = Candidates(config)
    tasks = []
    for op in ops:
        cands = candidates.for_op(op)
        for dtype in config.dtypes:
            if dtype in op.dtypes:
                name = DTYPE_NAMES.get(dtype, str(dtype))
                tasks += [
                    WarmTask(op.name, name, case.id, (c.name,), len(c.kernels), c.kind)
                    for case in select_cases(op, dtype, config)
                    for c in cands
                    if c.kind != "reference"  # the eager spec compiles nothing
                ]
    return tasks


def warm_case(task: WarmTask, config: BenchConfig) -> None:
    """Build ``task``'s case and make each of its candidates' first call on it, as ``bench_op`` does
    (under ``torch.no_grad``, dynamo's recompile limits raised). A candidate that declines or raises is
    passed over; an error building the case or its reference propagates."""
    op, dtype = OPS[task.op], DTYPES_BY_NAME[task.dtype]
    cands = [c for c in Candidates(config).for_op(op) if c.name in task.candidates]
    case = _grid_case(op, dtype, config, task.case)
    with torch.no_grad(), recompile_limits():
        built = case.materialize() if isinstance(case, LazyCase) else case
        bench = CaseBench(op, dtype, built, config, timer=None, roof=None)  # check() neither times nor reads them
        for cand in cands:
            with contextlib.suppress(Exception):
                bench.check(cand, bench.new_row(cand))


def _grid_case(op: Op, dtype: torch.dtype, config: BenchConfig, case_id: str) -> Case | LazyCase:
    """The case ``case_id`` of ``op``'s grid; the cases before it are dropped as the grid yields them."""
    for case in op.grids[config.grid](torch.device(config.device), dtype):
        if case.id == case_id:
            return case
    raise KeyError(f"{op.name}: the {config.grid!r} grid has no case {case_id!r}")


def warm_task(task: WarmTask, config: BenchConfig) -> str | None:
    """``warm_case`` in a worker process; a note instead of an exception. Inductor compiles in the process
    (the workers are the parallelism; its own pool would be a process per core in each) and keeps no
    autotune cache: the config it would pick among a kernel's by timing them beside busy workers is left
    to the timing pass to pick. Neither setting is part of Inductor's cache key."""
    import torch._inductor.config as inductor_config

    import exactfuse.ops  # noqa: F401  (declares every op in a fresh process)

    try:
        with inductor_config.patch(compile_threads=1, autotune_local_cache=False):
            warm_case(task, config)
    except Exception as exc:
        return _error_note(exc)
    finally:  # the case's tensors are gone: give their memory back to the card for the other workers
        gc.collect()
        torch.cuda.empty_cache()
    return None


def out_of_memory(note: str | None) -> bool:
    """Whether a task's note says it ran out of GPU memory (beside the other workers' tasks)."""
    return note is not None and ("out of memory" in note.lower() or "ALLOC_FAILED" in note)


def timed_task(
    work: Callable[[WarmTask, BenchConfig], str | None], task: WarmTask, config: BenchConfig
) -> tuple[str | None, float]:
    """``work(task, config)`` and its seconds, measured in the worker (not the wait for a free one)."""
    started = time.perf_counter()
    note = work(task, config)
    return note, time.perf_counter() - started


def warm_up(
    tasks: Sequence[WarmTask],
    config: BenchConfig,
    jobs: int,
    work: Callable[[WarmTask, BenchConfig], str | None] = warm_task,
) -> WarmUp:
    """Run ``work(task, config)`` for every task in ``jobs`` spawned processes, in ``WarmTask.order``; then
    the tasks that ran out of GPU memory (:func:`out_of_memory`: a large case built by many workers at once)
    once more, at most :func:`retry_jobs` at a time. ``KeyboardInterrupt`` (SIGINT, or SIGTERM under
    ``exactfuse bench``) ends the workers at once and is raised again."""
    context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    done = WarmUp()
    try:
        notes = _run_tasks(pool, work, sorted(tasks, key=lambda t: t.order), config, jobs, done)
        again = [task for task, note in notes.items() if out_of_memory(note)]
        done.retried = len(again)
        notes |= _run_tasks(pool, work, again, config, retry_jobs(jobs), done)
        done.notes = [f"{task}: {note}" for task, note in notes.items() if note]
        pool.shutdown()
    except BaseException:
        _end_workers(pool)
        raise
    return done


def retry_jobs(jobs: int) -> int:
    """Tasks in flight when those that ran out of memory run again: a quarter of the workers."""
    return max(1, jobs // 4)


def _run_tasks(pool, work, tasks: Sequence[WarmTask], config: BenchConfig, most: int, done: WarmUp) -> dict:
    """``tasks`` in ``pool``, at most ``most`` in flight, in order; each task's note (None: it finished),
    its seconds into ``done``."""
    notes: dict[WarmTask, str | None] = {}
    queue = list(tasks)
    futures: dict[concurrent.futures.Future, WarmTask] = {}
    while queue or futures:
        while queue and len(futures) < most:
            task = queue.pop(0)
            futures[pool.submit(timed_task, work, task, config)] = task
        finished, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
            task = futures.pop(future)
            try:
                notes[task], done.seconds[str(task)] = future.result()
            except Exception as exc:  # a worker that died, a task that could not be sent
                notes[task] = _error_note(exc)
    return notes


def _end_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Drop the tasks not started and end the workers now, not after the compiles they are in."""
    workers = list((pool._processes or {}).values())  # Python has no public way before 3.14's terminate_workers
    for process in workers:
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)
