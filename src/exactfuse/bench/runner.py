"""The bench loop: grid -> candidates -> correctness gate -> timing -> rows.

Timing and the roofline are injected (a ``Timer`` and a ``Roofline``), so the
gate, the rows and the files are exercised on the CPU with a fake timer.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from exactfuse.bench import gate, resources
from exactfuse.bench.peers import PeerAdapter, peers_for
from exactfuse.bench.results import Row, case_key
from exactfuse.bench.roofline import Roofline
from exactfuse.bench.timing import MAX_BUFFERS, Timer, rotation_count
from exactfuse.registry import Case, Contract, LazyCase, Op, Tolerance
from exactfuse.registry.library import direct_triton_launches
from exactfuse.utils import DTYPE_NAMES

NATIVE, COMPILED = "native", "native-compiled"


@dataclass
class BenchConfig:
    """What to run. ``providers``: names to time (None: all); the gate's native reference always runs."""

    grid: str = "default"
    dtypes: Sequence[torch.dtype] = (torch.bfloat16,)
    providers: Sequence[str] | None = None
    # time the ops' peers where ``providers`` names none of them (the quick grid does not: FLA's conv autotunes
    # for 52 s of a 111 s cold ``bench --quick`` on an H100, benchmarks/results/h100/sweeps/main_job_times.txt)
    peers: bool = True
    compile: bool = True
    compile_backend: str = "inductor"
    device: str = "cuda"
    l2_bytes: int = 60 * 1024 * 1024
    max_buffers: int = MAX_BUFFERS
    # time.monotonic() after which no new case starts (--time-budget): the run
    # keeps the cases done so far, and the results say which were not run.
    deadline: float | None = None
    # (i, n): only every n-th case of each grid, starting at i (--shard i/n), so that n processes on n
    # GPUs share one grid; scripts/merge_results.py joins their files.
    shard: tuple[int, int] | None = None
    # only these cases, as ``results.case_key`` names them (--resume: an earlier run's cases not run)
    cases: frozenset[str] | None = None
    # only cases whose ``results.case_key`` matches this regular expression (--case, re.search)
    case_pattern: str | None = None


@dataclass
class Candidate:
    """Something to time: ``prepare(args, kwargs)`` returns a zero-argument call.

    ``contract(dtype, device_type)`` is what the gate checks (None: the
    reference itself); ``gated``: a failed check means it is not timed.
    """

    name: str
    kind: str
    prepare: Callable[[tuple, dict], Callable[[], object]]
    accepts: Callable[..., bool] = lambda *a, **k: True
    contract: Callable[[torch.dtype, str], Contract] | None = None
    gated: bool = True
    kernels: tuple = ()
    note: str = ""  # what the row computes, where that is not exactly the op (a peer's ``computes``)
    result_only: bool = False  # the gate checks the result alone, not the arguments the op mutates


class BenchInterruptedError(Exception):
    """A bench stopped by SIGINT or SIGTERM: ``rows`` were measured before it, ``not_run`` names the cases left."""

    def __init__(self, rows: list[Row], not_run: list[str]):
        super().__init__(f"interrupted with {len(not_run)} case(s) not run")
        self.rows, self.not_run = rows, not_run


class Reporter:
    """Progress callbacks; the CLI draws with rich, tests use this no-op."""

    def start(self, op: Op, dtype: torch.dtype, providers: list[str], n_cases: int) -> None: ...

    def case_done(self, op: Op, dtype: torch.dtype, case: Case, rows: list[Row]) -> None: ...

    def done(self, op: Op, dtype: torch.dtype, rows: list[Row]) -> None: ...


def _bind(fn: Callable) -> Callable[[tuple, dict], Callable[[], object]]:
    return lambda args, kwargs: functools.partial(fn, *args, **kwargs)


