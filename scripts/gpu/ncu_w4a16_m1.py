"""Nsight Compute profile of W4A16 at M = 1: the kernels exactfuse's heuristic launches there (the GEMV),
tinygemm (``torch._weight_int4pack_mm``) and cuBLAS on the dense weight, same inputs.

Results: benchmarks/results/h200/sweeps/ncu_w4a16_gemv.{txt,csv}; ncu_w4a16_decode_tile.{txt,csv} is the
same profile taken when M = 1 ran the tl.dot decode tile; ncu_w4a16_staged.{txt,csv} is ``ncu w4a16_m1 16
128`` with the staged tile and its reduction kernel (two launches, as the rule has them at M = 128).
``bash scripts/gpu/run.sh ncu w4a16_m1`` runs both commands below.

    ncu --profile-from-start off --clock-control none --csv --page raw \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \\
        python3 scripts/gpu/ncu_w4a16_m1.py > ncu.csv
    python3 scripts/gpu/ncu_w4a16_m1.py --summary ncu.csv

The program compiles and warms every provider first, then profiles one call of each between
``cudaProfilerStart`` / ``cudaProfilerStop`` (bf16, group 128, symmetric, M = 1, (K, N) from
``SHAPES``); other row counts as arguments, ``ncu_w4a16_m1.py M [M ...]`` (``ncu w4a16_m1 64`` through
run.sh: the fused tl.dot tile and its split-K reduction). ``--summary`` prints, per kernel: time, DRAM
throughput, achieved occupancy, registers, issue-slot use and the largest warp-stall reasons (cycles per
issued instruction).
"""

from ncu_summary import main, profile_calls

SHAPES = ((4096, 4096), (4096, 14336))


def profile() -> None:
    import sys

    import torch

    from exactfuse.bench.peers.w4a16 import _w4a16_cublas_dense, _w4a16_torch_int4
    from exactfuse.ops.w4a16 import w4a16_gemm
    from exactfuse.testing.cases.w4a16 import _random_prepared

    rows = [int(m) for m in sys.argv[1:]] or [1]
    calls = []
    for (K, N), M in ((shape, M) for shape in SHAPES for M in rows):
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        a = torch.randn((M, K), dtype=torch.bfloat16, device="cuda")
        args = (a, w.qweight, w.scales, w.zeros, w.perm, None, w.group_size)
        calls += [lambda args=args: w4a16_gemm(*args), _w4a16_torch_int4(args, {}), _w4a16_cublas_dense(args, {})]
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)
