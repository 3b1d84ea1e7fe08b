"""W4A16 A/B of one boolean ``TileConfig`` field on the GPU, side by side, at the shipped configurations.

For the five benchmark (K, N) shapes and the given M (bf16, or fp16 with ``--fp16``; group 128, symmetric,
weights rotated past L2): the heuristic's configuration (the staged tile's where the rule takes it) with
``FIELD`` on and off, each output checked against the
op's contract, and the two checked bitwise equal where the field must not change the result
(``EQUAL``), before timing. Configurations where the field has no effect are skipped.

    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_ab.py fixup 1 4 16 32 64 128  # about 1 minute
    PYTHONPATH=src python3 scripts/gpu/sweep_w4a16_ab.py scale_tile --fp16 1 2   # fp16 activations
``FIELD`` may join several fields with ``+`` (all on against all off).
Fields and the results they back (benchmarks/results/h200/sweeps/, docs/heuristics.md): ``fixup`` (the
split-K sum in the GEMM's launch against a second launch; w4a16_splitk_fixup_ab.txt for the tl.dot tiles,
w4a16_staged_fixup_ab.txt for the staged tile at M 4-128), ``packed_math`` (the
GEMV's dequantization in 16-bit pairs against fp32 arithmetic; w4a16_gemv_packed_math_ab.txt), ``wide_a``
(the GEMV's activations in 64-bit loads against one load each; w4a16_gemv_wide_a_ab*.txt) and ``scale_tile``
(its scales loaded in the packed words' layout against one per column through shared memory;
w4a16_gemv_scale_tile_ab*.txt). The other ``*_ab.txt`` files there were made with fields whose variants are no
longer in the kernel.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import SHAPES, bench_rotating, device_info, rotating_weights

from exactfuse.bench.results import geomean
from exactfuse.ops.w4a16 import CONTRACT, staged, w4a16_gemm
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import select_config

APPLIES = {  # field: configurations where it changes the launch
    "fixup": lambda cfg: cfg.split_k > 1 and not cfg.dense,
    "packed_math": lambda cfg: cfg.gemv,
    "wide_a": lambda cfg: cfg.gemv,
    "scale_tile": lambda cfg: cfg.gemv,
}
EQUAL = {  # field: configurations where both settings give bitwise equal outputs
    "fixup": lambda cfg: True,  # the same sums in the same order
    "packed_math": lambda cfg: True,  # the same dequantized values
    "wide_a": lambda cfg: True,  # the same activations
    # the same scales, but without the tile Triton may lay the word tile out as the scales' load (at two
    # groups per K step: 8 columns per thread, not 4), which reorders the fp32 sum over the word rows
    "scale_tile": lambda cfg: False,
}


def main() -> None:
    fp16 = "--fp16" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--fp16"]
    field, ms = args[0], [int(m) for m in args[1:]]
    fields = field.split("+")  # several fields switched together: a+b
    dtype = torch.float16 if fp16 else torch.bfloat16
    dev, sms, _ = device_info()
    lines, ratios = [f"{'K':>6} {'N':>6} {'M':>5} {'config/split':>10} {'on µs':>8} {'off µs':>8} {'on/off':>7}"], {}
    for K, N in SHAPES:
        ws, _, copies = rotating_weights(K, N, dtype, dev)
        for M in ms:
            a = torch.randn((M, K), dtype=dtype, device=dev)
            args0 = (a, ws[0].qweight, ws[0].scales, None, None, None, 128)
            cfg = select_config(M, N, K, 128, sms, wgmma=not staged.wgmma_unavailable(a))
            if not any(APPLIES[f](cfg) for f in fields):
                continue
            times, outs = {}, []
            for on in (True, False):
                c = dataclasses.replace(cfg, **dict.fromkeys(fields, on))
                outs.append(w4.launch_w4a16_gemm(*args0, config=c))
                check = CONTRACT.check(outs[-1], w4a16_gemm.native(*args0), args=args0)
                assert check.passed, (c, check.detail)
                times[on] = bench_rotating(
                    lambda i, a=a, c=c, ws=ws: w4.launch_w4a16_gemm(
                        a, ws[i].qweight, ws[i].scales, None, None, None, 128, config=c
                    ),
                    copies,
                )
            assert not all(EQUAL[f](cfg) for f in fields) or torch.equal(*outs), (K, N, M)
            ratio = times[True] / times[False]
            ratios.setdefault(M, []).append(ratio)
            name = f"{cfg.name}/{cfg.split_k}"
            lines.append(f"{K:>6} {N:>6} {M:>5} {name:>10} {times[True]:8.2f} {times[False]:8.2f} {ratio:7.3f}")
        ws = None
        torch.cuda.empty_cache()
    lines.append(
        f"\ngeomean {field} on / off time per M: " + "  ".join(f"M{m}={geomean(r):.3f}" for m, r in ratios.items())
    )
    emit(f"sweep_w4a16_{field}{'_fp16' if fp16 else ''}.txt", lines)


if __name__ == "__main__":
    main()
