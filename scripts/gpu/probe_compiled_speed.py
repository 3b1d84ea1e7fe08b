"""GPU time of each compiler-visible op eagerly and under torch.compile(dynamic=True), at T in {1, 16, 4096}.

For the compiler rule's cost (docs/compiler.md): the compiled function is traced once at T = 8 with a
dynamic token count and then called at each T (an op whose launcher branches on T recompiles there;
one that follows the rule runs the traced, size-oblivious launch). Each output is compared with the
eager call's before timing (bitwise for these ops). Times are medians of CUDA-graph replays
(exactfuse.bench.timing.cudagraph_timer), µs per call.

    PYTHONPATH=src python3 scripts/gpu/probe_compiled_speed.py --label after [--json FILE]

Run it on two trees (PYTHONPATH=<other tree>/src ... --label before) to compare them side by side.
"""

from __future__ import annotations

import argparse
import json

import torch

import exactfuse
from exactfuse.bench.timing import cudagraph_timer, recompile_limits

STD = 1.6448536
OPS = {
    "silu_and_mul-d4096": (lambda x: exactfuse.silu_and_mul(x), 2 * 4096),
    "gelu_and_mul-tanh-d4096": (lambda x: exactfuse.gelu_and_mul(x, "tanh"), 2 * 4096),
    "moe_silu_and_mul-inter-N1024": (lambda x: exactfuse.moe_silu_and_mul(x, None, True), 2 * 1024),
    "gelu_and_mul_sparse-d4096": (lambda x: exactfuse.gelu_and_mul_sparse(x, STD, "tanh"), 2 * 4096),
    "gelu_and_mul_sparse-d16384": (lambda x: exactfuse.gelu_and_mul_sparse(x, STD, "tanh"), 2 * 16384),
    "gelu_and_mul_sparse-d32768": (lambda x: exactfuse.gelu_and_mul_sparse(x, STD, "tanh"), 2 * 32768),
}
TOKENS = (1, 16, 4096)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    timer = cudagraph_timer()
    rows = []
    with recompile_limits():
        for name, (fn, width) in OPS.items():
            torch._dynamo.reset()
            compiled = torch.compile(fn, dynamic=True, fullgraph=True)
            compiled(torch.randn(8, width, dtype=torch.bfloat16, device="cuda"))
            for T in TOKENS:
                x = torch.randn(T, width, dtype=torch.bfloat16, device="cuda")
                same = torch.equal(compiled(x), fn(x))
                eager_us = timer(lambda x=x, fn=fn: fn(x)) * 1e3
                compiled_us = timer(lambda x=x, c=compiled: c(x)) * 1e3
                rows.append(dict(op=name, T=T, eager_us=eager_us, compiled_us=compiled_us, equal=same))
                times = f"eager {eager_us:8.2f} compiled {compiled_us:8.2f}"
                print(f"{args.label:8s} {name:30s} T={T:5d} {times} equal {same}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": args.label, "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
