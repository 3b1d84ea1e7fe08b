"""num_warps sweep of the gelu_and_mul_sparse kernel over d = 1..32768 on the GPU (bf16, tanh).

For every width d (bucketed by BD = next_power_of_2(d), the block the kernel
compiles for) and token counts T in {1, 64, 1024}: the time of each num_warps
(CUDA-graph replay, median, inputs rotated so the working set exceeds L2),
registers and spills of each compiled specialization, and the num_warps whose
geomean over the bucket's shapes is lowest. The last block prints the table to
paste into ``WARPS_BY_BD`` in src/exactfuse/ops/gelu_and_mul_sparse/heuristics.py
and how much the shipped table loses against it (geomean, worst shape).

    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_warps.py      # < 3 minutes on an H200
    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_warps.py --widths 2048 4096 --tokens 128 256

What it decides: a (BD, load) cell whose best num_warps beats the shipped one by more than ~2%
geomean should take the printed value. Details go to sweep_sparse_warps.txt in the output folder
(``sweep_io.out_dir``). Results:
benchmarks/results/h200/sweeps/sparse_whole_warps_t1_64_1024*.txt (the default widths and tokens) and
sparse_whole_warps_by_load*.txt (d <= 8192 at T = 1..1024, ``--widths 500 1024 2048 3000 4096 8192
--tokens 1 16 64 128 256 512 1024``).
"""

import argparse
import dataclasses
import os

import torch
from sweep_io import out_dir

from exactfuse.bench import resources
from exactfuse.bench.results import geomean
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER
from exactfuse.ops.gelu_and_mul_sparse import heuristics as sh
from exactfuse.ops.gelu_and_mul_sparse import triton as st

WIDTHS = (1, 31, 128, 500, 1024, 2048, 3000, 4096, 8192, 12288, 16384, 24576, 32768)
TOKENS = (1, 64, 1024)
WARPS = (1, 2, 4, 8, 16, 32)
WORKING_SET = 256 << 20


# the harness's timer: median of CUDA-graph replays, cyclic GC off during capture
TIMER = cudagraph_timer(rep_ms=20)


def _load(T: int, d: int) -> int:
    return sh.load_class(-(-T // sh.sparse_config(d)[0]), 132)


def candidate_warps(d: int) -> list[int]:
    """Warp counts that give each thread 4..128 elements of the program's BT x BD block."""
    bt, bd, _ = sh.sparse_config(d)
    return [w for w in WARPS if 4 <= bt * bd // (32 * w) <= 128] or [4]


def time_us(sets, plan: sh.SparsePlan) -> float:
    """Median µs per call of the launch with ``plan`` over the rotating input ``sets``."""

    def body():
        for x in sets:
            st.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh", plan=plan)

    body()  # compile outside the capture
    return TIMER(body) * 1e3 / len(sets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=WIDTHS)
    parser.add_argument("--tokens", type=int, nargs="+", default=TOKENS)
    opts = parser.parse_args()
    times: dict[tuple[int, int], dict[int, float]] = {}
    regs: dict[tuple[int, int], str] = {}
    for d in opts.widths:
        for T in opts.tokens:
            nbytes = T * d * 2 * 3
            k = max(1, min(32, WORKING_SET // nbytes))
            sets = [torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16) for _ in range(k)]
            row = times.setdefault((T, d), {})
            for w in candidate_warps(d):
                before = resources.snapshot([st.gelu_and_mul_sparse_kernel])
                plan = dataclasses.replace(sh.default_plan("whole", T, d, 132), num_warps=w)
                row[w] = time_us(sets, plan)
                for res in resources.new_specializations(before, resources.snapshot([st.gelu_and_mul_sparse_kernel])):
                    regs[(sh.sparse_config(d)[1], w)] = f"{res.n_regs} regs/{res.n_spills} spills"
    print(f"{'T':>5} {'d':>6} {'best w':>6} {'us':>8} {'shipped w':>9} {'us':>8} {'x':>6} {'GB/s best':>9}")
    for (T, d), row in times.items():
        best = min(row, key=row.get)
        shipped = sh.sparse_config(d, T)[2]
        ours = row.get(shipped, float("nan"))
        print(
            f"{T:>5} {d:>6} {best:>6} {row[best]:8.2f} {shipped:>9} {ours:8.2f} {ours / row[best]:6.3f} "
            f"{T * d * 6 / row[best] / 1e3:9.0f}"
        )
    print("\nper BD bucket and load (0 few, 1 mid, 2 many programs per SM): geomean slowdown vs per-shape best")
    suggested, loss = {}, []
    for bd in sorted({sh.sparse_config(d)[1] for d in opts.widths}):
        for load in range(3):
            shapes = [r for (T, d), r in times.items() if sh.sparse_config(d)[1] == bd and _load(T, d) == load]
            if not shapes:
                continue
            common = set.intersection(*(set(r) for r in shapes))
            scores = {w: geomean(r[w] / min(r.values()) for r in shapes) for w in common}
            suggested[(max(bd, 1024), load)] = min(scores, key=scores.get)
            loss.extend(r[sh.WARPS_BY_BD[max(bd, 1024)][load]] / min(r.values()) for r in shapes)
            cells = "  ".join(f"w{w}: {s:.3f} ({regs.get((bd, w), '?')})" for w, s in sorted(scores.items()))
            print(f"  BD {bd:>5} load {load}: {cells}")
    print(f"\nsuggested (BD, load): warps = {dict(sorted(suggested.items()))}")
    print(f"shipped   WARPS_BY_BD = {sh.WARPS_BY_BD}")
    if loss:
        print(f"shipped table vs per-shape best: geomean {geomean(loss):.3f}x, worst {max(loss):.3f}x")
    out = out_dir()
    if out:
        with open(os.path.join(out, "sweep_sparse_warps.txt"), "w") as f:
            for (T, d), row in times.items():
                for w, us in sorted(row.items(), key=lambda kv: kv[1]):
                    f.write(f"T={T} d={d} warps={w} {us:.3f}us {regs.get((sh.sparse_config(d)[1], w), '')}\n")


if __name__ == "__main__":
    main()
