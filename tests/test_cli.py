"""The CLI's and warmup's answers to mistakes: an unknown op, a selection that checks nothing, a bad priority
variable, a warmup with nothing to compile for."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from exactfuse_cli import main


@pytest.mark.parametrize("command", ["verify", "list"])
def test_unknown_op_is_a_one_line_error(command, capsys):
    assert main([command, "--op", "nosuch"]) == 2
    out = capsys.readouterr().out
    assert "unknown op 'nosuch'; known ops:" in out and "silu_and_mul" in out and "Traceback" not in out


def test_verify_that_checks_nothing_fails(capsys):
    assert main(["verify", "--op", "w4a16_gemm", "--dtype", "fp32"]) == 2
    out = capsys.readouterr().out
    assert "nothing was checked: w4a16_gemm takes no fp32" in out and "all contracts hold" not in out


@pytest.mark.interpreter
def test_verify_bf16_on_the_interpreter_checks_nothing(capsys):
    assert main(["verify", "--op", "silu_and_mul", "--dtype", "bf16"]) == 2
    assert "the Triton interpreter has no bf16 arithmetic" in capsys.readouterr().out


def test_priority_naming_an_unknown_op_fails_at_import():
    env = dict(os.environ, EXACTFUSE_PRIORITY="nosuch_op=native")
    proc = subprocess.run([sys.executable, "-c", "import exactfuse"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "EXACTFUSE_PRIORITY names unknown ops ['nosuch_op']" in proc.stderr


@pytest.mark.parametrize(
    ("priority", "message"),
    [("nosuch_op=native", "names unknown ops ['nosuch_op']"), ("silu_and_mul=cuda", "silu_and_mul has no providers"),
     ("silu_and_mul", "expected 'op=provider")],
)  # fmt: skip
def test_a_bad_priority_is_a_usage_error_of_the_cli(priority, message):
    env = dict(os.environ, EXACTFUSE_PRIORITY=priority)
    proc = subprocess.run([sys.executable, "-m", "exactfuse_cli", "list"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_warmup_without_a_device_to_compile_for_says_so(monkeypatch):
    import torch

    import exactfuse
    from exactfuse.registry import platform

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA GPU is available here"):
        exactfuse.warmup(["silu_and_mul"])
    monkeypatch.setattr(platform, "interpreter_enabled", lambda: False)
    with pytest.raises(RuntimeError, match="runs Triton only under the interpreter"):
        exactfuse.warmup(["silu_and_mul"], device="cpu")


def _cells(out: str, first: str) -> list[str]:
    """The cells of the table row that starts with ``first``, continuation lines joined into them."""
    lines = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    start = next(i for i, cells in enumerate(lines) if cells[0].strip() == first)
    rows = [lines[start], *itertools.takewhile(lambda cells: not cells[0].strip(), lines[start + 1 :])]
    return [" ".join(" ".join(cell.strip() for cell in column).split()) for column in zip(*rows, strict=True)]


@pytest.mark.interpreter
def test_list_and_verify_show_the_contract_checked_here_with_its_numbers(capsys):
    assert main(["list", "--op", "silu_and_mul"]) == 0
    out = capsys.readouterr().out
    assert "contract on the CPU (interpreter)" in " ".join(out.split()) and "Bitwise" not in out
    assert _cells(out, "silu_and_mul")[3] == (
        "fp16: Tolerance(atol=0.001, rtol=0.001) bf16: Tolerance(atol=0.001, rtol=0.016) "
        "fp32: Tolerance(atol=1e-05, rtol=1.3e-06)"
    )
    assert main(["verify", "--op", "silu_and_mul", "--dtype", "fp16", "--quick"]) == 0
    cells = _cells(capsys.readouterr().out, "silu_and_mul")
    assert cells[3] == "Tolerance(atol=0.001, rtol=0.001)" and cells[7] == "-", cells  # no ulp count: a tolerance


@pytest.mark.interpreter
def test_verify_says_why_a_listed_provider_is_not_checked(capsys):
    """The packed kernel's provider is listed, but runs Gluon, which the interpreter does not: verify and
    list say so, and nothing is checked."""
    assert main(["verify", "--op", "w4a16_gemm_packed", "--dtype", "fp16"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "nothing was checked: the gluon provider of w4a16_gemm_packed is unavailable here: it runs Gluon" in out
    assert "Triton interpreter" in out and "no provider besides native" not in out
    assert main(["list", "--op", "w4a16_gemm_packed"]) == 0
    assert _cells(capsys.readouterr().out, "w4a16_gemm_packed")[1] == "native, gluon (unavailable here)"


@pytest.mark.interpreter
def test_info_of_an_op_shows_its_signature_contract_providers_and_choice(capsys):
    assert main(["info", "silu_and_mul"]) == 0
    out = capsys.readouterr().out
    assert _cells(out, "signature")[1] == "silu_and_mul(x: Tensor) -> Tensor"
    assert _cells(out, "contract bf16")[1] == "CUDA: Bitwise; CPU (interpreter): Tolerance(atol=0.001, rtol=0.016)"
    assert _cells(out, "backward")[1] == "wrt x: the backward op silu_and_mul_backward"
    assert _cells(out, "providers")[1] == "native, triton"
    assert _cells(out, "provider native")[1].startswith("chosen: the first in the order for cpu tensors")
    assert _cells(out, "provider triton")[1] == "not tried: the order for cpu tensors (the default) is native"
    assert _cells(out, "chosen here")[1].startswith("native (for case ")


@pytest.mark.interpreter
def test_info_gives_each_providers_reason(capsys, monkeypatch):
    from exactfuse.registry import OPS

    assert main(["info", "w4a16_gemm_packed"]) == 0
    out = capsys.readouterr().out
    assert _cells(out, "provider gluon")[1].startswith("unavailable here: it runs Gluon kernels on sm_90 GPUs")
    assert _cells(out, "contract fp16")[1] == "Float64Relative(2x)"
    op = OPS["silu_and_mul"]
    monkeypatch.setattr(op.providers["triton"], "supports_args", lambda x: "x is too wide for the kernel")
    with op.priority(["triton", "native"]):
        assert main(["info", "silu_and_mul"]) == 0
    out = capsys.readouterr().out
    assert _cells(out, "provider triton")[1] == "declines the case: x is too wide for the kernel"
    assert _cells(out, "provider native")[1].startswith("chosen")


def test_info_of_an_unknown_op_lists_the_known_ones(capsys):
    assert main(["info", "nosuch"]) == 2
    out = capsys.readouterr().out
    assert "unknown op 'nosuch'; known ops:" in out and "silu_and_mul" in out and "Traceback" not in out


def test_help_and_usage_errors_import_no_torch():
    """The parser is built before torch is imported: help and usage errors cost an argparse run."""
    code = (
        "import sys, exactfuse_cli\n"
        "for argv in (['--help'], ['bench', '--help'], ['verify', '--dtype', 'int8']):\n"
        "    try:\n"
        "        exactfuse_cli.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'exactfuse', 'triton')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_verify_runs_quick_case_sets_in_one_process_once_each_row_ran_here(monkeypatch, tmp_path):
    """Workers pay their own torch import and CUDA context: the quick sets run in one process only when
    every row asked for was checked on this machine's Triton cache before (its kernels are there); a
    cache holding other kernels (the GPU tests') is not enough. The full sets always start workers."""
    from triton import knobs

    from exactfuse_cli import verify

    monkeypatch.setattr(verify.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(verify.torch.cuda, "get_device_name", lambda *a: "Some GPU")
    monkeypatch.setattr(verify.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    rows = [("silu_and_mul", "triton", "bf16"), ("w4a16_gemm", "triton", "bf16")]
    rows = rows * 10  # more rows than cores: the cores less two
    assert verify.default_jobs(True, rows) == 14 and verify.default_jobs(False, rows) == 14
    assert verify.default_jobs(False, rows[:3]) == 4  # at most one a part: w4a16_gemm's two kernels, two parts
    (tmp_path / "cache" / "SOMEKERNEL").mkdir(parents=True)
    assert verify.default_jobs(True, rows) == 14  # other kernels only
    verify._mark_compiled(rows[0])
    assert verify.default_jobs(True, rows[:1]) == 1 and verify.default_jobs(True, rows) == 14
    verify._mark_compiled(rows[1])
    assert verify.default_jobs(True, rows) == 1 and verify.default_jobs(False, rows) == 14
    monkeypatch.setattr(verify.torch.cuda, "get_device_name", lambda *a: "Another GPU")
    assert verify.default_jobs(True, rows) == 14  # the markers name the GPU they were made on
    monkeypatch.setattr(verify.os, "cpu_count", lambda: 4)
    assert verify.default_jobs(False, rows) == 1


def test_a_quick_gpu_verify_marks_each_row_it_checked(monkeypatch, tmp_path, capsys):
    """The rows a quick run on a GPU finished are marked for the next run's ``--jobs`` default; a full
    run's are not (its case sets compile other kernels)."""
    import torch
    from triton import knobs

    from exactfuse_cli import verify

    def fake_rows(tasks, quick, jobs):
        for task in tasks:
            yield (
                task,
                {"cases": 1, "declined": 0, "failed": 0, "max_abs_err": 0.0, "max_ulp": 0, "first_failure": ""},
                0.1,
            )

    monkeypatch.setattr(verify, "device_here", lambda: torch.device("cuda"))
    monkeypatch.setattr(verify, "_verify_rows", fake_rows)
    monkeypatch.setattr(verify, "_proof_table", lambda *a: None)  # the fast-math proofs need the real GPU
    monkeypatch.setattr(verify.torch.cuda, "get_device_name", lambda *a: "Some GPU")
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    rows = [("silu_and_mul", "triton", "fp16"), ("silu_and_mul", "triton", "bf16")]
    assert main(["verify", "--op", "silu_and_mul", "--dtype", "fp16", "--dtype", "bf16", "--jobs", "1"]) == 0
    assert not any(os.path.exists(verify._compiled_marker(row)) for row in rows)
    assert main(["verify", "--op", "silu_and_mul", "--dtype", "fp16", "--dtype", "bf16", "--quick", "--jobs", "1"]) == 0
    assert all(os.path.exists(verify._compiled_marker(row)) for row in rows)
    capsys.readouterr()


def test_every_option_has_help_and_the_parser_knows_the_library_names():
    import exactfuse_cli
    from exactfuse.bench import runner
    from exactfuse.registry import OPS
    from exactfuse.utils import DTYPES_BY_NAME

    assert tuple(sorted(DTYPES_BY_NAME)) == exactfuse_cli.DTYPE_CHOICES
    assert {g for op in OPS.values() for g in op.grids} <= set(exactfuse_cli.BENCH_GRIDS)
    parser = exactfuse_cli.build_parser()
    bench_help = parser.format_help() + " ".join(
        a.help for sub in parser._actions if sub.dest == "command" for a in sub.choices["bench"]._actions
    )
    assert f"{runner.NATIVE}, {runner.COMPILED}" in bench_help and f"skip {runner.COMPILED}" in bench_help
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    for name, sub in commands.choices.items():
        for action in sub._actions:
            assert action.help, f"exactfuse {name} {action.option_strings} has no help text"


@pytest.mark.interpreter
def test_verify_prints_each_row_as_it_finishes(capsys):
    assert main(["verify", "--op", "silu_and_mul", "--dtype", "fp16", "--dtype", "fp32", "--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = next(i for i, line in enumerate(lines) if line.lstrip().startswith("┏"))
    progress = [i for i, line in enumerate(lines) if line.startswith("  checked silu_and_mul/triton/")]
    assert len(progress) == 2 and max(progress) < table
    per_op = [line for line in lines if line.startswith("time per op")]
    assert len(per_op) == 1 and "silu_and_mul " in per_op[0], per_op


def test_the_command_turns_the_interpreter_on_in_its_own_process():
    """Without a GPU the command sets TRITON_INTERPRET before exactfuse defines kernels (no second process)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import os, torch, exactfuse_cli\n"
        "if torch.cuda.is_available(): raise SystemExit(0)\n"
        "os.execve = lambda *a: (_ for _ in ()).throw(AssertionError('ran a second process'))\n"
        "raise SystemExit(exactfuse_cli.main(['list', '--op', 'silu_and_mul']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _verify_table(*extra: str) -> list[list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "exactfuse_cli", "verify", "--op", "silu_and_mul", "--op", "gelu_and_mul", *extra],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = proc.stdout.split("fast-math proofs")[0]  # the contract table, not the proofs below it
    rows = [[c.strip() for c in line.split("│") if c.strip()] for line in checks.splitlines() if "│" in line]
    return [[*row[:-1], row[-1].split()[0]] for row in rows]  # the result cell without its seconds


@pytest.mark.interpreter
def test_verify_in_worker_processes_checks_the_same_rows():
    one, two = _verify_table("--jobs", "1"), _verify_table("--jobs", "2")
    assert len(one) == 4 and one == two  # 2 ops x fp16, fp32, in declaration order either way


def test_jobs_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--jobs", "0"])
    assert "takes an integer >= 1, got '0'" in capsys.readouterr().err


def test_verify_starts_the_rows_of_the_providers_with_most_kernels_first():
    """On an empty cache a row's time is compiling: rows of providers that declare more kernels go first,
    the rest in their order."""
    from exactfuse_cli import verify

    rows = [("silu_and_mul", "triton", "bf16"), ("short_conv", "triton", "bf16"), ("silu_mul", "triton", "fp16"),
            ("causal_conv1d_fn_backward", "triton", "fp32")]  # fmt: skip
    assert verify.compile_heavy_first(rows) == [rows[1], rows[3], rows[0], rows[2]]
