"""Is one fused gate+up projection bit for bit the two projections transformers runs? (cuBLAS, bf16)

Usage: PYTHONPATH=src python scripts/gpu/probe_fused_gate_up.py

For Llama- and Gemma-shaped MLPs (hidden 2048/4096, intermediate 8192/14336) and M in {1, 16, 64, 2048}
tokens it compares ``F.linear(x, cat([W_gate, W_up]))`` split in two with ``F.linear(x, W_gate)`` and
``F.linear(x, W_up)``: elements that differ, per half, and the time of both ways (median of CUDA-graph
replays). ``exactfuse.integrations.transformers.apply(exact=True)`` may fuse only where none differ.
Result: benchmarks/results/h200/sweeps/fused_gate_up.txt.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from sweep_io import emit

from exactfuse.bench.timing import cudagraph_timer

TIMER = cudagraph_timer(rep_ms=10)


def main() -> None:
    lines = ["hidden x intermediate, M | gate differs | up differs | two µs | fused µs"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for (H, inter), M in itertools.product(((2048, 8192), (4096, 14336)), (1, 16, 64, 2048)):
        wg = torch.randn((inter, H), device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
        wu = torch.randn((inter, H), device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
        fused_w = torch.cat([wg, wu])
        x = torch.randn((M, H), device="cuda", dtype=torch.bfloat16, generator=gen)
        g, u = F.linear(x, wg), F.linear(x, wu)
        fg, fu = F.linear(x, fused_w).split(inter, dim=-1)
        dg = int((g.view(torch.int16) != fg.view(torch.int16)).sum())
        du = int((u.view(torch.int16) != fu.view(torch.int16)).sum())
        two = TIMER(lambda: (F.linear(x, wg), F.linear(x, wu))) * 1e3  # noqa: B023
        one = TIMER(lambda: F.linear(x, fused_w)) * 1e3  # noqa: B023
        lines.append(f"{H} x {inter}, M {M} | {dg} of {g.numel()} | {du} of {u.numel()} | {two:.1f} | {one:.1f}")
        print(lines[-1], flush=True)
    emit("fused_gate_up.txt", lines)


if __name__ == "__main__":
    main()
