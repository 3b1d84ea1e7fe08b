"""Nsight Compute profile of sparse_paged_attention's kernels: a bf16 and an fp8 e4m3 cache, at rows 1 and 64.

``bash scripts/gpu/run.sh ncu sparse_attention`` profiles one call of each (after a warm call) of the
bench grid's ``R{1,64}-H24x2-D128-P1024-W2048`` shapes with a bf16 and an e4m3 cache, and of
``R1-H24x2-D256-P1024-W2048`` with a bf16 cache, and prints, per kernel, time, DRAM throughput,
occupancy, registers, issue-slot use and the largest warp-stall reasons: why the e4m3 cache, half the
bytes, runs slower than the bf16 one at rows >= 64, how far rows = 1 is from its read floor
(``probe attention_read_floor``), and what the twice as wide rows cost at D = 256.
"""

from ncu_summary import main, profile_calls


def profile() -> None:
    import torch

    from exactfuse.ops.sparse_paged_attention import sparse_paged_attention
    from exactfuse.testing.cases.sparse_paged_attention import _grid_case

    calls = []
    shapes = [(rows, 128, kv) for rows in (1, 64) for kv in (torch.bfloat16, torch.float8_e4m3fn)]
    for rows, head_dim, kv in [*shapes, (1, 256, torch.bfloat16)]:
        case = _grid_case(torch.device("cuda"), torch.bfloat16, 0, rows, 24, 2, head_dim, 2048, kv)
        calls.append(lambda case=case: sparse_paged_attention.run_provider("triton", *case.args, **case.kwargs))
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)
