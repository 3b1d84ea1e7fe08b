"""gelu_and_mul_sparse's chunked kernels' (chunk, warps) against the whole row (``--compiled``: also
torch.compile of the spec), each configuration checked against the contract at T = 16 first. ``looped``: one
program a row in chunks (sweeps/sparse_looped_chunks.txt); ``split``: a row's chunks on separate programs
(sweeps/sparse_split_chunks.txt)."""

import argparse

import torch
from common import emit, geomean, time_sets
from sweep_sparse_warps import inputs, plan_us

from exactfuse.bench.timing import recompile_limits
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER, gelu_and_mul_sparse
from exactfuse.ops.gelu_and_mul_sparse import heuristics as sh
from exactfuse.ops.gelu_and_mul_sparse.launch import launch_gelu_and_mul_sparse
from exactfuse.registry.contracts import RowBitwise

WIDTHS = (8192, 12288, 16384, 24576, 32768)
SWEEPS = {  # kernel: (batch sizes, (chunk, num_warps) configurations)
    "looped": ((1, 16, 64, 1024, 2048), ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16))),
    "split": ((1, 4, 16, 64), ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (4096, 16), (8192, 8))),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", choices=sorted(SWEEPS))
    parser.add_argument("--compiled", action="store_true", help="also time torch.compile of the spec")
    opts = parser.parse_args()
    tokens, configs = SWEEPS[opts.kernel]
    columns = ("whole", "compiled", *configs) if opts.compiled else ("whole", *configs)
    times = {}
    for d in WIDTHS:
        x = torch.randn(16, 2 * d, device="cuda", dtype=torch.bfloat16)
        expected = gelu_and_mul_sparse.native(x, STD_MULTIPLIER, "tanh")
        for bc, w in configs:
            y = launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", plan=sh.SparsePlan(opts.kernel, bc, w))
            res = RowBitwise().check(y, expected)
            assert res.passed, (d, bc, w, res.summary())
        for T in tokens:
            sets, row = inputs(T, d), times.setdefault((T, d), {})
            row["whole"] = plan_us(sets, sh.default_plan("whole", T, d, 132))
            if opts.compiled:
                with recompile_limits():
                    spec = torch.compile(gelu_and_mul_sparse.native, dynamic=False)
                    row["compiled"] = time_sets(
                        lambda x, spec=spec: spec(x, STD_MULTIPLIER, "tanh"), [(x,) for x in sets]
                    )
            for bc, w in configs:
                row[(bc, w)] = plan_us(sets, sh.SparsePlan(opts.kernel, bc, w))
    lines = [
        f"{'T':>5} {'d':>6} {'whole µs':>9} {'compiled':>8} {'best':>11} {'µs':>8} {'shipped':>18} {'µs':>8}   GB/s"
    ]
    for (T, d), row in times.items():
        best = min((c for c in row if isinstance(c, tuple)), key=row.get)
        chosen = sh.choose_plan(T, d, 132)
        ship = (chosen.block, chosen.num_warps) if chosen.kernel == opts.kernel else "whole"
        us = row.get(ship, float("nan"))  # nan: the shipped choice is the other chunked kernel
        lines.append(f"{T:>5} {d:>6} {row['whole']:9.2f} {row.get('compiled', float('nan')):8.2f} {best!s:>11} "
                     f"{row[best]:8.2f} {chosen.kernel + ' ' + str(ship if ship != 'whole' else ''):>18} {us:8.2f} "
                     f"{T * d * 6 / us / 1e3:6.0f}")  # fmt: skip
    lines.append("\nper d, geomean µs over T (and over T >= 1024):")
    for d in WIDTHS:
        cells = []
        for c in columns:
            big = [times[(T, d)][c] for T in tokens if T >= 1024]
            cells.append(
                f"{c}={geomean(times[(T, d)][c] for T in tokens):.2f}" + (f"/{geomean(big):.2f}" if big else "")
            )
        lines.append(f"  d {d:>5}: " + "  ".join(cells))
    emit(f"sweep_sparse_{opts.kernel}.txt", lines)


if __name__ == "__main__":
    main()