def _launching_directly(fn: Callable) -> Callable:
    """``fn`` with its Triton kernels launched as an eager call of the op launches them."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with direct_triton_launches():
            return fn(*args, **kwargs)

    return run


def _baseline_contract(dtype: torch.dtype, device_type: str) -> Contract:
    return Tolerance()


@dataclass
class Candidates:
    """Builds the candidates of each op; one ``torch.compile`` of each spec per run."""

    config: BenchConfig
    compiled: dict[str, Callable] = field(default_factory=dict)

    def wanted(self, name: str) -> bool:
        return self.config.providers is None or name in self.config.providers

    def wanted_peer(self, name: str) -> bool:
        return self.config.peers if self.config.providers is None else name in self.config.providers

    def compiled_native(self, op: Op) -> Callable:
        if op.name not in self.compiled:
            # dynamic=False: one static-shape graph per shape; calls on other
            # buffers of the same shape and strides reuse it (dynamo guards on
            # sizes, strides and dtype, not on storage).
            self.compiled[op.name] = torch.compile(op.native, dynamic=False, backend=self.config.compile_backend)
        return self.compiled[op.name]

    def for_op(self, op: Op) -> list[Candidate]:
        out = []
        for name, provider in op.providers.items():
            if name == NATIVE or not self.wanted(name) or not provider.available:
                continue
            out.append(
                Candidate(
                    name,
                    "exactfuse",
                    _bind(_launching_directly(provider.fn)),
                    provider.accepts,
                    op.contract_for,
                    gated=True,
                    kernels=tuple(provider.kernels),
                )
            )
        if self.wanted(NATIVE):
            out.append(Candidate(NATIVE, "reference", _bind(op.native), contract=None, gated=False))
        if self.config.compile and self.wanted(COMPILED):
            out.append(
                Candidate(
                    COMPILED, "compiled", _bind(self.compiled_native(op)), contract=_baseline_contract, gated=False
                )
            )
        out += [self._peer(peer) for peer in peers_for(op.name, self.wanted_peer)]
        return out

    @staticmethod
    def _peer(peer: PeerAdapter) -> Candidate:
        return Candidate(
            peer.name, "peer", peer.prepare, peer.accepts, contract=_baseline_contract, gated=False,
            note=peer.computes, result_only=peer.result_only,
        )  # fmt: skip


def expand_grid(op: Op, grid: str, device: torch.device | str, dtype: torch.dtype) -> list[Case | LazyCase]:
    """The cases of ``op``'s bench grid ``grid`` for ``dtype`` on ``device``; ids must be unique. A
    ``LazyCase`` stays unbuilt here: ``bench_op`` builds each as it runs it."""
    if grid not in op.grids:
        raise KeyError(f"{op.name}: no bench grid {grid!r}; declared grids: {sorted(op.grids)}")
    cases = list(op.grids[grid](torch.device(device), dtype))
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise ValueError(f"{op.name}: bench grid {grid!r} repeats case id {case.id!r}")
        seen.add(case.id)
    return cases


def select_cases(op: Op, dtype: torch.dtype, config: BenchConfig) -> list[Case | LazyCase]:
    """The cases of ``op``'s grid for ``dtype`` that a run of ``config`` takes, in grid order: those
    ``--resume`` names, then those ``--case`` matches, then every n-th of them (``--shard``)."""
    cases = expand_grid(op, config.grid, config.device, dtype)
    name = DTYPE_NAMES.get(dtype, str(dtype))
    if config.cases is not None:
        cases = [c for c in cases if case_key(name, c.id) in config.cases]
    if config.case_pattern is not None:
        cases = [c for c in cases if re.search(config.case_pattern, case_key(name, c.id))]
    if config.shard is not None:
        cases = cases[config.shard[0] :: config.shard[1]]
    return cases


def _device_type(case: Case) -> str:
    for value in (*case.args, *case.kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device.type
    return "cpu"


def _tensor_bytes(case: Case) -> int:
    values = (*case.args, *case.kwargs.values())
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _error_note(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


class CaseBench:
    """Everything done for one case: reference, buffers, then each candidate."""

    def __init__(self, op: Op, dtype: torch.dtype, case: Case, config: BenchConfig, timer: Timer, roof: Roofline):
        self.op, self.dtype, self.case, self.timer, self.roof = op, dtype, case, timer, roof
        self.device_type = _device_type(case)
        self.bytes = op.bytes_fn(*case.args, **case.kwargs) if op.bytes_fn else None
        self.flops = op.flops_fn(*case.args, **case.kwargs) if op.flops_fn else None
        working_set = self.bytes if self.bytes is not None else _tensor_bytes(case)
        self.n_buffers = rotation_count(working_set, config.l2_bytes, config.max_buffers)
        self.expected = gate.reference_outputs(op, case.args, case.kwargs)
        self._buffers: list[tuple[tuple, dict]] | None = None

    def buffers(self) -> list[tuple[tuple, dict]]:
        """The timed argument sets: the case itself and copies at other addresses; for an op that
        mutates its arguments only copies, so that the case stays as it was for each candidate's gate."""
        if self._buffers is None:
            first = (self.case.args, self.case.kwargs)
            copies = self.n_buffers - (0 if self.op.mutates_args else 1)
            self._buffers = ([] if self.op.mutates_args else [first]) + [gate.clone_args(*first) for _ in range(copies)]
        return self._buffers

    def new_row(self, cand: Candidate) -> Row:
        return Row(
            self.op.name,
            DTYPE_NAMES.get(self.dtype, str(self.dtype)),
            self.case.id,
            cand.name,
            cand.kind,
            buffers=self.n_buffers,
            bytes=self.bytes,
            flops=self.flops,
        )

    def check(self, cand: Candidate, row: Row) -> bool:
        """``cand``'s first call on the case: whether it accepts the case, then its gate. Fills ``row``'s
        status and error columns and says whether ``cand`` goes on to be timed; an exception propagates.
        The warm-up before the timing pass (``bench.warm``) makes this same call."""
        args, kwargs = self.case.args, self.case.kwargs
        verdict = cand.accepts(*args, **kwargs)
        if verdict is not True:
            row.status, row.note = "skipped", verdict if isinstance(verdict, str) else "declines these arguments"
            return False
        if cand.contract is None:
            row.status = "reference"
            return True
        contract = cand.contract(self.dtype, self.device_type)
        before = resources.snapshot(cand.kernels)
        check = gate.run_gate(self.op, cand.prepare, args, kwargs, self.expected, contract, cand.result_only)
        row.kernels = [k.as_dict() for k in resources.new_specializations(before, resources.snapshot(cand.kernels))]
        row.contract, row.max_abs_err, row.max_ulp = check.contract, check.max_abs_err, check.max_ulp
        row.mismatches = check.mismatches
        if not check.passed:
            row.note = check.summary()
            if cand.gated:
                row.status = "failed"
                return False
            row.status = "inexact"
        return True

    def row(self, cand: Candidate) -> Row:
        started = time.perf_counter()
        row = self._timed_row(cand)
        row.seconds = time.perf_counter() - started
        return row

    def _timed_row(self, cand: Candidate) -> Row:
        row = self.new_row(cand)
        try:
            if not self.check(cand, row):
                return row
            calls = [cand.prepare(a, kw) for a, kw in self.buffers()]
            row.time_us = 1e3 * self.timer(lambda: [call() for call in calls]) / len(calls)
            form = getattr(calls[0], "form", None)  # the peer's natural call that was fastest (peers.fastest)
            said = [s for s in (row.note, cand.note, form and f"fastest form: {form}") if s]
            row.note = "; ".join(said)
        except Exception as exc:  # one broken provider must not end the run
            row.status, row.note, row.time_us = "error", _error_note(exc), None
            return row
        self._roofline(row)
        return row

    def _roofline(self, row: Row) -> None:
        seconds = row.time_us * 1e-6
        bound = self.roof.min_time_s(self.bytes, self.flops)
        if bound is not None:
            row.roofline_us = bound * 1e6
            row.pct_roofline = self.roof.percent(self.bytes, self.flops, seconds)
        if self.bytes is not None and seconds > 0:
            row.gbps = self.bytes / seconds / 1e9
        if self.flops is not None and seconds > 0:
            row.tflops = self.flops / seconds / 1e12

    def run(self, candidates: list[Candidate]) -> list[Row]:
        rows = [self.row(c) for c in candidates]
        times = {r.provider: r.time_us for r in rows if r.timed}
        for r in rows:
            if r.timed:
                if times.get(NATIVE):
                    r.speedup_vs_native = times[NATIVE] / r.time_us
                if times.get(COMPILED):
                    r.speedup_vs_native_compiled = times[COMPILED] / r.time_us
        return rows


