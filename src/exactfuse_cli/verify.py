"""``exactfuse verify``: every provider's contract against native on every declared case, one row per
(op, provider, dtype), in this process or in worker processes (``--jobs``), then the fast-math proofs of
the activations the checked ops evaluate. Run by ``exactfuse_cli.commands`` on the parsed arguments.
"""

from __future__ import annotations

import os
import time
import warnings

import torch
from rich.console import Console
from rich.table import Table

from exactfuse.registry import get
from exactfuse.registry.contracts import Bitwise, RowBitwise, Ulp
from exactfuse_cli.commands import (
    DTYPES,
    SHORT,
    compile_workers,
    compiled_marker,
    device_here,
    mark_compiled,
    named_ops,
)
from exactfuse_cli.plan import case_owners

# Contracts stated in ulps of the output dtype: verify's "max ulp" column is theirs; under a tolerance
# contract an ulp count (of tiny values near zero) says nothing, and the column shows "-".
ULP_CONTRACTS = (Bitwise, Ulp, RowBitwise)


def verify_op(
    op,
    provider: str,
    dtype: torch.dtype,
    device: torch.device,
    quick: bool,
    part: int = 0,
    parts: int = 1,
    planned: bool | None = None,
) -> dict:
    """Check ``provider`` against native on the input cases of ``op``; one summary row. With ``parts`` > 1,
    only part ``part`` of the row: ``planned``, the cases ``plan.case_owners`` gives it (the cases that launch
    the same specializations together), else the cases whose index in ``op.iter_cases`` is ``part`` mod
    ``parts``. ``planned`` None: on a GPU for a compiler-visible op (its launchers choose from shapes, never
    from values, so every part finds the same plan), else not. :func:`merge_parts` makes the row of all its
    parts; each part's row says which cases it checked (``owned``, of ``walked``)."""
    if planned is None:
        planned = device.type == "cuda" and op.compiler == "visible"
    row = {"cases": 0, "declined": 0, "failed": 0, "max_abs_err": 0.0, "max_ulp": 0, "first_failure": "",
           "owned": [], "walked": 0}  # fmt: skip
    with warnings.catch_warnings():
        # What the edge cases are built to provoke: NaN/Inf inputs in the interpreter's numpy reductions,
        # the std of an empty batch in a native spec. The contract check reports what matters.
        warnings.filterwarnings("ignore", message="invalid value encountered", category=RuntimeWarning)
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
        warnings.filterwarnings("ignore", message=r"std\(\): degrees of freedom", category=UserWarning)
        owners = case_owners(op, provider, dtype, device, quick, parts) if planned and parts > 1 else None
        _verify_cases(op, provider, dtype, device, quick, row, part, parts, owners)
    return row


def _verify_cases(
    op,
    provider: str,
    dtype: torch.dtype,
    device: torch.device,
    quick: bool,
    row: dict,
    part: int,
    parts: int,
    owners: list[int] | None,
) -> None:
    # Another part's case is built all the same: the cases draw their tensors from one seeded stream, so
    # each part walks them all to meet the same cases as the whole row.
    index = 0
    for case in op.iter_cases(device, dtype, quick=quick):  # one case's tensors alive at a time
        if (index % parts if owners is None else owners[index]) == part:
            row["owned"].append(index)
            _check_case(op, provider, case, row)
        index += 1  # not enumerate: its reused tuple would keep this case while the next is built
        del case  # before the generator builds the next one
    row["walked"] = index


def _check_case(op, provider: str, case, row: dict) -> None:
    from exactfuse.testing import check_provider

    if op.providers[provider].accepts(*case.args, **case.kwargs) is not True:
        row["declined"] += 1
        return
    result = check_provider(op, provider, case)
    row["cases"] += 1
    row["max_abs_err"] = max(row["max_abs_err"], result.max_abs_err)
    row["max_ulp"] = max(row["max_ulp"], result.max_ulp)
    if not result.passed:
        row["failed"] += 1
        row["first_failure"] = row["first_failure"] or f"{case.id}: {result.summary()}"


