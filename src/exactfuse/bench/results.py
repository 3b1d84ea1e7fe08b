"""Bench rows, the per-op summary and the CSV / JSON files.

One :class:`Row` per (op, dtype, shape, provider). Providers come in kinds:
``exactfuse`` (registry providers, gated by the op's contract), ``reference``
(``native``, eager spec), ``compiled`` (``native-compiled``) and ``peer``.
Baselines are every kind but ``exactfuse``.

Statuses: ``ok`` (checked, timed), ``reference`` (native, timed),
``inexact`` (a baseline outside the dtype Tolerance; timed, flagged),
``failed`` (an exactfuse provider failed its contract: never timed),
``skipped`` (the provider declines these arguments), ``error`` (it raised).
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

SCHEMA = "exactfuse-bench/1"
TIMED = ("ok", "reference", "inexact")
META_COLUMNS = ("gpu", "torch", "triton", "git_rev", "date")


@dataclass
class Row:
    """One provider on one shape. Times in µs; ``pct_roofline`` in percent."""

    op: str
    dtype: str
    shape: str
    provider: str
    kind: str
    status: str = "ok"
    contract: str = ""
    max_abs_err: float | None = None
    max_ulp: int | None = None
    mismatches: int | None = None
    time_us: float | None = None
    buffers: int = 1
    bytes: int | None = None
    flops: int | None = None
    roofline_us: float | None = None
    pct_roofline: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    speedup_vs_native: float | None = None
    speedup_vs_native_compiled: float | None = None
    kernels: list[dict] = field(default_factory=list)
    note: str = ""
    # wall seconds the row took: the candidate's first call (its compile, where the warm-up left one), the
    # gate and the timing; where a bench's time goes
    seconds: float | None = None
    # merged results: the index in ``meta["shards"]`` of the run that measured this row (None: one run, or
    # a row merged before runs were recorded per row whose run the commands cannot tell)
    shard: int | None = None

    @property
    def timed(self) -> bool:
        return self.status in TIMED and self.time_us is not None

    def csv_record(self, meta: dict) -> dict:
        record = {k: v for k, v in asdict(self).items() if k != "kernels"}
        record["kernels"] = ";".join(f"{k['name']}:w{k.get('num_warps')}" for k in self.kernels)
        for key in ("n_regs", "n_spills", "shared"):
            record[key] = ";".join("" if k.get(key) is None else str(k[key]) for k in self.kernels)
        if self.shard is not None:
            run = meta["shards"][self.shard]
        else:  # one run (meta's), or merged from runs that cannot be told apart (revision and date unknown)
            run = {"git_rev": "", "date": ""} if meta.get("shards") else {}
        for key in META_COLUMNS:
            record[key] = run[key] if run.get(key) is not None else meta.get(key, "")
        return {k: ("" if record.get(k) is None else record[k]) for k in CSV_FIELDS}


CSV_FIELDS = (
    *(name for name in Row.__dataclass_fields__ if name not in ("kernels", "shard")),
    "kernels",
    "n_regs",
    "n_spills",
    "shared",
    *META_COLUMNS,
)


# ---------------------------------------------------------------- summary
def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive ``values`` (summaries here; sweep scripts too)."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: list[Row]) -> list[dict]:
    """Speedup of each exactfuse provider over each baseline, per (op, dtype).

    Over the shapes where both were timed: geomean, median, min and max of
    ``baseline time / provider time``; wins (> 1) and losses (< 1).
    """
    by_group: dict[tuple[str, str], dict[str, dict[str, Row]]] = {}
    for row in rows:
        if row.timed:
            by_group.setdefault((row.op, row.dtype), {}).setdefault(row.provider, {})[row.shape] = row
    summary = []
    for (op, dtype), providers in by_group.items():
        kinds = {name: next(iter(shapes.values())).kind for name, shapes in providers.items()}
        for name, shapes in providers.items():
            if kinds[name] != "exactfuse":
                continue
            for base, base_shapes in providers.items():
                if kinds[base] == "exactfuse":
                    continue
                common = [s for s in shapes if s in base_shapes]
                if not common:
                    continue
                ratios = [base_shapes[s].time_us / shapes[s].time_us for s in common]
                summary.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        "provider": name,
                        "baseline": base,
                        "baseline_inexact": any(base_shapes[s].status == "inexact" for s in common),
                        "shapes": len(common),
                        "geomean": geomean(ratios),
                        "median": statistics.median(ratios),
                        "min": min(ratios),
                        "max": max(ratios),
                        "wins": sum(r > 1 for r in ratios),
                        "losses": sum(r < 1 for r in ratios),
                    }
                )
    return summary


# ------------------------------------------------------------------- meta
def gpu_slug(name: str) -> str:
    """``"NVIDIA H200"`` -> ``"h200"``; ``"NVIDIA H100 80GB HBM3"`` -> ``"h100-80gb-hbm3"``."""
    text = re.sub(r"^(nvidia|amd)\s+", "", name.strip().lower())
    text = re.sub(r"^geforce\s+", "", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown-gpu"


def git_revision(cwd: str | os.PathLike | None = None) -> str:
    """``git describe``-like revision (``<sha>`` or ``<sha>-dirty``); ``EXACTFUSE_GIT_REV`` if set."""
    if os.environ.get("EXACTFUSE_GIT_REV"):
        return os.environ["EXACTFUSE_GIT_REV"]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def command_line() -> str:
    """This run as ``exactfuse bench ...`` (however it was started)."""
    argv = sys.argv[1:]
    if argv[:1] != ["bench"]:
        argv = ["bench", *argv]
    return shlex.join(["exactfuse", *argv])


def collect_meta(device: torch.device, **extra) -> dict:
    """GPU, versions, git revision, UTC date and the command line of this run."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    from exactfuse import __version__

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = props.name
        capability = f"sm_{props.major}{props.minor}"
    else:
        gpu, capability = f"{device.type} (no GPU)", None
    meta = {
        "gpu": gpu,
        "gpu_slug": gpu_slug(gpu),
        "capability": capability,
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "exactfuse": __version__,
        "python": sys.version.split()[0],
        "git_rev": git_revision(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
    }
    meta.update(extra)
    return meta


# ------------------------------------------------------------------ files
def write_csv(path: str | os.PathLike, rows: list[Row], meta: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.csv_record(meta))
    return path


def _finite(value):
    """JSON has no inf/nan: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_json(path: str | os.PathLike, rows: list[Row], meta: dict, summary: list[dict] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "schema": SCHEMA,
        "meta": meta,
        "rows": [asdict(r) for r in rows],
        "summary": summarize(rows) if summary is None else summary,
    }
    path.write_text(json.dumps(_finite(document), indent=1) + "\n")
    return path


def write_op_results(out_dir: str | os.PathLike, op: str, rows: list[Row], meta: dict) -> tuple[Path, Path]:
    """``<out_dir>/<op>.csv`` and ``<out_dir>/<op>.json``."""
    out = Path(out_dir)
    return write_csv(out / f"{op}.csv", rows, meta), write_json(out / f"{op}.json", rows, meta)


def case_key(dtype: str, case_id: str) -> str:
    """``"bf16/T16-d768"``: how ``meta.incomplete.cases_not_run`` and ``--resume`` name a case."""
    return f"{dtype}/{case_id}"


def load_rows(path: str | os.PathLike) -> tuple[list[Row], dict]:
    """Rows and meta back from a JSON results file (for plots and comparisons)."""
    document = json.loads(Path(path).read_text())
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema must be {SCHEMA!r}, got {document.get('schema')!r}")
    return [Row(**r) for r in document["rows"]], document["meta"]


def _run_of(key: str, runs: list[dict]) -> int | None:
    """Which of ``runs`` (in merge order) measured case ``key`` (``"bf16/M1-K4096-N4096"``): the last whose
    recorded command selected it (``--case`` by re.search, ``--dtype``). None where a later run split its
    grid with ``--shard`` or no command selects it: that cannot be told from the commands."""
    for i in reversed(range(len(runs))):
        argv = shlex.split(runs[i].get("command") or "")
        if "--shard" in argv or "--resume" in argv:
            return None
        pattern = argv[argv.index("--case") + 1] if "--case" in argv else ""
        dtypes = [argv[j + 1] for j, a in enumerate(argv[:-1]) if a == "--dtype"]
        if re.search(pattern, key) and (not dtypes or key.split("/")[0] in dtypes):
            return i
    return None


def merge_results(paths: list[str | os.PathLike]) -> tuple[str, list[Row], dict]:
    """``(op, rows, meta)`` of one op's JSON files from ``--shard`` runs, joined into one result.

    The rows are concatenated (each keeps the speedups measured in its own
    run); when several files have rows for one case, the last file's replace
    the earlier ones (a ``--case`` run re-measuring some shapes after a
    change). ``meta`` is the first file's, with ``shards`` listing every run's
    GPU, versions, git revision, date, command and roofline (a merged input
    contributes the runs it lists; each row's ``shard`` says which run measured
    it, and the CSV's run columns are that run's), and ``incomplete`` the
    cases no file has rows for (a ``--resume`` run fills in an earlier run's
    ``incomplete`` list). All files must be of one op.
    """
    rows: list[Row] = []
    shards, not_run, ops = [], [], set()
    meta: dict = {}
    keys = ("gpu", "torch", "triton", "git_rev", "date", "command", "roofline")
    for path in paths:
        file_rows, file_meta = load_rows(path)
        # a file merged before lists its own runs: keep those, not the merged file
        file_shards = file_meta.get("shards") or [{"file": Path(path).name, **{k: file_meta.get(k) for k in keys}}]
        for r in file_rows:  # each row names its run, numbered in the merged list
            if r.shard is not None or not file_meta.get("shards"):
                run = r.shard or 0
            else:  # merged before rows named their runs
                run = _run_of(case_key(r.dtype, r.shape), file_shards)
            r.shard = None if run is None else len(shards) + run
        newer = {case_key(r.dtype, r.shape) for r in file_rows}
        rows = [r for r in rows if case_key(r.dtype, r.shape) not in newer] + file_rows
        ops.update(r.op for r in file_rows)
        meta = meta or dict(file_meta)
        shards += file_shards
        not_run += file_meta.get("incomplete", {}).get("cases_not_run", [])
    if len(ops) != 1:
        raise ValueError(f"merge_results: the files must hold one op, found {sorted(ops)}")
    meta.pop("incomplete", None)
    meta["shards"] = shards
    done = {case_key(r.dtype, r.shape) for r in rows}
    not_run = [c for c in dict.fromkeys(not_run) if c not in done]
    if not_run:
        meta["incomplete"] = {"cases_not_run": not_run}
    return ops.pop(), rows, meta
