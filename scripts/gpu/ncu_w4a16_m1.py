"""Nsight Compute of W4A16 (bf16, group 128, symmetric) at 4096 x 4096 and 4096 x 14336: the kernels the rule
launches, tinygemm (``torch._weight_int4pack_mm``) and cuBLAS on the dense weight, same inputs, at the M given
(default 1; ``ncu w4a16_m1 16 128``: the staged tile and its reduction kernel)."""

import sys

import torch
from common import ncu_main

from exactfuse.bench.peers.w4a16 import _w4a16_cublas_dense, _w4a16_torch_int4
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.testing.cases.w4a16 import _random_prepared


def cases(default: list[int]):
    """(w4a16_gemm's arguments, the weights) per (K, N) and M (the arguments, else ``default``)."""
    for (K, N), M in ((s, M) for s in ((4096, 4096), (4096, 14336)) for M in map(int, sys.argv[1:] or default)):
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        yield (torch.randn((M, K), dtype=torch.bfloat16, device="cuda"), w.qweight, w.scales, None, None, None, 128), w


def calls() -> list:
    peers = (_w4a16_torch_int4, _w4a16_cublas_dense)
    return [c for args, _ in cases([1]) for c in (lambda args=args: w4a16_gemm(*args), *(p(args, {}) for p in peers))]


if __name__ == "__main__":
    ncu_main(calls)
