"""scripts/gpu/gpu_suite.py's budget (on the CPU): a pass past it is interrupted, then killed, and the report is
built from what pytest_stream wrote, with the tests still running named; and the order the suite's workers
take the tests in (tests/conftest.py)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu"))

import gpu_suite


def test_a_command_past_its_budget_is_interrupted():
    t0 = time.time()
    rc, seconds, cut = gpu_suite._run_until([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), 1)
    assert cut and rc != 0 and seconds < 30 and time.time() - t0 < 30


def test_a_command_that_ignores_the_interrupt_is_killed(monkeypatch):
    monkeypatch.setattr(gpu_suite, "STOP_GRACE", 1)
    code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    rc, seconds, cut = gpu_suite._run_until([sys.executable, "-c", code], dict(os.environ), 2)
    assert cut and rc == -signal.SIGKILL and seconds < 30


def test_a_command_within_its_budget_is_not_stopped():
    rc, _, cut = gpu_suite._run_until([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), 30)
    assert (rc, cut) == (3, False)


def test_stream_results_fill_in_what_the_junit_file_lacks(tmp_path):
    stream = tmp_path / "s.stream"
    stream.write_text(
        "start tests/ops/test_a.py::test_x[bf16] @1\n"
        "passed 2.5 tests/ops/test_a.py::test_x[bf16] @3 gw0\n"
        "start tests/ops/test_a.py::test_y @3\n"
        "failed 1.0 tests/ops/test_a.py::test_y @4 gw1\n"
        "    AssertionError: a traceback line\n"
        "start tests/test_b.py::test_z @4\n"
        "failed-in-setup 0.1 tests/test_b.py::test_w @5 gw0\n"
        "start tests/test_b.py::test_long @5\n"
    )
    cases, running = gpu_suite._stream_cases(stream, known={"tests.test_b::test_z"})
    got = {c["id"]: (c["outcome"], c["seconds"]) for c in cases}
    assert got == {
        "tests.ops.test_a::test_x[bf16]": ("passed", 2.5),
        "tests.ops.test_a::test_y": ("failure", 1.0),
        "tests.test_b::test_w": ("error", 0.1),
    }
    assert running == ["tests/test_b.py::test_z", "tests/test_b.py::test_long"]
    assert (
        gpu_suite._node_id(gpu_suite._junit_id("tests/ops/test_a.py::test_x[bf16]"))
        == "tests/ops/test_a.py::test_x[bf16]"
    )
    assert gpu_suite._stream_cases(None, set()) == ([], [])


def test_the_command_dies_with_the_script(tmp_path):
    """A terminated suite (run.sh's timeout) takes its pytest session with it: nothing keeps running on the GPU."""
    marker = tmp_path / "pid"
    child = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    here = str(Path(gpu_suite.__file__).parent)
    script = (
        f"import os, sys; sys.path.insert(0, {here!r}); import gpu_suite; "
        f"gpu_suite._run_until([sys.executable, '-c', {child!r}], dict(os.environ), 60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(200):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.05)
    pid = int(marker.read_text())
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the command (pid {pid}) outlived the terminated script")


def test_the_first_round_pairs_a_long_test_with_a_short_one():
    """xdist hands each worker the next two tests of the order first: worker i takes the i-th longest and the
    (2 workers - 1 - i)-th; the rest stay slowest first; nothing changes without workers."""
    from conftest import first_pairs_balanced

    items = list("abcdefghij")  # slowest first
    assert first_pairs_balanced(items, 3) == list("afbecdghij")
    assert first_pairs_balanced(items, 5) == list("ajbichdgef")
    assert first_pairs_balanced(items, 6) == items  # fewer than two tests a worker: as xdist hands them out
    assert first_pairs_balanced(items, 0) == first_pairs_balanced(items, 1) == items