def merge_parts(rows: list[dict]) -> dict:
    """The row of ``(op, provider, dtype)`` from its parts' rows, in part order: cases, declined and
    failed summed, the largest errors, the first part's first failure that has one. Parts that did not
    check each of the row's cases exactly once between them (their ``owned`` cases of ``walked``) fail the
    row: a case unchecked is not a pass."""
    merged = {
        "cases": sum(r["cases"] for r in rows),
        "declined": sum(r["declined"] for r in rows),
        "failed": sum(r["failed"] for r in rows),
        "max_abs_err": max(r["max_abs_err"] for r in rows),
        "max_ulp": max(r["max_ulp"] for r in rows),
        "first_failure": next((r["first_failure"] for r in rows if r["first_failure"]), ""),
    }
    if all("owned" in r for r in rows):
        walked = {r["walked"] for r in rows}
        owned = sorted(i for r in rows for i in r["owned"])
        if len(walked) != 1 or owned != list(range(walked.pop())):
            merged["failed"] += 1
            merged["first_failure"] = merged["first_failure"] or (
                f"the parts did not check each case once: they walked {sorted({r['walked'] for r in rows})} "
                f"case(s) and checked {owned}"
            )
    return merged


def _verify_task(
    op_name: str, provider: str, dtype_name: str, quick: bool, part: int = 0, parts: int = 1
) -> tuple[dict, float]:
    """One verify row, or part ``part`` of its ``parts`` (in a worker process under ``--jobs``): the row
    and its seconds."""
    from exactfuse.registry import OPS

    start = time.perf_counter()
    row = verify_op(OPS[op_name], provider, DTYPES[dtype_name], device_here(), quick, part, parts)
    return row, time.perf_counter() - start


def _verify_rows(tasks: list[tuple[str, str, str]], quick: bool, jobs: int):
    """Yield ``(task, row, seconds)`` as each row finishes: here, or in ``jobs`` worker processes (each
    compiles its own kernels; the Triton disk cache is shared), a row split into the parts
    :func:`part_tasks` plans and merged (:func:`merge_parts`) once its last part is done; its seconds
    are its parts' summed."""
    planned = part_tasks(tasks, jobs)
    if jobs <= 1 or len(planned) <= 1:
        for task in tasks:
            yield (task, *_verify_task(*task, quick))
        return
    import concurrent.futures
    import multiprocessing

    done: dict[tuple[str, str, str], dict[int, tuple[dict, float]]] = {task: {} for task in tasks}
    context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_verify_task, *task, quick, part, parts): (task, part, parts)
                   for task, part, parts in planned}  # fmt: skip
        for future in concurrent.futures.as_completed(futures):
            task, part, parts = futures[future]
            done[task][part] = future.result()
            if len(done[task]) == parts:
                rows, seconds = zip(*(done[task][i] for i in range(parts)), strict=True)
                yield task, merge_parts(list(rows)), sum(seconds)


