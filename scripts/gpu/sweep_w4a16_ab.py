"""One boolean ``TileConfig`` field (or several joined by ``+``) on and off at the shipped configuration (the
staged tile's where the rule takes it), side by side on the five bench shapes at the M given (bf16, or fp16
with ``--fp16``), each output checked against the contract and, where the field must not change the result,
the two bitwise equal. ``fixup``: the split-K sum in the GEMM's launch against a second launch
(sweeps/w4a16_splitk_fixup_ab.txt, w4a16_staged_fixup_ab.txt); ``packed_math``, ``wide_a``, ``scale_tile``:
the GEMV's (sweeps/w4a16_gemv_*_ab*.txt)."""

import dataclasses
import sys

import torch
from common import device_line, emit, geomean
from sweep_w4a16_tiles import SHAPES, checked, timed, weights

from exactfuse.ops.w4a16 import staged
from exactfuse.ops.w4a16.heuristics import select_config

APPLIES = {"fixup": lambda cfg: cfg.split_k > 1 and not cfg.dense, "packed_math": lambda cfg: cfg.gemv,
           "wide_a": lambda cfg: cfg.gemv, "scale_tile": lambda cfg: cfg.gemv}  # fmt: skip
# scale_tile changes no value, but without it Triton may lay the word tile out as the scales' load (at two
# groups per K step), which reorders the fp32 sum over the word rows: the only field not held bitwise
BITWISE = {"fixup", "packed_math", "wide_a"}


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--fp16"]
    field, ms, fields = args[0], [int(m) for m in args[1:]], args[0].split("+")
    fp16 = "--fp16" in sys.argv
    dtype = torch.float16 if fp16 else torch.bfloat16
    _, sms, _ = device_line()
    lines, ratios = [f"{'K':>6} {'N':>6} {'M':>5} {'config/split':>10} {'on µs':>8} {'off µs':>8} {'on/off':>7}"], {}
    for K, N in SHAPES:
        ws, _ = weights(K, N, dtype, with_dense=False)
        for M in ms:
            a = torch.randn((M, K), dtype=dtype, device="cuda")
            cfg = select_config(M, N, K, 128, sms, wgmma=not staged.wgmma_unavailable(a.device))
            if not any(APPLIES[f](cfg) for f in fields):
                continue
            on, off = (dataclasses.replace(cfg, **dict.fromkeys(fields, v)) for v in (True, False))
            outs = [checked(a, ws[0], c) for c in (on, off)]
            assert not set(fields) <= BITWISE or torch.equal(*outs), (K, N, M)
            t_on, t_off = timed(a, ws, on), timed(a, ws, off)
            ratios.setdefault(M, []).append(t_on / t_off)
            name = f"{cfg.name}/{cfg.split_k}"
            lines.append(f"{K:>6} {N:>6} {M:>5} {name:>10} {t_on:8.2f} {t_off:8.2f} {t_on / t_off:7.3f}")
        ws = None
        torch.cuda.empty_cache()
    lines.append(
        f"\ngeomean {field} on / off time per M: " + "  ".join(f"M{m}={geomean(r):.3f}" for m, r in ratios.items())
    )
    emit(f"sweep_w4a16_{field}{'_fp16' if fp16 else ''}.txt", lines)


if __name__ == "__main__":
    main()
