"""How close can gelu_and_mul_sparse get to the roofline at T >= 1024? Against one-pass kernels that move
the same bytes.

For each shape of the sparse grid at T >= 1024 (bf16, inputs rotated past the L2, the harness's
CUDA-graph timer), side by side: the shipped sparse launch, exactfuse's ``gelu_and_mul`` (one pass:
reads ``[T, 2d]``, writes ``[T, d]``, no row statistics), and ``torch.add`` of the gate and up
halves into ``[T, d]`` (the same minimum traffic, PyTorch's elementwise kernel). Prints µs and % of
the copy-bandwidth roofline for each (a one-pass kernel can pass 100%: the copy that sets the
ceiling writes as much as it reads). ``--keep-gate``: also the looped kernel with its L2 eviction
hints (``KEEP_GATE``) forced on, on the shapes that run it, its output first checked bitwise equal
to the shipped launch's (session 5 ran it before the launcher used the hints:
sweeps/probe_sparse_keep_gate_s5g.txt).

Session 5 (benchmarks/results/h200/sweeps/probe_sparse_ceiling_s5e.txt) also timed a looped kernel
that reads the gate twice instead of three times (each chunk's sum and squared deviations from one
read, combined by Chan's rule) against the shipped one, side by side: 1.13-1.22x slower on all 8
looped shapes, so it was not kept.

    PYTHONPATH=src python3 scripts/gpu/probe_sparse_ceiling.py      # about 30 s on an H200
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit

from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.activation import sparse_heuristics as sh
from exactfuse.ops.activation import sparse_triton as st
from exactfuse.ops.activation.sparse import STD_MULTIPLIER
from exactfuse.ops.activation.triton import launch_act_and_mul

SHAPES = [(T, d) for T in (1024, 2048) for d in (2048, 4096, 8192, 12288, 16384, 32768)]
TIMER = cudagraph_timer(rep_ms=20)
WORKING_SET = 256 << 20


def looped_keep_gate(x, y):
    """The looped kernel with ``KEEP_GATE``, launched as the launcher launches it (tanh GELU)."""
    T, D = y.shape
    st.gelu_and_mul_sparse_looped_kernel[(T,)](
        x, y, T, D, x.stride(0), D, STD_MULTIPLIER, ACTIVATION=st.GELU_TANH, ROUND=st.ROUND_ALL,
        BC=sh.LOOP_CHUNK, INT64_INDEX=False, KEEP_GATE=True, num_warps=sh.LOOP_WARPS,
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
        if sh.choose_kernel(T, d, 132)[0] != "looped":
            run.pop("keep-gate", None)
        elif "keep-gate" in run:  # the same kernel and math with cache hints: bitwise equal
            assert torch.equal(run["sparse"](x[0], None), looped_keep_gate(x[0], torch.empty_like(sets[0][1])))
        t = {name: time_us(fn, sets) for name, fn in run.items()}
        lines.append(f"{T:>5} {d:>6}" + "".join(f" {t[n]:17.2f} {100 * roof / t[n]:5.1f}" for n in run))
    emit("probe_sparse_ceiling.txt", lines)


if __name__ == "__main__":
    main()
