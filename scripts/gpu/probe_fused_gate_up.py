"""Is one fused gate+up projection bit for bit the two projections transformers runs? (cuBLAS, bf16)

Usage: PYTHONPATH=src python scripts/gpu/probe_fused_gate_up.py

For Llama- and Gemma-shaped MLPs (hidden 2048/4096, intermediate 8192/14336) and M in {1, 16, 64, 2048}
tokens it compares ``F.linear(x, cat([W_gate, W_up]))`` split in two, and the two GEMMs writing the two
halves of one ``[M, 2I]`` buffer (``torch.mm(..., out=half)``: no join copy), with ``F.linear(x, W_gate)``
and ``F.linear(x, W_up)``: elements that differ, per half, and the time of each way (median of
CUDA-graph replays; ``two + cat`` is what ``apply(exact=True)`` runs). Exact mode may drop its join copy
only where the halves never differ; fast mode's fused GEMM is within a GEMM's rounding either way.
Result: benchmarks/results/h200/sweeps/fused_gate_up.txt.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from sweep_io import emit

from exactfuse.bench.timing import cudagraph_timer

TIMER = cudagraph_timer(rep_ms=10)


def _differ(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.view(torch.int16) != b.view(torch.int16)).sum())


def main() -> None:
    lines = ["hidden x intermediate, M | fused: gate, up differ | halves: gate, up differ "
             "| two + cat µs | halves µs | fused µs"]  # fmt: skip
    gen = torch.Generator(device="cuda").manual_seed(0)
    for (H, inter), M in itertools.product(((2048, 8192), (4096, 14336)), (1, 16, 64, 2048)):
        wg = torch.randn((inter, H), device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
        wu = torch.randn((inter, H), device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
        fused_w = torch.cat([wg, wu])
        x = torch.randn((M, H), device="cuda", dtype=torch.bfloat16, generator=gen)
        buf = torch.empty((M, 2 * inter), device="cuda", dtype=torch.bfloat16)

        def halves():
            torch.mm(x, wg.t(), out=buf[:, :inter])  # noqa: B023
            torch.mm(x, wu.t(), out=buf[:, inter:])  # noqa: B023
            return buf  # noqa: B023

        g, u = F.linear(x, wg), F.linear(x, wu)
        fg, fu = F.linear(x, fused_w).split(inter, dim=-1)
        hg, hu = halves().split(inter, dim=-1)
        two = TIMER(lambda: torch.cat([F.linear(x, wg), F.linear(x, wu)], dim=-1)) * 1e3  # noqa: B023
        half = TIMER(halves) * 1e3
        one = TIMER(lambda: F.linear(x, fused_w)) * 1e3  # noqa: B023
        lines.append(f"{H} x {inter}, M {M} | {_differ(g, fg)}, {_differ(u, fu)} of {g.numel()} "
                     f"| {_differ(g, hg)}, {_differ(u, hu)} | {two:.1f} | {half:.1f} | {one:.1f}")  # fmt: skip
        print(lines[-1], flush=True)
    emit("fused_gate_up.txt", lines)


if __name__ == "__main__":
    main()
