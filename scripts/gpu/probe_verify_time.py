"""Where `exactfuse verify --quick` spends its wall time with a warm Triton cache.

Usage: PYTHONPATH=src python3 scripts/gpu/probe_verify_time.py [--full]

First one `verify --quick` (warms the Triton cache; its wall time is the cold one when the cache was
empty), then the same command with `--jobs` 1, 4 and 8, each in a fresh process, wall time and the
slowest rows; then `import exactfuse` alone and `exactfuse --help` in fresh processes; last a cProfile
of one in-process `verify --quick --jobs 1` (cumulative time, top entries), and where `import exactfuse`
spends its time (`python -X importtime`, the modules above 150 ms). `--full` times the full case sets
too (`--jobs 4`, twice: the second on the cache the first left); `--imports` runs only the import part.
Result: benchmarks/results/h200/sweeps/verify_time.txt.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import subprocess
import sys
import time

from sweep_io import emit

ROW = re.compile(r"checked (\S+): .*, ([0-9.]+)s$")


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def verify(*extra: str) -> tuple[float, str]:
    return timed([sys.executable, "-m", "exactfuse", "verify", *extra])


def slowest(stdout: str, n: int = 5) -> str:
    rows = sorted(((float(m.group(2)), m.group(1)) for m in map(ROW.search, stdout.splitlines()) if m), reverse=True)
    return ", ".join(f"{name} {s:.1f}s" for s, name in rows[:n]) + f"; rows sum {sum(s for s, _ in rows):.1f}s"


IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_breakdown(threshold_us: int = 150_000) -> list[str]:
    """``import exactfuse`` in a fresh process under ``-X importtime``: the modules whose import (their
    own and what they pulled in first) took more than ``threshold_us``, nested as Python reports them."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import exactfuse"], capture_output=True, text=True
    )
    rows = []
    for m in map(IMPORT_LINE.match, done.stderr.splitlines()):
        if m and int(m.group(2)) >= threshold_us:
            rows.append(
                f"{int(m.group(2)) / 1e6:7.2f} s  {int(m.group(1)) / 1e6:6.2f} s self  {m.group(3)}{m.group(4)}"
            )
    return ["", "import exactfuse, -X importtime (cumulative, self, module; children listed before parents):", *rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true", help="also the full case sets (--jobs 4), twice")
    parser.add_argument("--imports", action="store_true", help="only the import times")
    args = parser.parse_args()
    lines = ["what | wall s | slowest rows"]
    if args.imports:
        for what, cmd in (
            ("import torch", "import torch"),
            ("import triton", "import triton"),
            ("import exactfuse", "import exactfuse"),
        ):
            wall, _ = timed([sys.executable, "-c", cmd])
            lines.append(f"{what} | {wall:.2f} |")
        emit("verify_time_imports.txt", lines + import_breakdown())
        return
    wall, out = verify("--quick")
    lines.append(f"verify --quick (first: warms the cache) | {wall:.1f} | {slowest(out)}")
    print(lines[-1], flush=True)
    for jobs in (1, 4, 8):
        wall, out = verify("--quick", "--jobs", str(jobs))
        lines.append(f"verify --quick --jobs {jobs} | {wall:.1f} | {slowest(out)}")
        print(lines[-1], flush=True)
    if args.full:  # twice: the first run compiles what the quick sets did not
        for label in ("first", "warm"):
            wall, out = verify("--jobs", "4")
            lines.append(f"verify --jobs 4 (full, {label}) | {wall:.1f} | {slowest(out)}")
            print(lines[-1], flush=True)
    for what, cmd in (
        ("import exactfuse", ["-c", "import exactfuse"]),
        ("exactfuse --help (console entry)", ["-c", "import exactfuse_cli; exactfuse_cli.main(['--help'])"]),
    ):
        wall, _ = timed([sys.executable, *cmd])
        lines.append(f"{what} | {wall:.2f} |")
    from exactfuse_cli import build_parser, commands

    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(commands.run, build_parser().parse_args(["verify", "--quick", "--jobs", "1"]))
    lines.append(f"verify --quick --jobs 1 in this process, profiled | {time.perf_counter() - start:.1f} |")
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
    lines += ["", "cProfile, cumulative:", *[line for line in text.getvalue().splitlines() if line.strip()][:60]]
    lines += import_breakdown()
    emit("verify_time.txt", lines)


if __name__ == "__main__":
    main()