def bench_op(
    op: Op,
    dtype: torch.dtype,
    config: BenchConfig,
    *,
    timer: Timer,
    roofline: Roofline,
    candidates: Candidates | None = None,
    reporter: Reporter | None = None,
    not_run: list[str] | None = None,
) -> list[Row]:
    """Every case of ``op``'s grid for ``dtype``: one row per (case, candidate).

    Past ``config.deadline`` no new case starts; the ids of the cases left are
    appended to ``not_run`` (when given). A ``KeyboardInterrupt`` (SIGINT, or
    SIGTERM under ``exactfuse bench``) ends the loop with ``BenchInterruptedError``,
    which carries the rows of the cases done.
    """
    reporter = reporter or Reporter()
    candidates = candidates or Candidates(config)
    cands = candidates.for_op(op)
    cases = select_cases(op, dtype, config)
    name = DTYPE_NAMES.get(dtype, str(dtype))
    reporter.start(op, dtype, [c.name for c in cands], len(cases))
    rows: list[Row] = []
    not_run = [] if not_run is None else not_run
    with torch.no_grad():
        while cases:
            if config.deadline is not None and time.monotonic() > config.deadline:
                not_run += [case_key(name, c.id) for c in cases]
                break
            case = cases[0]
            try:
                case_rows = _bench_case(op, dtype, case, config, timer, roofline, cands)
            except KeyboardInterrupt:
                not_run += [case_key(name, c.id) for c in cases]
                reporter.done(op, dtype, rows)
                raise BenchInterruptedError(rows, not_run) from None
            cases.pop(0)  # drop each case's tensors once it is done
            rows += case_rows
            reporter.case_done(op, dtype, case, case_rows)
    reporter.done(op, dtype, rows)
    return rows


def _bench_case(op, dtype, case, config, timer, roofline, cands) -> list[Row]:
    try:
        built = case.materialize() if isinstance(case, LazyCase) else case
        bench = CaseBench(op, dtype, built, config, timer, roofline)
    except Exception as exc:  # the reference or the cost raised: every candidate errs
        note = f"reference failed: {_error_note(exc)}"
        name = DTYPE_NAMES.get(dtype, str(dtype))
        return [Row(op.name, name, case.id, c.name, c.kind, "error", note=note) for c in cands]
    return bench.run(cands)
