"""Nsight Compute profile of W4A16 at M = 1: the kernels exactfuse's heuristic launches there (the GEMV),
tinygemm (``torch._weight_int4pack_mm``) and cuBLAS on the dense weight, same inputs.

Results: benchmarks/results/h200/sweeps/ncu_w4a16_gemv.{txt,csv}; ncu_w4a16_decode_tile.{txt,csv} is the
same profile taken when M = 1 ran the tl.dot decode tile. ``bash scripts/gpu/run.sh ncu w4a16_m1`` runs
both commands below.

    ncu --profile-from-start off --clock-control none --csv --page raw \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \\
        python3 scripts/gpu/ncu_w4a16_m1.py > ncu.csv
    python3 scripts/gpu/ncu_w4a16_m1.py --summary ncu.csv

The program compiles and warms every provider first, then profiles one call of each between
``cudaProfilerStart`` / ``cudaProfilerStop`` (bf16, group 128, symmetric, M = 1, (K, N) from
``SHAPES``). ``--summary`` prints, per kernel: time, DRAM throughput, achieved occupancy,
registers, issue-slot use and the largest warp-stall reasons (cycles per issued instruction).
"""

import contextlib
import csv
import io
import sys

SHAPES = ((4096, 4096), (4096, 14336))
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


def profile() -> None:
    import torch

    from exactfuse.bench.peers import _w4a16_cublas_dense, _w4a16_torch_int4
    from exactfuse.ops.w4a16 import _random_prepared, w4a16_gemm

    calls = []
    for K, N in SHAPES:
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        a = torch.randn((1, K), dtype=torch.bfloat16, device="cuda")
        args = (a, w.qweight, w.scales, w.zeros, w.perm, None, w.group_size)
        calls += [lambda args=args: w4a16_gemm(*args), _w4a16_torch_int4(args, {}), _w4a16_cublas_dense(args, {})]
    for call in calls:  # compile, warm
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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        profile()
