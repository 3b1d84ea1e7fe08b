"""The ``exactfuse`` command: its arguments, parsed before torch is imported.

``exactfuse --help``, a usage error or a subcommand's ``--help`` cost an argparse run (torch alone takes
over a second to import). A command that runs then imports torch; without a CUDA GPU it turns the Triton
interpreter on (``TRITON_INTERPRET=1``) before any exactfuse kernel is defined, since Triton reads that
variable when a kernel is decorated, and hands over to ``exactfuse_cli.commands``. The commands live in
this package's modules (``commands``, ``verify``, ``bench``), which import torch and exactfuse; this module
imports neither, and the package lives outside ``exactfuse`` because importing any part of that package
declares every op.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

STARTED = time.perf_counter()  # the process's start, near enough: before torch and exactfuse are imported

# The names exactfuse.utils.DTYPES_BY_NAME and the bench grids use (tests/test_cli.py keeps them equal);
# written out here so that parsing imports no torch. The bench's baseline providers (bench.runner.NATIVE,
# COMPILED) are named in the help texts below.
DTYPE_CHOICES = ("bf16", "fp16", "fp32")
BENCH_GRIDS = ("default", "quick")

DESCRIPTION = "Fused Triton kernels for LLM inference: check their contracts, time them, compile them ahead."


def shard(text: str) -> tuple[int, int]:
    """``--shard I/N``."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes I/N with integers, got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
    return i, n


def positive_int(text: str) -> int:
    """An option that takes an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes an integer >= 1, got {text!r}")
    return value


def case_pattern(text: str) -> str:
    """``--case REGEX``."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"--case takes a regular expression, got {text!r} ({exc})") from None
    return text


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``exactfuse bench``."""
    add = parser.add_argument
    add("--op", action="append", dest="ops", metavar="NAME", help="op to run (repeatable; default all)")
    add("--dtype", action="append", dest="dtypes", choices=DTYPE_CHOICES, help="dtype (repeatable; default bf16)")
    add("--provider", action="append", dest="providers", metavar="NAME",
        help="time only these providers (repeatable): registry names, native, native-compiled, peers")  # fmt: skip
    add("--grid", choices=BENCH_GRIDS, default="default", help="shape grid (default: default)")
    add("--quick", action="store_true", help="the quick grid: a few shapes of every op")
    add("--out", metavar="DIR", help="write <op>.csv and <op>.json here (default benchmarks/results/<gpu>/)")
    add("--plot", metavar="FILE.png",
        help="draw speedup and %% of roofline per shape (matplotlib); '{op}' in the name: one file per op")  # fmt: skip
    add("--no-compile", action="store_true", help="skip native-compiled (torch.compile of the spec)")
    add("--rep-ms", type=float, help="ms of calls per CUDA graph replay (default 20; 4 with the quick grid)")
    add("--shard", type=shard, metavar="I/N",
        help="run cases I, I+N, I+2N, ... of each grid (N processes, one per GPU; "
        "scripts/merge_results.py joins them)")  # fmt: skip
    add("--case", type=case_pattern, metavar="REGEX",
        help="run only the cases whose 'dtype/case' name matches (re.search), e.g. 'd(12288|32768)$'")  # fmt: skip
    add("--resume", metavar="FILE.json",
        help="run only the cases FILE (an earlier run's results, cut by --time-budget) lists as not run; "
        "scripts/merge_results.py joins the two files")  # fmt: skip
    add("--jobs", type=positive_int, metavar="N",
        help="compile first in N worker processes, a warm-up that times nothing (default with CUDA and >= 8 "
        "cores: the cores less two, at most 16; else 1: no warm-up)")  # fmt: skip
    add("--time-budget", type=float, metavar="SECONDS",
        help="start no new case after this many seconds; the files keep the cases done and list the rest")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="exactfuse", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("info", help="versions, device, provider priorities; with an op: its signature, contract, "
                       "providers and the one chosen here, with why")  # fmt: skip
    p.add_argument("op", nargs="?", help="an op's name: its signature, contract, providers and the one chosen here")
    p = sub.add_parser("list", help="ops, their providers, the contract checked here, the provider selected here")
    p.add_argument("--op", action="append", help="op name (repeatable; default: all)")
    p = sub.add_parser("verify", help="check every provider's contract against native on every declared case")
    p.add_argument("--op", action="append", help="op name (repeatable; default: all)")
    p.add_argument("--dtype", action="append", choices=DTYPE_CHOICES, help="repeatable; default: every dtype")
    p.add_argument("--quick", action="store_true", help="the small case set (always on without a GPU)")
    p.add_argument("--jobs", type=positive_int, metavar="N",
                   help="check rows in N worker processes (default with CUDA and >= 8 cores: the cores less two, "
                   "at most 16; 1 with --quick once Triton's cache holds its kernels; else 1)")  # fmt: skip
    p = sub.add_parser("warmup", help="compile the Triton kernels ahead of use (CUDA)")
    p.add_argument("--op", action="append", help="op name (repeatable; default: all)")
    p.add_argument("--dtype", action="append", choices=DTYPE_CHOICES, help="repeatable; default: bf16")
    p = sub.add_parser("bench", help="time providers against native, torch.compile, peers and the roofline (CUDA)")
    add_bench_arguments(p)
    return parser


def _kernel_environment(argv: list[str]) -> None:
    """Turn the interpreter on where there is no CUDA GPU, before exactfuse defines its kernels; where
    they are defined already (``python -m exactfuse``), run again in a fresh process."""
    import torch

    if torch.cuda.is_available() or "TRITON_INTERPRET" in os.environ:
        return
    if "exactfuse" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
        return
    env = dict(os.environ, TRITON_INTERPRET="1")
    os.execve(sys.executable, [sys.executable, "-m", "exactfuse_cli", *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    _kernel_environment(argv)
    try:
        from exactfuse_cli import commands
    except ValueError as error:  # registry.platform.PriorityError: a usage error, not a crash
        if not str(error).startswith("EXACTFUSE_PRIORITY"):
            raise
        print(f"exactfuse: error: {error}", file=sys.stderr)
        return 2
    return commands.run(args)
