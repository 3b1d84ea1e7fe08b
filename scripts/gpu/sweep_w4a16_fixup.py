"""W4A16 split-K on the GPU: the in-launch fixup against the two-launch reduction, side by side.

For the five benchmark (K, N) shapes and the fused buckets' M (bf16, group 128, symmetric, weights
rotated past L2): the shipped tile and split with ``fixup`` on and off, each output checked against
the op's contract and the two bitwise equal before timing.

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_fixup.py      # about 1 minute on an H200
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_decode import SHAPES, bench_rotating, device_info, rotating_weights

from exactfuse.bench.results import geomean
from exactfuse.ops.w4a16 import CONTRACT, w4a16_gemm
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import select_config

MS = (1, 4, 16, 32, 64, 128)


def main() -> None:
    dtype = torch.bfloat16
    dev, sms, _ = device_info()
    lines, ratios = [f"{'K':>6} {'N':>6} {'M':>4} {'split':>5} {'fixup µs':>9} {'2-launch µs':>11} {'ratio':>6}"], {}
    for K, N in SHAPES:
        ws, _, copies = rotating_weights(K, N, dtype, dev)
        for M in MS:
            a = torch.randn((M, K), dtype=dtype, device=dev)
            args0 = (a, ws[0].qweight, ws[0].scales, None, None, None, 128)
            cfg = select_config(M, N, K, 128, sms)
            if cfg.split_k == 1:
                continue
            times = {}
            outs = []
            for fixup in (True, False):
                c = dataclasses.replace(cfg, fixup=fixup)
                outs.append(w4.launch_w4a16_gemm(*args0, config=c))
                check = CONTRACT.check(outs[-1], w4a16_gemm.native(*args0), args=args0)
                assert check.passed, (c, check.detail)
                times[fixup] = bench_rotating(
                    lambda i, a=a, c=c, ws=ws: w4.launch_w4a16_gemm(
                        a, ws[i].qweight, ws[i].scales, None, None, None, 128, config=c
                    ),
                    copies,
                )
            assert torch.equal(*outs), (K, N, M)
            ratios.setdefault(M, []).append(times[True] / times[False])
            ratio = times[True] / times[False]
            lines.append(f"{K:>6} {N:>6} {M:>4} {cfg.split_k:>5} {times[True]:9.2f} {times[False]:11.2f} {ratio:6.3f}")
        ws = None
        torch.cuda.empty_cache()
    lines.append(
        "\ngeomean fixup / two-launch time per M: " + "  ".join(f"M{m}={geomean(r):.3f}" for m, r in ratios.items())
    )
    emit("sweep_w4a16_fixup.txt", lines)


if __name__ == "__main__":
    main()
