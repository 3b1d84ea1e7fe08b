"""Which activation formulas are bitwise over the whole 16-bit input space? Every formula of
``exactfuse.ops.fastmath.FORMULAS`` (silu, gelu_none, gelu_tanh, sigmoid), fp16 and bf16: how many of the 65,536
inputs differ from eager PyTorch, and the first few, through fastmath's own check (the kernels' helper).

    PYTHONPATH=src python3 scripts/gpu/probe_fast_activation.py [--out [PATH]]

The last column is each check's wall time in ms, compiling included. ``--out`` writes the table to PATH
(default benchmarks/results/h200/sweeps/fast_activation_proofs.txt); under ``scripts/gpu/run.sh probe
fast_activation`` the table also lands in the run's ``results/``.
Result: benchmarks/results/h200/sweeps/fast_activation_proofs.txt.
"""

from __future__ import annotations

import argparse
import time

import torch
import triton
from sweep_io import emit

from exactfuse.ops import fastmath

DEFAULT_OUT = "benchmarks/results/h200/sweeps/fast_activation_proofs.txt"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", nargs="?", const=DEFAULT_OUT, help=f"write the table here (default {DEFAULT_OUT})")
    args = parser.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"triton {triton.__version__}: inputs of 65,536 that differ from eager, per formula",
        "activation | dtype | formula (id) | differ | first differing inputs | kernels try it | ms",
    ]
    for activation in fastmath.EXACT:
        for short, dtype in DTYPES.items():
            tried = fastmath.CANDIDATES.get((activation, dtype), ())
            for formula, (of, _) in fastmath.FORMULAS.items():
                if of != activation:
                    continue
                start = time.perf_counter()
                check = fastmath.check_formula(activation, formula, dtype, device)
                ms = (time.perf_counter() - start) * 1e3
                first = ", ".join(f"{v:.5g}" for v in check.first) or "-"
                role = "exact" if formula == fastmath.EXACT[activation] else "yes" if formula in tried else "no"
                lines.append(f"{activation} | {short} | {check.name} ({formula}) | {check.differing} | {first} "
                             f"| {role} | {ms:.0f}")  # fmt: skip
                print(lines[-1], flush=True)
            chosen = fastmath.proof(activation, dtype, device)
            lines.append(f"{activation} | {short} | chosen: {chosen.name} ({chosen.formula})")
    emit("fast_activation_proofs.txt", lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