def compile_heavy_first(tasks: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``tasks`` with the rows of the providers that declare the most kernels first (stable otherwise): on an
    empty Triton cache a row's time is compiling its kernels' specializations (the conv family's four
    kernels took 20-51 s a row on an H100, one-kernel activations 2-6 s; ``sweeps/verify_quick_cold.txt``),
    so the long rows start first and the short ones fill in after them."""
    return sorted(tasks, key=lambda t: -_kernels(t))


def _kernels(task: tuple[str, str, str]) -> int:
    from exactfuse.registry import OPS

    return len(OPS[task[0]].providers[task[1]].kernels or ())


# The most parts a row is split into: four, the most kernels a provider declares now (the conv family's,
# gelu_and_mul_sparse's); a provider with more would make parts of a few cases each.
MAX_PARTS = 4


def row_parts(task: tuple[str, str, str], jobs: int) -> int:
    """How many parts the row ``task`` is checked in: 1 in one process (``jobs`` 1); under ``--jobs`` one a
    kernel its provider declares (:func:`compile_heavy_first`'s measure of a row's compile time), at
    least 1, at most :data:`MAX_PARTS` and at most ``jobs``. Part ``i`` of ``n`` checks the cases whose
    index in ``op.iter_cases`` is ``i`` mod ``n``, so that a long row's specializations compile in
    several workers at once."""
    return 1 if jobs <= 1 else max(1, min(_kernels(task), MAX_PARTS, jobs))


def part_tasks(tasks: list[tuple[str, str, str]], jobs: int) -> list[tuple[tuple[str, str, str], int, int]]:
    """``(task, part, parts)`` for every part of every row (:func:`row_parts`), in the order the workers take
    them: each row's first part, rows in :func:`compile_heavy_first` order, then each split row's second
    part, and so on. A part of a row split in one a kernel is about as long as a one-kernel row, and some
    one-kernel rows are long (moe_silu_and_mul_backward's 16-19 s): they start in the first round, not
    after every part of the conv rows (replaying ``sweeps/verify_quick_cold.txt``'s row seconds on 14
    workers, each part an even share of its row: 41 s this way, 49 s with each row's parts together).
    With ``jobs`` 1, one ``(task, 0, 1)`` a row, in ``tasks``' order."""
    if jobs <= 1:
        return [(task, 0, 1) for task in tasks]
    parts = {task: row_parts(task, jobs) for task in tasks}
    heavy_first = compile_heavy_first(tasks)
    return [(task, part, parts[task]) for part in range(MAX_PARTS) for task in heavy_first if part < parts[task]]


def default_jobs(quick: bool, tasks: list[tuple[str, str, str]]) -> int:
    """``verify --jobs`` default on a CUDA machine with 8 or more cores: a worker process per core but two
    (at most 16, at most one a part of a row, :func:`part_tasks`), since a run on an empty Triton cache is
    compiling, one kernel at a time a process (four workers took 110 s for 35 of the 54 quick rows on an
    H100, 362 s of row time);
    but one process for the quick case sets once every row asked for has been checked here before
    (:func:`_compiled_marker`): each worker starts its own torch and CUDA context, more than a warm
    ``--quick`` run's rows take (on the H200 13.9 s in one process against 20.6 s in four,
    ``sweeps/verify_time.txt``). Elsewhere 1."""
    most = compile_workers()
    if most == 1:
        return 1
    if quick and all(os.path.exists(_compiled_marker(task)) for task in tasks):
        return 1
    return max(1, min(most, len(part_tasks(tasks, most))))


def _compiled_marker(task: tuple[str, str, str]) -> str:
    """The marker of the quick row ``(op, provider, dtype)`` (``commands.compiled_marker``): its kernels are
    in Triton's cache here."""
    return compiled_marker("verify-quick", task)


def _mark_compiled(task: tuple[str, str, str]) -> None:
    mark_compiled("verify-quick", task)


def run(args, console: Console) -> int:
    """Run ``exactfuse verify`` with parsed ``args``; returns the exit code (1: a row failed, 2: nothing checked)."""
    start = time.perf_counter()
    device = device_here()
    on_gpu = device.type == "cuda"
    quick = args.quick or not on_gpu
    table = Table(title=f"exactfuse verify on {torch.cuda.get_device_name(0) if on_gpu else 'CPU (interpreter)'}")
    for col in ("op", "provider", "dtype", "contract", "cases", "declined", "max abs err", "max ulp", "result"):
        table.add_column(col)
    ops = named_ops(args.op)
    tasks, skipped = [], []
    for op in ops:
        for dtype in [DTYPES[d] for d in args.dtype] if args.dtype else list(op.dtypes):
            if dtype not in op.dtypes:
                skipped.append(f"{op.name} takes no {SHORT[dtype]}")
            elif not on_gpu and dtype == torch.bfloat16:
                skipped.append(f"{op.name}/{SHORT[dtype]}: the Triton interpreter has no bf16 arithmetic")
            else:
                tasks += [(op.name, n, SHORT[dtype]) for n, p in op.providers.items() if n != "native" and p.available]
                for n, p in op.providers.items():
                    note = f"the {n} provider of {op.name} is unavailable here: {p.unavailable_reason}"
                    if not p.available and note not in skipped:
                        skipped.append(note)
    if not tasks:
        console.print(f"[red]nothing was checked: {'; '.join(skipped) or 'no provider besides native here'}[/]")
        return 2
    jobs = args.jobs if args.jobs is not None else default_jobs(quick, tasks)
    console.print(
        f"{table.title}: {len(ops)} op(s), {len(tasks)} row(s), {'quick' if quick else 'full'} case sets, "
        f"{jobs} process(es)",
        highlight=False,
    )
    done = {}
    for (op_name, name, dtype_name), row, seconds in _verify_rows(tasks, quick, jobs):
        done[op_name, name, dtype_name] = row, seconds
        if quick and on_gpu:
            _mark_compiled((op_name, name, dtype_name))
        console.print(
            f"  checked {op_name}/{name}/{dtype_name}: {row['cases']} case(s), {row['failed']} failed, "
            f"{row['declined']} declined, {seconds:.1f}s",
            highlight=False,
        )
    failures, notes = 0, []
    for task in tasks:  # the table in declaration order, whatever order the rows finished in
        (op_name, name, dtype_name), (row, seconds) = task, done[task]
        ok = row["failed"] == 0 and row["cases"] > 0
        failures += not ok
        if row["first_failure"]:
            notes.append(f"{op_name}/{name}/{dtype_name}: {row['first_failure']}")
        elif row["cases"] == 0:
            notes.append(f"{op_name}/{name}/{dtype_name}: no case ran on this provider")
        contract = get(op_name).contract_for(DTYPES[dtype_name], device.type)
        table.add_row(
            op_name,
            name,
            dtype_name,
            contract.describe(DTYPES[dtype_name]),
            str(row["cases"]),
            str(row["declined"]),
            f"{row['max_abs_err']:.3g}",
            str(row["max_ulp"]) if isinstance(contract, ULP_CONTRACTS) else "-",
            f"[green]PASS[/] ({seconds:.1f}s)" if ok else "[red]FAIL[/]",
        )
    console.print(table)
    rows_done = time.perf_counter()
    proofs = _proof_table({op.name for op in ops}, args.dtype, device)
    if proofs is not None:
        console.print(proofs)
    for note in notes:
        console.print(f"[red]{note}[/]")
    for note in skipped:
        console.print(f"[yellow]not checked: {note}[/]")
    per_op: dict[str, float] = {}
    for (op_name, *_), (_, seconds) in done.items():
        per_op[op_name] = per_op.get(op_name, 0.0) + seconds
    times = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in sorted(per_op.items(), key=lambda kv: -kv[1]))
    console.print(f"time per op (its rows' seconds, summed over processes): {times}", highlight=False)
    end = time.perf_counter()
    console.print(
        f"verify: {end - start:.1f} s in all: rows {rows_done - start:.1f} s in {jobs} process(es), "
        f"fast-math proofs {end - rows_done:.1f} s",
        highlight=False,
    )
    console.print("[green]all contracts hold[/]" if failures == 0 else f"[red]{failures} row(s) failed[/]")
    return 1 if failures else 0


def _proof_table(op_names: set[str], dtype_names: list[str] | None, device: torch.device) -> Table | None:
    """The fast-formula proofs of the activations the selected ops evaluate (``exactfuse.ops.fastmath``):
    one row per activation and dtype, the formula the kernels take and each rejected candidate. Under
    the interpreter the proofs run against CPU PyTorch (fp16) and the kernels keep the exact formulas."""
    from exactfuse.ops import fastmath

    activations = [a for a, users in fastmath.OPS_USING.items() if op_names & set(users)]
    if not activations:
        return None
    on_gpu = device.type == "cuda"
    where = "this GPU" if on_gpu else "the CPU (interpreter stand-ins; the kernels here keep the exact formulas)"
    table = Table(title=f"fast-math proofs: all 65,536 inputs against eager PyTorch on {where}")
    for col in ("activation", "dtype", "formula the kernels take", "rejected candidates" if on_gpu else "candidates"):
        table.add_column(col)
    for activation in activations:
        for name in dtype_names or ("fp16", "bf16", "fp32"):
            dtype = DTYPES[name]
            if dtype == torch.float32:
                table.add_row(activation, name, "exact (fp32 is never proven)", "-")
            elif not on_gpu and dtype == torch.bfloat16:
                table.add_row(activation, name, "exact (the interpreter has no bf16 arithmetic)", "-")
            elif on_gpu:
                result = fastmath.proof(activation, dtype, device)
                rejected = "; ".join(f"{c.name}: {c.summary()}" for c in result.checks if c.differing)
                chosen = f"[green]{result.name}[/]" if result.fast else result.name
                table.add_row(activation, name, chosen, f"[yellow]{rejected}[/]" if rejected else "-")
            else:  # shown, not admitted: the candidates' checks against CPU PyTorch
                checks = [fastmath.check_formula(activation, f, dtype, device)
                          for f in fastmath.CANDIDATES.get((activation, dtype), ())]  # fmt: skip
                shown = "; ".join(f"{c.name}: {c.summary()}" for c in checks) or "-"
                table.add_row(activation, name, fastmath.FORMULAS[fastmath.EXACT[activation]][1], shown)
    return table
