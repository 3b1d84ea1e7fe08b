"""num_warps of gelu_and_mul_sparse's whole-row kernel (bf16, tanh) per width d and token count T: each count's
time, registers and spills, the best count per (BD, load class) and the loss of the shipped ``WARPS_BY_BD``.
Results: sweeps/sparse_whole_warps_t1_64_1024*.txt (the defaults) and sparse_whole_warps_by_load*.txt
(``--widths 500 1024 2048 3000 4096 8192 --tokens 1 16 64 128 256 512 1024``)."""

import argparse
import dataclasses

import torch
from common import emit, geomean, rotated, time_us

from exactfuse.bench import resources
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER
from exactfuse.ops.gelu_and_mul_sparse import heuristics as sh
from exactfuse.ops.gelu_and_mul_sparse.launch import launch_gelu_and_mul_sparse
from exactfuse.ops.gelu_and_mul_sparse.sparse_gelu_kernel import gelu_and_mul_sparse_kernel

WIDTHS = (1, 31, 128, 500, 1024, 2048, 3000, 4096, 8192, 12288, 16384, 24576, 32768)


def inputs(T: int, d: int) -> list:
    return rotated(lambda: torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16), T * d * 6)


def plan_us(sets, plan: sh.SparsePlan) -> float:
    """Median µs per call of the launch with ``plan`` over the rotated ``sets``."""
    return time_us(lambda: [launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", plan=plan) for x in sets],
                   len(sets))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=WIDTHS)
    parser.add_argument("--tokens", type=int, nargs="+", default=(1, 64, 1024))
    opts = parser.parse_args()
    times, regs, raw = {}, {}, []
    for d in opts.widths:
        bt, bd, _ = sh.sparse_config(d)
        for T in opts.tokens:
            sets, row = inputs(T, d), times.setdefault((T, d), {})
            for w in [w for w in (1, 2, 4, 8, 16, 32) if 4 <= bt * bd // (32 * w) <= 128] or [4]:
                before = resources.snapshot([gelu_and_mul_sparse_kernel])
                row[w] = plan_us(sets, dataclasses.replace(sh.default_plan("whole", T, d, 132), num_warps=w))
                for res in resources.new_specializations(before, resources.snapshot([gelu_and_mul_sparse_kernel])):
                    regs[(bd, w)] = f"{res.n_regs} regs/{res.n_spills} spills"
            raw += [f"T={T} d={d} warps={w} {us:.3f}us {regs.get((bd, w), '')}" for w, us in sorted(row.items())]
    lines = [f"{'T':>5} {'d':>6} {'best w':>6} {'us':>8} {'shipped w':>9} {'us':>8} {'x':>6} {'GB/s best':>9}"]
    for (T, d), row in times.items():
        best, shipped = min(row, key=row.get), sh.sparse_config(d, T)[2]
        ours = row.get(shipped, float("nan"))
        lines.append(f"{T:>5} {d:>6} {best:>6} {row[best]:8.2f} {shipped:>9} {ours:8.2f} {ours / row[best]:6.3f} "
                     f"{T * d * 6 / row[best] / 1e3:9.0f}")  # fmt: skip
    lines.append("\nper BD bucket and load (0 few, 1 mid, 2 many programs per SM): geomean slowdown vs per-shape best")
    suggested, loss = {}, []
    for bd in sorted({sh.sparse_config(d)[1] for d in opts.widths}):
        for load in range(3):
            shapes = [r for (T, d), r in times.items() if sh.sparse_config(d)[1] == bd
                      and sh.load_class(-(-T // sh.sparse_config(d)[0]), 132) == load]  # fmt: skip
            if shapes:
                scores = {
                    w: geomean(r[w] / min(r.values()) for r in shapes) for w in set.intersection(*map(set, shapes))
                }
                suggested[(max(bd, 1024), load)] = min(scores, key=scores.get)
                loss += [r[sh.WARPS_BY_BD[max(bd, 1024)][load]] / min(r.values()) for r in shapes]
                cells = "  ".join(f"w{w}: {s:.3f} ({regs.get((bd, w), '?')})" for w, s in sorted(scores.items()))
                lines.append(f"  BD {bd:>5} load {load}: {cells}")
    lines.append(f"\nsuggested (BD, load): warps = {dict(sorted(suggested.items()))}")
    lines.append(f"shipped   WARPS_BY_BD = {sh.WARPS_BY_BD}")
    lines.append(f"shipped table vs per-shape best: geomean {geomean(loss):.3f}x, worst {max(loss):.3f}x")
    emit("sweep_sparse_warps.txt", raw)
    emit("sweep_sparse_warps_summary.txt", lines)


if __name__ == "__main__":
    main()
