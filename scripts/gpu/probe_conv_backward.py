"""Where does ``causal_conv1d_fn_backward``'s time go? Per-kernel GPU time of the Triton launcher
(``triton.launch_conv_grad``: the row kernel, the dx kernel, the partial-sum reductions) at several row
kernel tiles, beside the forward op and FLA's backward on the same inputs.

For each tile (``--tiles BTxBCxWARPS,...``) the launcher's outputs are checked first: ``dx`` bitwise against
the shipped tile's (the dx kernel's sum order does not depend on the tile), the weight and bias gradients
within 1e-5 relative of it (their tile sums are reordered); then timed (the harness's CUDA-graph timer) and
profiled (``torch.profiler``, mean per kernel over 5 calls).

    PYTHONPATH=src python3 scripts/gpu/probe_conv_backward.py [--shape B,L] [--tiles 16x128x4,...]

Result: benchmarks/results/h200/sweeps/conv_backward_probe.txt.
"""

import argparse
import dataclasses

import torch
from sweep_io import emit

from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.conv import heuristics, inputs, triton
from exactfuse.testing.inputs import make_generator

TIMER = cudagraph_timer(rep_ms=50)


def kernel_times(call, n: int = 5) -> list[tuple[str, float]]:
    """Mean GPU µs per call of each kernel ``call`` launches."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            call()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if total > 0:
            rows.append((e.key[:70], total / n))
    return sorted(rows, key=lambda r: -r[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="1,8192")
    parser.add_argument("--tiles", default="16x128x4,32x128x4,64x128x8,16x256x4,32x64x4,64x64x4,8x256x4")
    args = parser.parse_args()
    B, L = (int(v) for v in args.shape.split(","))
    C, K = 10240, 4
    case = inputs.fn_case(f"B{B}-L{L}-C{C}-K{K}", (L,) * B, grad=True, C=C, K=K, D=1, dtype=torch.bfloat16,
                          device=torch.device("cuda"), gen=make_generator(0))  # fmt: skip
    grad, x, w, b, act, D, qsl, seq_idx, init = case.args
    shipped = heuristics.conv_config(C, (K - 1) * D, "prefill")
    lines = [f"causal_conv1d_fn_backward bf16 B{B} L{L} C{C} K{K} SiLU, bias; shipped tile {shipped}", ""]
    want = triton.launch_conv_grad(grad, x, w, b, act, D, qsl, seq_idx, init, config=shipped)
    for tile in args.tiles.split(","):
        BT, BC, warps = (int(v) for v in tile.split("x"))
        cfg = dataclasses.replace(shipped, BT=BT, BC=BC, num_warps=warps)

        def call(cfg=cfg):
            return triton.launch_conv_grad(grad, x, w, b, act, D, qsl, seq_idx, init, config=cfg)

        got = call()
        same_dx = torch.equal(got[0], want[0])
        rel = max(float(((g.float() - r.float()).abs().max() / r.float().abs().max()).item()) for g, r in
                  zip(got[1:3], want[1:3], strict=True))  # fmt: skip
        ok = same_dx and rel <= 1e-5
        us = TIMER(call) * 1e3 if ok else float("nan")
        lines.append(f"tile {tile:>10}: {us:9.1f} us  dx bitwise={same_dx} dw/db rel={rel:.1e}")
        for name, t in kernel_times(call):
            lines.append(f"    {t:9.1f} us  {name}")
    from exactfuse.ops.conv import causal_conv1d_fn

    lines.append("")
    fwd = lambda: causal_conv1d_fn(x, w, b, act, D, qsl)  # noqa: E731
    lines.append(f"forward causal_conv1d_fn: {TIMER(fwd) * 1e3:9.1f} us")
    try:
        from exactfuse.bench.peers import on_capture_stream  # noqa: F401
        from exactfuse.ops.conv.peers import _fla_backward

        fla = _fla_backward(case.args, {})
        lines.append(f"FLA backward: {TIMER(fla) * 1e3:9.1f} us")
        for name, t in kernel_times(fla):
            lines.append(f"    {t:9.1f} us  {name}")
    except ImportError as e:
        lines.append(f"FLA backward: not importable ({e})")
    emit("conv_backward_probe.txt", lines)


if __name__ == "__main__":
    main()
