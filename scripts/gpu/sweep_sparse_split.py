"""gelu_and_mul_sparse on the GPU: the split kernels (chunk x num_warps) against the whole-row kernel
and torch.compile of the spec, for wide rows in small batches.

Each configuration first passes the op's contract against native at T = 16, then is timed
(CUDA-graph replay, median, inputs rotated past L2) at T in {1, 4, 16, 64}. Prints per shape
the whole-row time, torch.compile's (with ``--compiled``: one compile per shape, minutes), the
best split configuration and the shipped choice (``choose_kernel``), and per width the geomean
of each configuration.

    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_split.py      # about 1 minute on an H200
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_sparse_warps import TIMER, WORKING_SET, time_us

from exactfuse.bench.results import geomean
from exactfuse.bench.timing import recompile_limits
from exactfuse.ops.activation import sparse_triton as st
from exactfuse.ops.activation.sparse import STD_MULTIPLIER, gelu_and_mul_sparse
from exactfuse.registry.contracts import RowBitwise

WIDTHS = (8192, 12288, 16384, 24576, 32768)
TOKENS = (1, 4, 16, 64)
SPLITS = ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (4096, 16), (8192, 8), (8192, 16))


def compiled_us(sets) -> float:
    spec = torch.compile(gelu_and_mul_sparse.native, dynamic=False)

    def body():
        for x in sets:
            spec(x, STD_MULTIPLIER, "tanh")

    body()
    return TIMER(body) * 1e3 / len(sets)


def main() -> None:
    compiled = "--compiled" in sys.argv[1:]
    lines, times = [], {}
    for d in WIDTHS:
        x = torch.randn(16, 2 * d, device="cuda", dtype=torch.bfloat16)
        expected = gelu_and_mul_sparse.native(x, STD_MULTIPLIER, "tanh")
        for bc, w in SPLITS:
            y = st.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", kernel="split", chunk=bc, num_warps=w)
            res = RowBitwise().check(y, expected)
            assert res.passed, (d, bc, w, res.summary())
        for T in TOKENS:
            k = max(1, min(32, WORKING_SET // (T * d * 6)))
            sets = [torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16) for _ in range(k)]
            row = times.setdefault((T, d), {})
            row["whole"] = time_us(sets, d, None, kernel="whole")
            if compiled:
                with recompile_limits():
                    row["compiled"] = compiled_us(sets)
            for bc, w in SPLITS:
                row[(bc, w)] = time_us(sets, d, w, kernel="split", chunk=bc)
    lines.append(
        f"{'T':>3} {'d':>6} {'whole':>7} {'compiled':>8} {'best split':>11} {'µs':>7} {'shipped':>15} {'µs':>7}"
    )
    for (T, d), row in times.items():
        best = min((c for c in row if isinstance(c, tuple)), key=row.get)
        kind, block, warps = st.choose_kernel(T, d)
        ship = "whole" if kind == "whole" else (block, warps) if kind == "split" else None
        shipped = row.get(ship, float("nan"))
        lines.append(
            f"{T:>3} {d:>6} {row['whole']:7.2f} {row.get('compiled', float('nan')):8.2f} {best!s:>11} {row[best]:7.2f} "
            f"{kind + ' ' + str(ship if ship != 'whole' else ''):>15} {shipped:7.2f}"
        )
    lines.append("\nper d, geomean µs over T:")
    for d in WIDTHS:
        columns = ("whole", "compiled", *SPLITS) if compiled else ("whole", *SPLITS)
        cells = [f"{c}={geomean(times[(T, d)][c] for T in TOKENS):.2f}" for c in columns]
        lines.append(f"  d {d:>5}: " + "  ".join(cells))
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "sweep_sparse_split.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
