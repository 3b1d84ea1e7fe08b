"""How close can gelu_and_mul_sparse get to the roofline at T >= 1024? Against one-pass kernels that move
the same bytes.

For each shape of the sparse grid at T >= 1024 (bf16, inputs rotated past the L2, the harness's
CUDA-graph timer), side by side: the shipped sparse launch, exactfuse's ``gelu_and_mul`` (one pass:
reads ``[T, 2d]``, writes ``[T, d]``, no row statistics), and ``torch.add`` of the gate and up
halves into ``[T, d]`` (the same minimum traffic, PyTorch's elementwise kernel). With
``--looped3``, also session 4's looped kernel (``looped3``: the gate read three times, sum, squared
deviations, output; since replaced by two reads) on the shapes that run the looped kernel, each
output first checked bitwise against the shipped one. Prints µs and % of the copy-bandwidth
roofline for each.

    PYTHONPATH=src python3 scripts/gpu/probe_sparse_ceiling.py      # about 30 s on an H200
"""

import os
import sys

import torch
import triton
import triton.language as tl

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


@triton.jit(do_not_specialize=["T"])
def looped3_kernel(p_x, p_y, T, D, stride_x, stride_y, std_multiplier, BC: tl.constexpr):
    """Session 4's looped kernel (tanh GELU, every rounding boundary): per-lane sums over the chunks, a
    second read for the squared deviations, a third with ``up`` for the output."""
    DT: tl.constexpr = p_y.dtype.element_ty
    p_g = p_x + tl.program_id(0) * stride_x
    o_c = tl.arange(0, BC)
    acc = tl.zeros((BC,), dtype=tl.float32)
    for c0 in range(0, D, BC):
        acc += tl.load(p_g + c0 + o_c, mask=c0 + o_c < D, other=0.0).to(tl.float32)
    b_mean = tl.sum(acc, axis=0) * st._mean_factor(T, D)
    acc = tl.zeros((BC,), dtype=tl.float32)
    for c0 in range(0, D, BC):
        m_c = c0 + o_c < D
        b_dx = tl.where(m_c, tl.load(p_g + c0 + o_c, mask=m_c, other=0.0).to(tl.float32) - b_mean, 0.0)
        acc += b_dx * b_dx
    b_cut = st._cutoff(b_mean, tl.sum(acc, axis=0), D, std_multiplier, DT, st.ROUND_ALL)
    for c0 in range(0, D, BC):
        m_c = c0 + o_c < D
        b_g = tl.load(p_g + c0 + o_c, mask=m_c, other=0.0).to(tl.float32)
        b_u = tl.load(p_g + D + c0 + o_c, mask=m_c, other=0.0)
        b_y = st._gate_up(b_g, b_u, b_cut, st.GELU_TANH, DT, st.ROUND_ALL)
        tl.store(p_y + tl.program_id(0) * stride_y + c0 + o_c, b_y, mask=m_c)


def looped3(x, y):
    T, D = y.shape
    looped3_kernel[(T,)](x, y, T, D, x.stride(0), D, STD_MULTIPLIER, BC=sh.LOOP_CHUNK, num_warps=sh.LOOP_WARPS)
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
    if "--looped3" in sys.argv:
        variants["looped3"] = looped3
    lines.append(f"{'T':>5} {'d':>6}" + "".join(f" {name + ' µs':>17} {'%':>5}" for name in variants))
    for T, d in SHAPES:
        k = max(1, min(32, WORKING_SET // (T * d * 6)))
        x = [torch.randn(T, 2 * d, device=dev, dtype=torch.bfloat16) for _ in range(k)]
        sets = [(xi, torch.empty(T, d, device=dev, dtype=torch.bfloat16)) for xi in x]
        roof = T * d * 6 / bw * 1e6
        shapes_variants = dict(variants)
        if sh.choose_kernel(T, d, torch.cuda.get_device_properties(dev).multi_processor_count)[0] != "looped":
            shapes_variants.pop("looped3", None)
        elif "looped3" in variants:  # the same op: most rows bitwise equal (the sums run in another order)
            ours, old = variants["sparse"](x[0], None), looped3(x[0], torch.empty_like(sets[0][1]))
            lines.append(f"  looped3 vs shipped at T{T}-d{d}: {(ours != old).any(1).sum().item()} of {T} rows differ")
        t = {name: time_us(fn, sets) for name, fn in shapes_variants.items()}
        lines.append(f"{T:>5} {d:>6}" + "".join(f" {t[n]:17.2f} {100 * roof / t[n]:5.1f}" for n in shapes_variants))
    emit("probe_sparse_ceiling.txt", lines)


if __name__ == "__main__":
    main()
