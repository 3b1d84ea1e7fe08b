"""The whole GPU suite in one command: every ``@pytest.mark.gpu`` test, then a report of its counts.

Usage: python3 scripts/gpu/gpu_suite.py [--workers N] [--only PASS] [--out FILE] [--timeout S] [--budget S]
           [PYTEST_ARGS...]

Two passes over ``pytest -m gpu``:

1. every test not marked ``big_memory``, in ``--workers`` pytest-xdist workers (default: the cores less
   two, at most 12, and no more than give each worker ``WORKER_GIB`` of the card), each held to its share
   of the card's memory (``tests/conftest.py``), so that the workers cannot take the card's memory from
   each other;
2. the ``big_memory`` tests in as many workers as each get ``BIG_GIB`` of the card (two on an H100), each
   held to its share of ``BIG_SHARE`` of the card; with them the ``aoti_load`` tests, where this torch can
   load an AOTInductor package at all: ``scripts/gpu/probe_aoti_load.py plain`` (a package without
   exactfuse, in its own process, built beside the first pass) decides, and where it cannot the report
   names the tests not run and the probe's outcome (a torch that crashes loading any package would crash
   the worker).

``--only shared`` or ``--only big_memory`` runs one pass (a targeted run; the whole suite is both).

``--budget S`` (default: ``EXACTFUSE_STEP_SECONDS``, which ``scripts/gpu/run.sh`` sets to what its step has
left, less a margin) stops the suite itself after S seconds: the running pass is interrupted, a pass not yet
begun is not started, and the report is written all the same, from pytest's junit file or, where an
interrupted pytest left none, from ``pytest_stream``'s file (``EXACTFUSE_STREAM``). It says that the run was
stopped and names the tests that were still running; a stopped run is not a pass.

The report (``--out``, default ``benchmarks/results/<gpu>/gpu_suite.txt``) holds the commit, the GPU, torch
and Triton, the pass/fail/skip counts of each pass, every failure and error, the slowest tests and the
largest peak allocations (the ``peak_gib`` property). Exit status 0 only when no test failed, erred or was
skipped: a skipped GPU test is not a pass. A kernel change is done when this passes at its final commit
(docs/measuring.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gpu() -> tuple[str, str, str, str]:
    import torch
    import triton

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    return name, torch.__version__, triton.__version__, os.environ.get("EXACTFUSE_GIT_REV") or _git_rev()


def _git_rev() -> str:
    done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


# The share of the card each worker of the shared pass needs: the largest peak of a test outside big_memory
# is 3.9 GiB (sparse_paged_attention's contract matrix, benchmarks/results/h100/gpu_suite.txt at 4807fcb), the
# compile tests of causal_conv1d at T = 16384 and C = 10240 (5.3-5.7 GiB) being big_memory; 5 GiB keeps a margin
# and gives 12 workers on an H100 as on an H200. The pass ends near its test seconds over the workers, most of them
# compiling on the cores: at 7 GiB (9 workers on an H100) 3,683 s of tests took 477 s
WORKER_GIB = 5
SHARED_SHARE = 0.85  # the part of the card the shared pass's workers share (tests/conftest.py's default)
# The big_memory pass: the largest peak of its tests is 31 GiB (a compile test of gelu_and_mul_sparse at
# d = 32768, gpu_suite.txt), so each worker gets at least 34 GiB; BIG_SHARE of the card is the workers' together
BIG_GIB = 34
BIG_SHARE = 0.92
SECONDS_FILE = "gpu_suite_seconds.txt"


def _default_workers() -> int:
    """The cores less two, at most 12, and at most as many as give each worker ``WORKER_GIB`` of the card
    (``tests/conftest.py`` holds each to ``SHARED_SHARE / workers``)."""
    import torch

    cores = max(1, min(12, (os.cpu_count() or 4) - 2))
    if not torch.cuda.is_available():
        return cores
    card_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    return max(1, min(cores, int(SHARED_SHARE * card_gib / WORKER_GIB)))


def _big_memory_workers() -> int:
    """As many workers as each get ``BIG_GIB`` of ``BIG_SHARE`` of the card, at least one."""
    import torch

    if not torch.cuda.is_available():
        return 1
    card_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    return max(1, int(BIG_SHARE * card_gib / BIG_GIB))


def _write_seconds(path: Path, earlier: str, cases: list[dict]) -> None:
    """Each test's seconds (``SECONDS NODEID`` lines, slowest first): this run's, and the earlier file's for
    tests this run did not take. Committed beside the report, it orders the next run (``slowest_first``)."""
    seconds = {}
    if os.path.exists(earlier):
        for line in Path(earlier).read_text().splitlines():
            value, _, node = line.strip().partition(" ")
            seconds[node.strip()] = float(value)
    for c in cases:
        seconds[_node_id(c["id"])] = c["seconds"]
    path.write_text("".join(f"{v:.1f} {k}\n" for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])))


def _node_id(junit_id: str) -> str:
    """pytest's node id from the junit report's ``classname::name`` (``tests.ops.test_x`` ->
    ``tests/ops/test_x.py``)."""
    module, _, name = junit_id.partition("::")
    return f"{module.replace('.', '/')}.py::{name}"


def _results_dir(gpu: str) -> Path:
    tag = "h200" if "H200" in gpu else "h100" if "H100" in gpu else gpu.lower().replace(" ", "_")
    return ROOT / "benchmarks" / "results" / tag


# seconds an interrupted pytest gets to write its junit file before it is killed
STOP_GRACE = 20


def _run_pass(
    label: str, marks: str, workers: int, share: float, timeout: int, extra: list[str], xml: Path, left: float
) -> tuple[int, float, bool]:
    """One pass of pytest, stopped once ``left`` seconds are spent (:func:`_run_until`)."""
    cmd = [sys.executable, "-m", "pytest", "-m", marks, "-q", "-rfEs", "-p", "no:cacheprovider",
           "-o", "junit_family=xunit1", f"--junitxml={xml}", f"--timeout={timeout}", *extra]  # fmt: skip
    if workers > 1:
        # one test at a time a worker: xdist's load scheduler otherwise hands each worker a chunk of a quarter
        # of its share up front, consecutive in the slowest-first order, so the first worker took the 15
        # longest tests (473 s for 2,271 s of test time at 9 workers, gpu_suite.txt)
        cmd += ["-n", str(workers), *(["--maxschedchunk", "1"] if _xdist_has_maxschedchunk() else [])]
    print(f"== {label}: {' '.join(cmd[2:])}", flush=True)
    rc, seconds, cut = _run_until(cmd, _pass_env(share, workers), left)
    if cut:
        print(f"== {label}: stopped after {seconds:.0f} s, the suite's budget spent", flush=True)
    return rc, seconds, cut


def _run_until(cmd: list[str], env: dict, left: float) -> tuple[int, float, bool]:
    """``cmd`` in a session of its own (an interrupt reaches its children, the xdist workers, and nothing
    above this script), interrupted once ``left`` seconds are spent and killed ``STOP_GRACE`` s later, or at
    once when this script is terminated: (its exit status, its seconds, whether it was stopped)."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)

    def killed_with_this_script(signum, frame):
        # its own session is out of reach of a signal to this script's process group (run.sh's timeout)
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(128 + signum)

    earlier = signal.signal(signal.SIGTERM, killed_with_this_script)
    try:
        return proc.wait(timeout=max(left, 1.0)), time.time() - t0, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return proc.returncode, time.time() - t0, True
    finally:
        signal.signal(signal.SIGTERM, earlier)


