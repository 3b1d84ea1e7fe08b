"""Where does ``causal_conv1d_fn_backward``'s time go? Per-kernel GPU time of the Triton launcher
(``triton.launch_conv_grad``: the row kernel, the dx kernel, the partial-sum reductions) at several row
kernel tiles, beside the forward op and FLA's backward on the same inputs.

Each configuration (the shipped one with the row kernel's tile replaced, ``--tiles BTxBCxWARPSxSTEPS,...``,
or the dx kernel's, ``--x-tiles BTxBCxWARPS,...``) is checked first against the op's contract (native spec,
float64 reference), then timed (the harness's CUDA-graph timer) and profiled (``torch.profiler``, mean per
kernel over 5 calls).

    PYTHONPATH=src python3 scripts/gpu/probe_conv_backward.py [--shape B,L] [--tiles ...] [--x-tiles ...]

Result: benchmarks/results/h200/sweeps/conv_backward_probe.txt.
"""

import argparse
import dataclasses

import torch
from sweep_io import emit

from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.conv import causal_conv1d_fn, causal_conv1d_fn_backward, heuristics, inputs, triton
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
    tiles = "16x128x4x16,16x128x4x4,32x64x4x8,64x64x4x4,64x32x4x4,32x128x8x8,16x64x2x16,8x128x2x16"
    parser.add_argument("--tiles", default=tiles, help="row kernel tiles BTxBCxWARPSxSTEPS")
    parser.add_argument("--x-tiles", default="32x128x4,64x128x8,128x64x8,16x256x4", help="dx tiles BTxBCxWARPS")
    args = parser.parse_args()
    B, L = (int(v) for v in args.shape.split(","))
    C, K = 10240, 4
    case = inputs.fn_case(f"B{B}-L{L}-C{C}-K{K}", (L,) * B, grad=True, C=C, K=K, D=1, dtype=torch.bfloat16,
                          device=torch.device("cuda"), gen=make_generator(0))  # fmt: skip
    op = causal_conv1d_fn_backward
    contracts = op.contract_for(torch.bfloat16, "cuda").for_outputs(4)
    want = op.native(*case.args)
    shipped = heuristics.conv_grad_config(C)
    lines = [f"causal_conv1d_fn_backward bf16 B{B} L{L} C{C} K{K} SiLU, bias; shipped {shipped}", ""]
    rows = [
        dict(BT=a, BC=b, num_warps=c, steps=d) for a, b, c, d in (map(int, t.split("x")) for t in args.tiles.split(","))
    ]
    xs = [dict(DX_BT=a, DX_BC=b, dx_warps=c) for a, b, c in (map(int, t.split("x")) for t in args.x_tiles.split(","))]
    configs = [dataclasses.replace(shipped, **r) for r in rows] + [dataclasses.replace(shipped, **x) for x in xs]
    for cfg in configs:

        def call(cfg=cfg):
            return triton.launch_conv_grad(*case.args, config=cfg)

        results = [c.check(g, w, args=case.args, kwargs={}) for c, g, w in zip(contracts, call(), want, strict=True)]
        ok = all(r.passed for r in results)
        us = TIMER(call) * 1e3 if ok else float("nan")
        label = f"rows {cfg.BT}x{cfg.BC}x{cfg.num_warps}x{cfg.steps} dx {cfg.DX_BT}x{cfg.DX_BC}x{cfg.dx_warps}"
        lines.append(f"{label}: {us:9.1f} us  contract {'holds' if ok else 'FAILS'}")
        for name, t in kernel_times(call):
            lines.append(f"    {t:9.1f} us  {name}")
    lines.append("")
    fwd = lambda: causal_conv1d_fn(*case.args[1:7])  # noqa: E731
    lines.append(f"forward causal_conv1d_fn: {TIMER(fwd) * 1e3:9.1f} us")
    try:
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
