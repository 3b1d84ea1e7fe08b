"""gelu_and_mul_sparse on the GPU: a chunked kernel's (chunk x num_warps) configurations against the
whole-row kernel (and, with ``--compiled``, torch.compile of the spec: one compile per shape, minutes).

``looped``: one program per row in chunks, for wide rows in large batches
(benchmarks/results/h200/sweeps/sparse_looped_chunks.txt). ``split``: a row's chunks on separate
programs, for wide rows in small batches (sweeps/sparse_split_chunks.txt).

Each configuration first passes the op's contract against native at T = 16, then is timed
(CUDA-graph replay, median, inputs rotated past L2). Prints per shape the whole-row time, the
best configuration and the shipped choice (``choose_plan``), and per width the geomean of
each configuration over T (and over T >= 1024).

    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_chunks.py looped     # about 1 minute on an H200
    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_chunks.py split
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_sparse_warps import TIMER, WORKING_SET, time_us

from exactfuse.bench.results import geomean
from exactfuse.bench.timing import recompile_limits
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER, gelu_and_mul_sparse
from exactfuse.ops.gelu_and_mul_sparse import heuristics as sh
from exactfuse.ops.gelu_and_mul_sparse import triton as st
from exactfuse.registry.contracts import RowBitwise

WIDTHS = (8192, 12288, 16384, 24576, 32768)
SWEEPS = {  # kernel: (batch sizes, (chunk, num_warps) configurations)
    "looped": ((1, 16, 64, 1024, 2048), ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16))),
    "split": ((1, 4, 16, 64), ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (4096, 16), (8192, 8))),
}


def compiled_us(sets) -> float:
    spec = torch.compile(gelu_and_mul_sparse.native, dynamic=False)

    def body():
        for x in sets:
            spec(x, STD_MULTIPLIER, "tanh")

    body()
    return TIMER(body) * 1e3 / len(sets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", choices=sorted(SWEEPS))
    parser.add_argument("--compiled", action="store_true", help="also time torch.compile of the spec")
    opts = parser.parse_args()
    tokens, configs = SWEEPS[opts.kernel]
    lines, times = [], {}
    for d in WIDTHS:
        x = torch.randn(16, 2 * d, device="cuda", dtype=torch.bfloat16)
        expected = gelu_and_mul_sparse.native(x, STD_MULTIPLIER, "tanh")
        for bc, w in configs:
            plan = sh.SparsePlan(opts.kernel, bc, w)
            y = st.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", plan=plan)
            res = RowBitwise().check(y, expected)
            assert res.passed, (d, bc, w, res.summary())
        for T in tokens:
            k = max(1, min(32, WORKING_SET // (T * d * 6)))
            sets = [torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16) for _ in range(k)]
            row = times.setdefault((T, d), {})
            row["whole"] = time_us(sets, sh.default_plan("whole", T, d, 132))
            if opts.compiled:
                with recompile_limits():
                    row["compiled"] = compiled_us(sets)
            for bc, w in configs:
                row[(bc, w)] = time_us(sets, sh.SparsePlan(opts.kernel, bc, w))
    head = ("T", 5), ("d", 6), ("whole µs", 9), ("compiled", 8), ("best", 11), ("µs", 8), ("shipped", 18), ("µs", 8)
    lines.append(" ".join(f"{name:>{width}}" for name, width in head) + "   GB/s")
    for (T, d), row in times.items():
        best = min((c for c in row if isinstance(c, tuple)), key=row.get)
        chosen = sh.choose_plan(T, d, 132)
        kind, block, warps = chosen.kernel, chosen.block, chosen.num_warps
        ship = (block, warps) if kind == opts.kernel else "whole"
        us = row.get(ship, float("nan"))  # nan: the shipped choice is the other chunked kernel
        lines.append(
            f"{T:>5} {d:>6} {row['whole']:9.2f} {row.get('compiled', float('nan')):8.2f} {best!s:>11} "
            f"{row[best]:8.2f} {kind + ' ' + str(ship if ship != 'whole' else ''):>18} {us:8.2f} "
            f"{T * d * 6 / us / 1e3:6.0f}"
        )
    lines.append("\nper d, geomean µs over T (and over T >= 1024):")
    for d in WIDTHS:
        cells = []
        for c in ("whole", "compiled", *configs) if opts.compiled else ("whole", *configs):
            all_t = geomean(times[(T, d)][c] for T in tokens)
            big = [times[(T, d)][c] for T in tokens if T >= 1024]
            cells.append(f"{c}={all_t:.2f}" + (f"/{geomean(big):.2f}" if big else ""))
        lines.append(f"  d {d:>5}: " + "  ".join(cells))
    emit(f"sweep_sparse_{opts.kernel}.txt", lines)


if __name__ == "__main__":
    main()
