"""Nsight Compute of sparse_paged_attention's partial and merge kernels: ``R{1,64}-H24x2-D128-P1024-W2048`` with
a bf16 and an fp8 e4m3 cache, and ``R1-H24x2-D256-P1024-W2048`` with a bf16 cache."""

import torch
from common import ncu_main

from exactfuse.ops.sparse_paged_attention import sparse_paged_attention as op
from exactfuse.testing.cases.sparse_paged_attention import _grid_case


def calls() -> list:
    shapes = [(rows, 128, kv) for rows in (1, 64) for kv in (torch.bfloat16, torch.float8_e4m3fn)]
    cases = [_grid_case(torch.device("cuda"), torch.bfloat16, 0, rows, 24, 2, D, 2048, kv)
             for rows, D, kv in [*shapes, (1, 256, torch.bfloat16)]]  # fmt: skip
    return [lambda c=c: op.run_provider("triton", *c.args, **c.kwargs) for c in cases]


if __name__ == "__main__":
    ncu_main(calls)
