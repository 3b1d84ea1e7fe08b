"""Shared by the ``ncu_*.py`` scripts: the per-kernel summary of an Nsight Compute raw CSV
(``bash scripts/gpu/run.sh ncu NAME`` writes it and calls the script's ``--summary``), and the
profiled region around calls that are already compiled and warm."""

import contextlib
import csv
import io
import sys
from collections.abc import Callable, Sequence

COLUMNS = {
    "time_us": "gpu__time_duration.sum",
    "dram_%peak": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_GB/s": "dram__bytes.sum.per_second",
    "warp_inst": "inst_executed",
    "occ_limit_regs": "launch__occupancy_limit_registers",
    "occ_limit_smem": "launch__occupancy_limit_shared_mem",
    "sm_%peak": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_%": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "regs": "launch__registers_per_thread",
    "smem_B": "launch__shared_mem_per_block",
    "grid": "launch__grid_size",
    "warps/sched": "smsp__warps_active.avg.per_cycle_active",
    "issue_%": "smsp__issue_active.avg.pct_of_peak_sustained_active",
}
STALL = "smsp__average_warps_issue_stalled_"
GB_PER = {"byte/s": 1e-9, "Kbyte/s": 1e-6, "Mbyte/s": 1e-3, "Gbyte/s": 1.0, "Tbyte/s": 1e3}


def profile_calls(calls: Sequence[Callable[[], object]]) -> None:
    """Run each call once (compile, warm), then once each between ``cudaProfilerStart`` / ``Stop``."""
    import torch

    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def summary(path: str) -> None:
    with open(path) as f:
        text = f.read()
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"') :])))
    head, units, rows = rows[0], rows[1], [r for r in rows[1:] if r and r[0].isdigit()]
    col = {name: i for i, name in enumerate(head)}
    for r in rows:
        name = r[col["Kernel Name"]][:60]
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
            if metric.startswith(STALL) and metric.endswith("_per_issue_active.ratio"):
                with contextlib.suppress(ValueError):
                    stalls.append((float(r[i].replace(",", "")), metric[len(STALL) : -len("_per_issue_active.ratio")]))
        top = ", ".join(f"{s}={v:.1f}" for v, s in sorted(stalls, reverse=True)[:6])
        print(f"{r[col['ID']]:>3} {name}\n    " + " ".join(vals) + f"\n    stalls (cycles/issue): {top}")


def main(profile: Callable[[], None]) -> None:
    """``script.py --summary FILE.csv`` prints the summary; ``script.py`` runs ``profile``."""
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        profile()