def _pass_env(share: float, workers: int) -> dict:
    """A pass's environment: each worker held to ``share / workers`` of the card (``tests/conftest.py``), and
    to its part of the cores: ``OMP_NUM_THREADS`` the cores over the workers (torch's host ops), Inductor
    compiling in the worker's own process (``TORCHINDUCTOR_COMPILE_THREADS=1``), not in a pool of a process a
    core started by every worker. Values already set in the environment are kept."""
    threads = max(1, (os.cpu_count() or 1) // max(workers, 1))
    env = {"OMP_NUM_THREADS": str(threads), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    return {**env, **os.environ, "EXACTFUSE_GPU_SHARE": str(share)}


def _xdist_has_maxschedchunk() -> bool:
    """Whether the installed pytest-xdist takes ``--maxschedchunk`` (3.2 and later); an older one hands out
    chunks, and the pass says so."""
    from importlib.metadata import version

    major, minor = (int(part) for part in version("pytest-xdist").split(".")[:2])
    if (major, minor) >= (3, 2):
        return True
    print(f"gpu_suite: pytest-xdist {major}.{minor} has no --maxschedchunk: tests go out in chunks", flush=True)
    return False


def _start_aoti_probe() -> subprocess.Popen:
    """``scripts/gpu/probe_aoti_load.py plain``: export, package, load and call an MLP without exactfuse, in
    its own processes (a crash is reported, not fatal), while the first pass runs."""
    script = ROOT / "scripts" / "gpu" / "probe_aoti_load.py"
    return subprocess.Popen([sys.executable, str(script), "plain"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _aoti_probe_loads(probe: subprocess.Popen | None, deadline: float) -> tuple[bool, str]:
    """Whether the probe's package loaded and ran, and its outcome lines; a probe still running at
    ``deadline`` (or 600 s on) is stopped and counts as not loading."""
    if probe is None:
        return False, "not probed"
    try:
        stdout, stderr = probe.communicate(timeout=max(1.0, min(600.0, deadline - time.time())))
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.communicate()
        return False, "not finished in the suite's budget"
    summary = [ln for ln in stdout.splitlines() if ln.startswith(("OK", "CRASH", "FAIL", "TIMEOUT"))]
    loads = probe.returncode == 0 and bool(summary) and summary[-1].startswith("OK")
    return loads, (" / ".join(summary) or stderr[-400:])[:300]


def _stream_cases(stream: Path | None, known: set[str]) -> tuple[list[dict], list[str]]:
    """The results ``pytest_stream`` wrote (``outcome seconds node-id @wall worker`` lines) for tests not in
    ``known`` (junit ids), as :func:`_cases` gives them, and the node ids of the tests started without a
    result (still running when the pass was stopped)."""
    if stream is None or not stream.exists():
        return [], []
    outcomes = {"passed": "passed", "failed": "failure", "skipped": "skipped"}
    cases, running = {}, {}
    for line in stream.read_text().splitlines():
        parts = line.split()
        if len(parts) < 2 or line.startswith(" "):
            continue
        if parts[0] == "start":
            running[parts[1]] = True
            continue
        if len(parts) < 3:
            continue
        outcome, seconds, node = parts[0], parts[1], parts[2]
        running.pop(node, None)
        junit_id = _junit_id(node)
        if junit_id not in known:
            kind = outcomes.get(outcome, "error")  # "failed-in-setup" and the like: an error, as junit counts it
            cases[junit_id] = {"id": junit_id, "outcome": kind, "message": "", "seconds": float(seconds),
                               "peak_gib": 0.0}  # fmt: skip
    return list(cases.values()), list(running)


def _junit_id(node: str) -> str:
    """The junit report's ``classname::name`` of pytest's node id (the inverse of :func:`_node_id`)."""
    path, _, name = node.partition("::")
    return f"{path.removesuffix('.py').replace('/', '.')}::{name}"


def _cases(xml: Path) -> list[dict]:
    if not xml.exists():
        return []
    cases = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            if (node := case.find(tag)) is not None:
                outcome, message = tag, (node.get("message") or "").splitlines()[0][:200] if node.get("message") else ""
                break
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases.append({
            "id": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome, "message": message,
            "seconds": float(case.get("time") or 0.0), "peak_gib": float(props.get("peak_gib") or 0.0),
        })  # fmt: skip
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="the shared pass's xdist workers")
    parser.add_argument("--only", choices=("shared", "big_memory"), help="run one pass only")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--timeout", type=int, default=300, help="seconds a test may run (pytest-timeout)")
    parser.add_argument(
        "--budget",
        type=float,
        default=float(os.environ.get("EXACTFUSE_STEP_SECONDS") or 0),
        help="seconds the whole suite may take (0: no limit); the report is written either way",
    )
    args, extra = parser.parse_known_args()
    deadline = time.time() + args.budget if args.budget > 0 else float("inf")
    stream = Path(os.environ["EXACTFUSE_STREAM"]) if os.environ.get("EXACTFUSE_STREAM") else None
    gpu, torch_version, triton_version, rev = _gpu()
    args.workers = args.workers or _default_workers()
    out = args.out or _results_dir(gpu) / "gpu_suite.txt"
    # the slowest tests first (tests/conftest.py), by the times of this GPU's last committed run
    os.environ["EXACTFUSE_TEST_SECONDS"] = str(_results_dir(gpu) / SECONDS_FILE)
    passes, lines, notes, stopped = [], [], [], False
    probe = _start_aoti_probe() if args.only != "shared" else None
    with tempfile.TemporaryDirectory() as tmp:
        big = _big_memory_workers()
        for name, label, marks, workers, share in (
            ("shared", f"shared pass ({args.workers} workers)", "gpu and not big_memory and not aoti_load",
             args.workers, SHARED_SHARE),
            ("big_memory", f"big_memory pass ({big} workers)", "gpu and big_memory", big, BIG_SHARE),
        ):  # fmt: skip
            if args.only not in (None, name):
                continue
            if time.time() >= deadline:
                notes.append(f"not run: the {name} pass (the suite's budget of {args.budget:.0f} s was spent)")
                stopped = True
                continue
            if name == "big_memory":
                loads, why = _aoti_probe_loads(probe, deadline)
                marks = "gpu and (big_memory or aoti_load)" if loads else marks
                if not loads:
                    notes += [f"not run here: the aoti_load tests; this torch cannot load an AOTInductor package "
                              f"without exactfuse either (scripts/gpu/probe_aoti_load.py plain: {why})"]  # fmt: skip
            xml = Path(tmp) / f"{len(passes)}.xml"
            rc, seconds, cut = _run_pass(label, marks, workers, share, args.timeout, extra, xml, deadline - time.time())
            cases = _cases(xml)
            if cut:
                stopped = True
                earlier = {c["id"] for *_, done in passes for c in done} | {c["id"] for c in cases}
                more, running = _stream_cases(stream, earlier)
                cases += more
                notes.append(f"stopped: the {name} pass after {seconds:.0f} s (the suite's budget of "
                             f"{args.budget:.0f} s); still running then: {', '.join(running) or 'none'}")  # fmt: skip
            passes.append((label, rc, seconds, cases))
    everything = [c for *_, cases in passes for c in cases]
    bad = [c for c in everything if c["outcome"] != "passed"]
    total_s = sum(s for _, _, s, _ in passes)
    lines += [
        "# The whole GPU suite (python3 scripts/gpu/gpu_suite.py)",
        f"commit {rev}; {gpu}; torch {torch_version}; Triton {triton_version}",
        f"selection: {' '.join(extra + ([f'--only {args.only}'] if args.only else [])) or 'the whole suite'}",
        f"total: {len(everything)} tests, {sum(c['outcome'] == 'passed' for c in everything)} passed, "
        f"{sum(c['outcome'] == 'failure' for c in everything)} failed, "
        f"{sum(c['outcome'] == 'error' for c in everything)} errors, "
        f"{sum(c['outcome'] == 'skipped' for c in everything)} skipped, in {total_s:.0f} s",
    ]
    for label, rc, seconds, cases in passes:
        counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failure", "error", "skipped")}
        lines.append(f"{label}: pytest rc {rc}, {seconds:.0f} s, " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    lines += notes
    if bad:
        lines += ["", "## Not passed"] + [f"{c['outcome']}: {c['id']}: {c['message']}" for c in bad]
    lines += ["", "## Slowest (s)"]
    lines += [f"{c['seconds']:7.1f}  {c['id']}" for c in sorted(everything, key=lambda c: -c["seconds"])[:15]]
    lines += ["", "## Largest peak allocations (GiB)"]
    lines += [f"{c['peak_gib']:7.2f}  {c['id']}" for c in sorted(everything, key=lambda c: -c["peak_gib"])[:15]]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    _write_seconds(out.parent / SECONDS_FILE, os.environ["EXACTFUSE_TEST_SECONDS"], everything)
    print(text)
    ok = everything and not bad and not stopped and all(rc == 0 for _, rc, _, cases in passes if cases)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
