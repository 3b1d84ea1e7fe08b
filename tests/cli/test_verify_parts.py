"""``verify --jobs`` splits the rows of providers that declare several kernels into parts that run as separate
tasks, and merges the parts back into one row: the rule for parts, their order, the merge, and that the parts
of a row check exactly the row's cases."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from exactfuse.registry import OPS
from exactfuse_cli import verify

SHORT_CONV = ("short_conv", "triton", "fp32")  # four kernels
CONV_BACKWARD = ("causal_conv1d_fn_backward", "triton", "fp32")  # two
SILU = ("silu_and_mul", "triton", "fp32")  # one
PACKED = ("w4a16_gemm_packed", "gluon", "fp16")  # none declared


def _row(cases=1, declined=0, failed=0, max_abs_err=0.0, max_ulp=0, first_failure=""):
    return {"cases": cases, "declined": declined, "failed": failed, "max_abs_err": max_abs_err,
            "max_ulp": max_ulp, "first_failure": first_failure}  # fmt: skip


def test_a_row_has_a_part_a_kernel_under_jobs_and_one_in_one_process(monkeypatch):
    assert [verify.row_parts(t, 14) for t in (SHORT_CONV, CONV_BACKWARD, SILU, PACKED)] == [4, 2, 1, 1]
    assert [verify.row_parts(t, 1) for t in (SHORT_CONV, CONV_BACKWARD, SILU, PACKED)] == [1, 1, 1, 1]
    assert verify.row_parts(SHORT_CONV, 3) == 3  # no more parts than workers
    monkeypatch.setattr(verify, "MAX_PARTS", 2)
    assert verify.row_parts(SHORT_CONV, 14) == 2


def test_parts_go_out_a_round_at_a_time_compile_heavy_rows_first():
    tasks = [SILU, SHORT_CONV, CONV_BACKWARD]
    assert verify.part_tasks(tasks, 14) == [
        (SHORT_CONV, 0, 4), (CONV_BACKWARD, 0, 2), (SILU, 0, 1),
        (SHORT_CONV, 1, 4), (CONV_BACKWARD, 1, 2),
        (SHORT_CONV, 2, 4),
        (SHORT_CONV, 3, 4),
    ]  # fmt: skip
    assert verify.part_tasks(tasks, 1) == [(SILU, 0, 1), (SHORT_CONV, 0, 1), (CONV_BACKWARD, 0, 1)]


def test_one_job_checks_each_row_in_one_task(monkeypatch):
    calls = []

    def task(*args):
        calls.append(args)
        return _row(), 0.5

    monkeypatch.setattr(verify, "_verify_task", task)
    tasks = [SHORT_CONV, SILU, CONV_BACKWARD]
    rows = list(verify._verify_rows(tasks, True, 1))
    assert calls == [(*t, True) for t in tasks]  # no part arguments: the whole row, in declaration order
    assert rows == [(t, _row(), 0.5) for t in tasks]


def test_merge_sums_counts_takes_the_largest_errors_and_the_first_failing_part():
    parts = [
        _row(cases=3, declined=1, max_abs_err=0.25, max_ulp=2),
        _row(cases=2, failed=1, max_abs_err=0.5, max_ulp=1, first_failure="T7-d31: 3 elements differ"),
        _row(cases=4, declined=2, failed=2, max_abs_err=0.125, max_ulp=9, first_failure="T0-d1: 1 element differs"),
    ]
    assert verify.merge_parts(parts) == _row(
        cases=9, declined=3, failed=3, max_abs_err=0.5, max_ulp=9, first_failure="T7-d31: 3 elements differ"
    )
    assert verify.merge_parts([_row(cases=2)]) == _row(cases=2)


def _merged(row: dict) -> dict:
    """A whole row as ``merge_parts`` gives it: without the cases it checked (``owned`` of ``walked``)."""
    return {k: v for k, v in row.items() if k not in ("owned", "walked")}


def _checked_ids(monkeypatch, task, part=0, parts=1):
    """The ids of the cases ``verify_op`` checks (accepted or declined) for part ``part`` of ``parts`` of
    the row ``task`` on the CPU, and the row."""
    ids = []
    check = verify._check_case

    def recording(op, provider, case, row):
        ids.append(case.id)
        check(op, provider, case, row)

    monkeypatch.setattr(verify, "_check_case", recording)
    op, provider, dtype = task
    row = verify.verify_op(OPS[op], provider, verify.DTYPES[dtype], torch.device("cpu"), True, part, parts)
    monkeypatch.setattr(verify, "_check_case", check)
    return ids, row


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "task, parts",
    [(("gelu_and_mul_sparse", "triton", "fp32"), verify.row_parts(("gelu_and_mul_sparse", "triton", "fp32"), 8)),
     (SILU, 3)],
    ids=["gelu_and_mul_sparse-fp32-own-rule", "silu_and_mul-fp32-3-parts"],
)  # fmt: skip
def test_the_parts_of_a_row_check_exactly_its_cases_and_merge_to_its_row(monkeypatch, task, parts):
    whole, row = _checked_ids(monkeypatch, task)
    split = [_checked_ids(monkeypatch, task, part, parts) for part in range(parts)]
    assert parts > 1 and len(whole) > parts and len(set(whole)) == len(whole)
    for part, (ids, _) in enumerate(split):
        assert ids == whole[part::parts]  # every part walks the same cases and keeps its share
    assert sorted(i for ids, _ in split for i in ids) == sorted(whole)  # none twice, none missing
    assert verify.merge_parts([r for _, r in split]) == _merged(row)


@pytest.mark.interpreter
def test_a_row_split_over_worker_processes_prints_and_tabulates_as_one_row():
    def run(jobs: str) -> tuple[list[str], list[str]]:
        argv = [sys.executable, "-m", "exactfuse_cli", "verify", "--op", "gelu_and_mul_sparse", "--dtype", "fp32"]
        proc = subprocess.run([*argv, "--jobs", jobs], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.split("fast-math proofs")[0].splitlines()
        progress = [line.split(",")[0] for line in lines if line.startswith("  checked ")]
        cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
        rows = [row for row in cells if row[0]]  # not a wrapped contract's second line
        return progress, [[*row[:-1], row[-1].split()[0]] for row in rows]  # the result without its seconds

    assert verify.row_parts(("gelu_and_mul_sparse", "triton", "fp32"), 2) == 2
    one, two = run("1"), run("2")
    assert one == two and one[0] == ["  checked gelu_and_mul_sparse/triton/fp32: 21 case(s)"], one
    assert len(one[1]) == 1 and one[1][0][4:6] == ["21", "0"] and one[1][0][-1] == "PASS", one


@pytest.mark.interpreter
def test_a_part_holds_one_case_at_a_time_the_skipped_ones_too(monkeypatch):
    """A part builds every case of the row and checks its share: each case, checked or not, is dropped before
    the generator builds the next one."""
    import gc
    import weakref

    from exactfuse.registry import Case

    op, refs, alive = OPS["silu_and_mul"], [], []

    def cases(device, dtype, *, quick=False, seed=0):
        for i in range(5):
            gc.collect()
            alive.append(sum(r() is not None for r in refs))
            x = torch.full((4, 8), float(i), dtype=dtype, device=device)
            refs.append(weakref.ref(x))
            yield Case(f"c{i}", (x,))
            del x

    monkeypatch.setattr(op, "iter_cases", cases)
    assert verify.verify_op(op, "triton", torch.float32, torch.device("cpu"), True, 1, 2)["cases"] == 2
    assert alive == [0, 0, 0, 0, 0]
