"""Nsight Compute profile of ``w4a16_gemm_packed`` (the fragment-layout kernel) beside ``w4a16_gemm`` and
cuBLAS on the dense weight, same weights: is the kernel waiting on memory or on issue?

``bash scripts/gpu/run.sh ncu w4a16_fragment [M ...]`` (default M = 1 and 8). The program compiles and
warms every call first, then profiles one call of each between ``cudaProfilerStart`` / ``Stop`` (bf16,
group 128, symmetric, (K, N) from ``SHAPES``); ``--summary`` prints per kernel: time, DRAM throughput,
achieved occupancy, registers, issue-slot use and the largest warp-stall reasons.
Results: benchmarks/results/h200/sweeps/ncu_w4a16_fragment.{txt,csv}.
"""

from ncu_summary import main, profile_calls

SHAPES = ((4096, 4096), (4096, 14336))


def profile() -> None:
    import sys

    import torch

    from exactfuse.bench.peers.w4a16 import _w4a16_cublas_dense
    from exactfuse.ops.w4a16 import fragment, w4a16_gemm, w4a16_gemm_packed
    from exactfuse.testing.cases.w4a16 import _random_prepared

    rows = [int(m) for m in sys.argv[1:]] or [1, 8]
    calls = []
    for (K, N), M in ((shape, M) for shape in SHAPES for M in rows):
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        packed = fragment.pack(w.qweight, w.scales, w.zeros)
        a = torch.randn((M, K), dtype=torch.bfloat16, device="cuda")
        args = (a, w.qweight, w.scales, w.zeros, w.perm, None, w.group_size)
        calls += [
            lambda a=a, p=packed: w4a16_gemm_packed(a, p.words, p.scales),
            lambda args=args: w4a16_gemm(*args),
            _w4a16_cublas_dense(args, {}),
        ]
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)
