"""gelu_and_mul_sparse on the GPU: load ``up`` with the gate (``early_up``) or after the statistics, x num_warps.

The session-3 benchmark reached only 48-63% of the copy roofline at T = 1024
(one row per program, 2 programs of 32 warps per SM at d >= 8192): the gate's
load, the two reductions and then ``up``'s load run one after the other. This
times both load orders at 8/16/32 warps (where each thread gets 4..128
elements) for the benchmark's widths and T in {1, 64, 256, 1024, 2048}, checks
that both orders give the same bits, and prints per shape the best and the
shipped configuration, then the geomean of each rule over the shapes.

    PYTHONPATH=src python3 scripts/gpu/sweep_sparse_load_order.py     # about 2 minutes on an H200
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_sparse_warps import WORKING_SET, candidate_warps, geomean, time_us

from exactfuse.bench import resources
from exactfuse.ops.activation import sparse_triton as st
from exactfuse.ops.activation.sparse import STD_MULTIPLIER

WIDTHS = (2048, 4096, 8192, 12288, 16384, 32768)
TOKENS = (1, 64, 256, 1024, 2048)
WARPS = (8, 16, 32)


def main() -> None:
    times: dict[tuple[int, int], dict[tuple[bool, int], float]] = {}
    regs: dict[tuple[int, bool, int], str] = {}
    for d in WIDTHS:
        for T in TOKENS:
            k = max(1, min(32, WORKING_SET // (T * d * 6)))
            sets = [torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16) for _ in range(k)]
            ref = st.launch_gelu_and_mul_sparse(sets[0], STD_MULTIPLIER, "tanh")
            early = st.launch_gelu_and_mul_sparse(sets[0], STD_MULTIPLIER, "tanh", early_up=True)
            assert torch.equal(ref, early), (T, d)
            row = times.setdefault((T, d), {})
            for early_up in (False, True):
                for w in (w for w in candidate_warps(d) if w in WARPS):
                    before = resources.snapshot([st.gelu_and_mul_sparse_kernel])
                    row[(early_up, w)] = time_us(sets, d, w, early_up=early_up)
                    for res in resources.new_specializations(
                        before, resources.snapshot([st.gelu_and_mul_sparse_kernel])
                    ):
                        regs[(st.sparse_config(d)[1], early_up, w)] = f"{res.n_regs}r/{res.n_spills}s"
    lines = [f"{'T':>5} {'d':>6} {'best':>10} {'us':>8} {'GB/s':>6} {'shipped':>10} {'us':>8} {'x':>6}"]
    for (T, d), row in times.items():
        best = min(row, key=row.get)
        shipped = (False, st.sparse_config(d)[2])
        name = lambda c: f"{'E' if c[0] else 'L'}{c[1]}"  # noqa: E731  E: early up, L: late up
        lines.append(
            f"{T:>5} {d:>6} {name(best):>10} {row[best]:8.2f} {T * d * 6 / row[best] / 1e3:6.0f} "
            f"{name(shipped):>10} {row[shipped]:8.2f} {row[shipped] / row[best]:6.3f}"
        )
    for title, tokens in (("every T", TOKENS), ("T >= 256", [T for T in TOKENS if T >= 256])):
        lines.append(f"\nper d, {title}: geomean µs of each (order, warps); E = up loaded with the gate, L = after")
        for d in WIDTHS:
            rows = [times[(T, d)] for T in tokens]
            common = set.intersection(*(set(r) for r in rows))
            cells = []
            for e, w in sorted(common):
                res = regs.get((st.sparse_config(d)[1], e, w))
                cells.append(f"{'E' if e else 'L'}{w}={geomean(r[(e, w)] for r in rows):.2f} ({res})")
            lines.append(f"  d {d:>5}: " + "  ".join(cells))
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "sweep_sparse_load_order.txt"), "w") as f:
            f.write(text + "\n")
            for (T, d), row in times.items():
                for (e, w), us in sorted(row.items(), key=lambda kv: kv[1]):
                    f.write(f"T={T} d={d} early_up={e} warps={w} {us:.3f}us\n")


if __name__ == "__main__":
    main()
