"""Does the order of programs matter to the gated activations at large T? Shipped grid against a flat,
column-fastest one, beside torch.compile.

The shipped launch is a 2-D grid ``(row blocks, column blocks)`` whose first axis varies fastest, so
consecutive programs read tiles of different rows, ``2d`` elements apart. Inductor's pointwise kernel
walks the output in order: consecutive programs read adjacent memory. ``flat`` is the shipped tile
and math on a 1-D grid with the column block fastest (``pid -> (pid // n_d, pid % n_d)``). Both are
checked bit for bit against eager first; ``inductor`` within a bf16 rounding. Times: the harness's
CUDA-graph timer, inputs rotated past the L2, bf16, silu and gelu.

    PYTHONPATH=src python3 scripts/gpu/probe_act_grid_order.py

Result: benchmarks/results/h200/sweeps/act_and_mul_grid_order.txt.
"""

import torch
import triton
import triton.language as tl
from probe_small_t_gap import time_us  # the same timer, per call over rotated inputs
from sweep_io import emit

from exactfuse.bench.results import geomean
from exactfuse.bench.timing import recompile_limits
from exactfuse.ops.act_and_mul import gelu_and_mul, native, silu_and_mul
from exactfuse.ops.act_and_mul.heuristics import act_and_mul_config
from exactfuse.ops.act_and_mul.triton import ACTIVATIONS
from exactfuse.ops.math import activation

SHAPES = [(256, 14336), (4096, 768), (4096, 4096), (4096, 14336), (32768, 768), (32768, 4096), (32768, 14336)]
COPIES = 4


@triton.jit
def flat_kernel(p_x, p_y, T, D, stride_x, ACTIVATION: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0)
    n_d = tl.cdiv(D, BD)
    o_t = (pid // n_d) * BT + tl.arange(0, BT)
    o_d = (pid % n_d) * BD + tl.arange(0, BD)
    m = (o_t[:, None] < T) & (o_d[None, :] < D)
    p_g = p_x + o_t[:, None] * stride_x + o_d[None, :]
    b_g = tl.load(p_g, mask=m).to(tl.float32)
    b_u = tl.load(p_g + D, mask=m).to(tl.float32)
    b_a = activation(b_g, ACTIVATION).to(p_y.dtype.element_ty).to(tl.float32)
    tl.store(p_y + o_t[:, None] * D + o_d[None, :], (b_a * b_u).to(p_y.dtype.element_ty), mask=m)


def flat(x, activation):
    T, D = x.shape[0], x.shape[1] // 2
    y = torch.empty((T, D), dtype=x.dtype, device=x.device)
    BT, BD, warps = act_and_mul_config(D, T)
    grid = (triton.cdiv(T, BT) * triton.cdiv(D, BD),)
    flat_kernel[grid](x, y, T, D, x.stride(0), ACTIVATION=ACTIVATIONS[activation], BT=BT, BD=BD, num_warps=warps)
    return y


def main() -> None:
    ops = {
        "silu": (silu_and_mul, native.silu_and_mul, "silu"),
        "gelu": (gelu_and_mul, native.gelu_and_mul, "gelu_none"),
    }
    lines = [f"{torch.cuda.get_device_name()}; µs, median of CUDA-graph replays; ratio = shipped / flat"]
    lines.append("op | T | d | shipped | flat | inductor | shipped / flat | inductor / flat")
    print(lines[-1], flush=True)
    ratios = []
    with recompile_limits():
        for name, (op, spec, activation) in ops.items():
            compiled = torch.compile(spec, dynamic=False)
            for T, d in SHAPES:
                xs = [torch.randn(T, 2 * d, device="cuda", dtype=torch.bfloat16) for _ in range(COPIES)]
                expected = spec(xs[0])
                assert torch.equal(op(xs[0]), expected) and torch.equal(flat(xs[0], activation), expected), (name, T, d)
                torch.testing.assert_close(compiled(xs[0]), expected, rtol=1.6e-2, atol=1e-5)
                t = [time_us(fn, xs) for fn in (op, lambda x, a=activation: flat(x, a), compiled)]
                ratios.append(t[0] / t[1])
                lines.append(f"{name} | {T} | {d} | {t[0]:.2f} | {t[1]:.2f} | {t[2]:.2f} | {t[0] / t[1]:.3f} | "
                             f"{t[2] / t[1]:.3f}")  # fmt: skip
                print(lines[-1], flush=True)
                del xs
    lines.append(f"shipped / flat: geomean {geomean(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    emit("act_and_mul_grid_order.txt", lines)


if __name__ == "__main__":
    main()
