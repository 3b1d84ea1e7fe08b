"""The main job's time as a new user meets it (docs/measuring.md, "verify's time"): on empty Triton and Inductor
cache directories, ``exactfuse verify --quick`` (cold), the same again (warm), then ``exactfuse bench --quick``
as the README's quickstart runs it (no plot), each a process of its own, wall seconds from its start to its exit.
Writes main_job_times.txt (the commands, their seconds, each one's last lines), each run's whole log and the
bench's rows (bench_quick/) into the output folder.

    python3 scripts/gpu/probe_main_job.py [--skip-bench | --skip-verify] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import emit, out_dir

RUNS = (
    ("verify --quick (cold)", ["verify", "--quick"]),
    ("verify --quick (warm)", ["verify", "--quick"]),
    ("bench --quick", ["bench", "--quick"]),
)


def run(label: str, args: list[str], env: dict, log_name: str) -> tuple[float, int, list[str]]:
    """``python3 -m exactfuse ARGS`` in ``env``: (wall seconds, exit status, its last lines); the whole output
    into the output folder's ``log_name`` when one is set."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "exactfuse", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    if out := out_dir():
        with open(os.path.join(out, log_name), "w") as f:
            f.write(text)
    print(f"{label}: {seconds:.1f} s, rc {proc.returncode}", flush=True)
    return seconds, proc.returncode, text.strip().splitlines()[-4:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-bench", action="store_true", help="only the two verify runs")
    parser.add_argument("--skip-verify", action="store_true", help="only the bench run (cold)")
    parser.add_argument("--cache", help="the cache root (default: a new temporary directory; it must be empty)")
    args = parser.parse_args()
    root = args.cache or tempfile.mkdtemp(prefix="exactfuse-main-job-")
    if os.listdir(root):
        raise SystemExit(f"--cache {root} is not empty: the cold run needs empty caches")
    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(root, "triton"))
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
    rev = os.environ.get("EXACTFUSE_GIT_REV", "unknown")
    lines = [
        f"# exactfuse's main job at {rev}, each command a process, on empty cache directories at the start:",
        f"#   TRITON_CACHE_DIR={root}/triton TORCHINDUCTOR_CACHE_DIR={root}/inductor python3 -m exactfuse ...",
    ]
    import torch

    lines.append(f"# {torch.cuda.get_device_name()}, {os.cpu_count()} cores; torch {torch.__version__}")
    runs = RUNS[:2] if args.skip_bench else RUNS[2:] if args.skip_verify else RUNS
    if out := out_dir():  # the bench's rows come back with the results, the tree's committed ones untouched
        runs = [(label, [*cmd, "--out", os.path.join(out, "bench_quick")] if cmd[0] == "bench" else cmd)
                for label, cmd in runs]  # fmt: skip
    for i, (label, cmd) in enumerate(runs):
        seconds, rc, tail = run(label, cmd, env, f"main_job_{i}.log")
        lines.append(f"{label}: {seconds:.1f} s wall, rc {rc}; its last lines:")
        lines += [f"    {line}" for line in tail]
    emit("main_job_times.txt", lines)


if __name__ == "__main__":
    main()
