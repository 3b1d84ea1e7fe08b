"""Nsight Compute of ``w4a16_gemm_packed`` as it routes (``ops/w4a16/packed_kernel.py`` at ``packed_config`` up
to 32 rows, the wgmma kernel above on these layers) beside ``w4a16_gemm`` on the same weight in the GPTQ layout
(its launch rule), bf16, group 128, symmetric, at 14336 x 4096 and 4096 x 14336, M 1 and 16, or the rows given
(``run.sh ncu w4a16_packed 64,128``)."""

import sys

import torch
from common import ncu_main

from exactfuse.ops.w4a16 import fragment
from exactfuse.ops.w4a16.launch import launch_w4a16_gemm
from exactfuse.ops.w4a16.packed import w4a16_gemm_packed_gluon
from exactfuse.testing.cases.w4a16 import _random_prepared


def calls() -> list:
    out = []
    for K, N in ((14336, 4096), (4096, 14336)):
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        p = fragment.pack(w.qweight, w.scales, w.zeros)
        for M in [int(m) for m in sys.argv[1].split(",")] if len(sys.argv) == 2 else (1, 16):
            a = torch.randn((M, K), dtype=torch.bfloat16, device="cuda")
            out.append(lambda a=a, p=p: w4a16_gemm_packed_gluon(a, *p, None))
            out.append(lambda a=a, w=w: launch_w4a16_gemm(a, w.qweight, w.scales, w.zeros, None, None, 128, True))
    return out


if __name__ == "__main__":
    ncu_main(calls)
