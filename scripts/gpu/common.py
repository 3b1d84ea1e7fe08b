"""Shared by the sweep and ``ncu_*`` scripts: the output folder, the timer and rotated inputs, the device
line, and the Nsight Compute side (one profiled call each, the summary of ncu's raw CSV)."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import os
import sys
from collections.abc import Callable

import torch
import triton

from exactfuse.bench.results import geomean  # noqa: F401 (the scripts' geomean)
from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer, l2_cache_bytes, rotation_count
from exactfuse.utils import num_sms


def out_dir() -> str | None:
    """The output folder: ``EXACTFUSE_OUT`` (``run.sh`` sets it to its ``results/``), else ``OUT``; None if unset."""
    return os.environ.get("EXACTFUSE_OUT") or os.environ.get("OUT") or None


def emit(name: str, lines: list[str], data=None) -> None:
    """Print ``lines``; write them to ``<output folder>/<name>`` when one is set, and ``data`` as JSON beside
    them (``<name stem>.json``)."""
    print("\n".join(lines), flush=True)
    if out := out_dir():
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(lines) + "\n")
        if data is not None:
            with open(os.path.join(out, os.path.splitext(name)[0] + ".json"), "w") as f:
                json.dump(data, f, indent=1, default=str)


def ints(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``."""
    return [int(v) for v in text.split(",")]


_timer = functools.cache(cudagraph_timer)


def time_us(body: Callable[[], object], calls: int = 1, rep_ms: float = 20) -> float:
    """Median µs per call of ``body`` (which makes ``calls`` calls) over CUDA-graph replays, the bench's timer;
    ``body`` runs once first, so that compiling stays outside the capture."""
    body()
    return _timer(rep_ms)(body) * 1e3 / calls


def rotated(make: Callable[[], object], nbytes: int) -> list:
    """Enough ``make()`` sets, each ``nbytes`` of one call, that the rotation reads them from DRAM (the bench's
    rule, ``timing.rotation_count``)."""
    return [make() for _ in range(rotation_count(nbytes, l2_cache_bytes()))]


def time_sets(fn: Callable, sets: list) -> float:
    """Median µs per call of ``fn(*s)`` over the rotated ``sets``."""
    return time_us(lambda: [fn(*s) for s in sets], len(sets))


def device_line() -> tuple[str, int, float]:
    """``(line, SM count, copy bandwidth in bytes/s)`` for the CUDA device, the line printed."""
    dev = torch.device("cuda")
    sms, copy = num_sms(dev), measure_copy_bandwidth(dev)
    line = f"{torch.cuda.get_device_name()}: {sms} SMs, copy {copy / 1e9:,.0f} GB/s; torch {torch.__version__}, "
    line += f"Triton {triton.__version__}"
    print(line, flush=True)
    return line, sms, copy


# ------------------------------------------------------------------------------------ Nsight Compute
COLUMNS = {  # label: ncu metric
    "time_us": "gpu__time_duration.sum", "dram_%peak": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_GB/s": "dram__bytes.sum.per_second", "warp_inst": "inst_executed",
    "occ_limit_regs": "launch__occupancy_limit_registers", "occ_limit_smem": "launch__occupancy_limit_shared_mem",
    "sm_%peak": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_%": "sm__warps_active.avg.pct_of_peak_sustained_active", "regs": "launch__registers_per_thread",
    "smem_B": "launch__shared_mem_per_block", "grid": "launch__grid_size",
    "warps/sched": "smsp__warps_active.avg.per_cycle_active",
    "issue_%": "smsp__issue_active.avg.pct_of_peak_sustained_active",
}  # fmt: skip
STALL, STALL_END = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
GB_PER = {"byte/s": 1e-9, "Kbyte/s": 1e-6, "Mbyte/s": 1e-3, "Gbyte/s": 1.0, "Tbyte/s": 1e3}


def ncu_summary(path: str) -> None:
    """Per kernel of an ncu ``--csv --page raw`` file: the :data:`COLUMNS` and the six largest stall reasons."""
    with open(path) as f:
        text = f.read()
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"') :])))
    head, units, rows = rows[0], rows[1], [r for r in rows[1:] if r and r[0].isdigit()]
    col = {name: i for i, name in enumerate(head)}
    for r in rows:
        vals = []
        for label, metric in COLUMNS.items():
            v = r[col[metric]] if metric in col else "?"
            if label == "time_us" and v not in ("?", ""):
                v = f"{float(v.replace(',', '')) / 1e3:.2f}"  # ns -> µs
            if label == "dram_GB/s" and v not in ("?", ""):  # ncu picks the unit per run: byte/s, Gbyte/s, ...
                v = f"{float(v.replace(',', '')) * GB_PER.get(units[col[metric]], float('nan')):.0f}"
            vals.append(f"{label}={v}")
        stalls = []
        for metric, i in col.items():
            if metric.startswith(STALL) and metric.endswith(STALL_END):
                with contextlib.suppress(ValueError):
                    stalls.append((float(r[i].replace(",", "")), metric[len(STALL) : -len(STALL_END)]))
        top = ", ".join(f"{s}={v:.1f}" for v, s in sorted(stalls, reverse=True)[:6])
        print(f"{r[col['ID']]:>3} {r[col['Kernel Name']][:60]}\n    {' '.join(vals)}\n    stalls (cycles/issue): {top}")


def ncu_main(make_calls: Callable[[], list[Callable[[], object]]]) -> None:
    """``script.py --summary FILE.csv`` prints :func:`ncu_summary`; otherwise each of ``make_calls()`` runs once
    (compile, warm), then once more between ``cudaProfilerStart`` and ``Stop`` (``run.sh ncu`` profiles from
    the start call only)."""
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        ncu_summary(sys.argv[2])
        return
    calls = make_calls()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
