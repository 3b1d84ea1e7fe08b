"""How close can gelu_and_mul_sparse get to the roofline at T >= 1024? Against one-pass kernels that move
the same bytes.

For each shape of the sparse grid at T >= 1024 (bf16, inputs rotated past the L2, the harness's
CUDA-graph timer), side by side: the shipped sparse launch, exactfuse's ``gelu_and_mul`` (one pass:
reads ``[T, 2d]``, writes ``[T, d]``, no row statistics), and ``torch.add`` of the gate and up
halves into ``[T, d]`` (the same minimum traffic, PyTorch's elementwise kernel). Prints µs and % of
the copy-bandwidth roofline for each (a one-pass kernel can pass 100%: the copy that sets the
ceiling writes as much as it reads). ``--keep-gate``: also the looped kernel with its L2 eviction
hints (``KEEP_GATE``) forced on, on the shapes that run it, its output first checked bitwise equal
to the shipped launch's.

Results (benchmarks/results/h200/sweeps/): sparse_ceiling.txt; sparse_looped_keep_gate.txt
(``--keep-gate``, run while the launcher did not use the hints yet, so its "sparse" column is the
looped kernel without them); sparse_looped_two_reads.txt (a looped kernel reading the gate twice, no
longer in the tree, beside the shipped three-read kernel in the "looped3" column).

    PYTHONPATH=src python3 scripts/gpu/probe_sparse_ceiling.py      # about 30 s on an H200
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit

from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.act_and_mul.triton import launch_act_and_mul
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER
from exactfuse.ops.gelu_and_mul_sparse import heuristics as sh
from exactfuse.ops.gelu_and_mul_sparse import triton as st

SHAPES = [(T, d) for T in (1024, 2048) for d in (2048, 4096, 8192, 12288, 16384, 32768)]
TIMER = cudagraph_timer(rep_ms=20)
WORKING_SET = 256 << 20


def looped_keep_gate(x, y):
    """The looped kernel with ``KEEP_GATE``, launched as the launcher launches it (tanh GELU)."""
    T, D = y.shape
    plan = sh.default_plan("looped", T, D, 132)
    st.gelu_and_mul_sparse_looped_kernel[(T,)](
        x, y, T, D, x.stride(0), D, STD_MULTIPLIER, ACTIVATION=st.GELU_TANH, ROUND=plan.round_mask,
        BC=plan.block, INT64_INDEX=False, KEEP_GATE=True, num_warps=plan.num_warps,
    )  # fmt: skip
    return y


def time_us(fn, sets) -> float:
    def body():
        for x, y in sets:
            fn(x, y)

    body()  # compile outside the capture
    return TIMER(body) * 1e3 / len(sets)


def main() -> None:
    dev = torch.device("cuda")
    bw = measure_copy_bandwidth(dev)
    lines = [f"copy bandwidth {bw / 1e12:.2f} TB/s; % of roofline = 6 T d bytes / bandwidth / time"]
    variants = {
        "sparse": lambda x, y: st.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, "tanh"),
        "gelu_and_mul": lambda x, y: launch_act_and_mul(x, "gelu_tanh"),
        # the same minimum traffic: read x's gate and up halves, write one [T, d] result
        "add": lambda x, y: torch.add(x[:, : y.shape[1]], x[:, y.shape[1] :], out=y),
    }
    if "--keep-gate" in sys.argv:
        variants["keep-gate"] = looped_keep_gate
    lines.append(f"{'T':>5} {'d':>6}" + "".join(f" {name + ' µs':>17} {'%':>5}" for name in variants))
    for T, d in SHAPES:
        k = max(1, min(32, WORKING_SET // (T * d * 6)))
        x = [torch.randn(T, 2 * d, device=dev, dtype=torch.bfloat16) for _ in range(k)]
        sets = [(xi, torch.empty(T, d, device=dev, dtype=torch.bfloat16)) for xi in x]
        roof = T * d * 6 / bw * 1e6
        run = dict(variants)
        if sh.choose_plan(T, d, 132).kernel != "looped":
            run.pop("keep-gate", None)
        elif "keep-gate" in run:  # the same kernel and math with cache hints: bitwise equal
            assert torch.equal(run["sparse"](x[0], None), looped_keep_gate(x[0], torch.empty_like(sets[0][1])))
        t = {name: time_us(fn, sets) for name, fn in run.items()}
        lines.append(f"{T:>5} {d:>6}" + "".join(f" {t[n]:17.2f} {100 * roof / t[n]:5.1f}" for n in run))
    emit("probe_sparse_ceiling.txt", lines)


if __name__ == "__main__":
    main()
