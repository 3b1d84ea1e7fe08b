"""gelu_and_mul_sparse on the GPU: the whole-row kernel against the looped kernel (chunk x num_warps).

For the wide rows where the whole-row kernel pads its block (d = 12288, 24576) or spills
(d = 32768), and for d = 8192 / 16384 as controls: each configuration passes the op's contract
against native at T = 64 first, then is timed (CUDA-graph replay, median, inputs rotated past
L2) at T in {1, 16, 64, 1024, 2048}. Prints per shape the whole-row time, the best looped
configuration and the shipped one (``choose_kernel``), and per width the geomean of each.

    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_loop.py      # about 1 minute on an H200
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_sparse_warps import WORKING_SET, time_us

from exactfuse.bench.results import geomean
from exactfuse.ops.activation import sparse_triton as st
from exactfuse.ops.activation.sparse import STD_MULTIPLIER, gelu_and_mul_sparse
from exactfuse.registry.contracts import RowBitwise

WIDTHS = (8192, 12288, 16384, 24576, 32768)
TOKENS = (1, 16, 64, 1024, 2048)
LOOPS = ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16))


def main() -> None:
    lines, times = [], {}
    for d in WIDTHS:
        x = torch.randn(64, 2 * d, device="cuda", dtype=torch.bfloat16)
        expected = gelu_and_mul_sparse.native(x, STD_MULTIPLIER, "tanh")
        for loop in LOOPS:
            bc, w = loop
            y = st.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", kernel="looped", chunk=bc, num_warps=w)
            res = RowBitwise().check(y, expected)
            assert res.passed, (d, loop, res.summary())
        for T in TOKENS:
            k = max(1, min(32, WORKING_SET // (T * d * 6)))
            sets = [torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16) for _ in range(k)]
            row = times.setdefault((T, d), {})
            row["whole"] = time_us(sets, d, None, kernel="whole")
            for loop in LOOPS:
                row[loop] = time_us(sets, d, loop[1], kernel="looped", chunk=loop[0])
    lines.append(f"{'T':>5} {'d':>6} {'whole µs':>9} {'best loop':>12} {'µs':>8} {'shipped':>12} {'µs':>8} {'GB/s':>6}")
    for (T, d), row in times.items():
        best = min((c for c in row if c != "whole"), key=row.get)
        kind, block, warps = st.choose_kernel(T, d)
        ship = (block, warps) if kind == "looped" else kind
        us = row.get(ship, float("nan"))
        lines.append(
            f"{T:>5} {d:>6} {row['whole']:9.2f} {best!s:>12} {row[best]:8.2f} {ship!s:>12} {us:8.2f} "
            f"{T * d * 6 / us / 1e3:6.0f}"
        )
    lines.append("\nper d, geomean µs over T (and over T >= 1024):")
    for d in WIDTHS:
        cells = []
        for c in ("whole", *LOOPS):
            all_t = geomean(times[(T, d)][c] for T in TOKENS)
            big_t = geomean(times[(T, d)][c] for T in TOKENS if T >= 1024)
            cells.append(f"{c}={all_t:.2f}/{big_t:.2f}")
        lines.append(f"  d {d:>5}: " + "  ".join(cells))
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "sweep_sparse_loop.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
