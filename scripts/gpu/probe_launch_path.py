"""Cost of ``torch.library.wrap_triton``'s higher-order-op dispatch on eager launches.

Providers launch their kernels through ``wrap_triton`` so that torch.compile can trace them. Called on
plain tensors outside ``torch.ops`` with ``wrap_triton`` enabled, every launch goes through the
higher-order op; ``triton_op`` itself skips it on plain tensors, and so does the registry's eager
dispatch (``registry.op.direct_triton_launches``). This times, side by side
in one process, bf16, for silu_and_mul (T = 1, d = 4096) and w4a16_gemm (M = 1, 4096 x 4096), the
provider with the higher-order op (``hop``) and launching directly (``direct``):

- host µs per call: 2000 eager calls back to back, one synchronize at the end (these kernels take
  less than the host, so this is the host's time per call);
- GPU µs per call: the harness's CUDA-graph timer (launch overhead out of it).

Then the host time of the whole eager op call (``op``: validation, provider choice, direct launch).

Both variants' outputs are checked bitwise equal before timing.

``--profile``: instead, cProfile of the whole eager op call (CALLS calls of each op), the functions
with the most own time and their call counts: where the op call's host time goes on this machine.

    PYTHONPATH=src python3 scripts/gpu/probe_launch_path.py      # about 20 s on an H200
    PYTHONPATH=src python3 scripts/gpu/probe_launch_path.py --profile

Results: benchmarks/results/h200/sweeps/eager_launch_hop_vs_direct.txt, eager_launch_op_call.txt,
eager_launch_profile.txt (``--profile``).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

import torch
from torch._library.triton import set_wrap_triton_enabled

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit

from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.act_and_mul import silu_and_mul
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.testing.cases.w4a16 import _random_prepared

CALLS = 2000
TIMER = cudagraph_timer(rep_ms=20)


def host_us(fn) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def profile(ops: dict) -> list[str]:
    """cProfile of CALLS eager calls of each op (after a warm-up): the 25 functions with the most own time."""
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {CALLS} calls each"]
    for name, fn in ops.items():
        host_us(fn)  # warm-up and the unprofiled host time
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(CALLS):
            fn()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        lines += [f"== {name}: op call {host_us(fn):.2f} µs unprofiled", text.getvalue()]
    return lines


def main() -> None:
    dev = torch.device("cuda")
    x = torch.randn(1, 2 * 4096, device=dev, dtype=torch.bfloat16)
    w = _random_prepared(4096, 4096, torch.bfloat16, dev)
    a = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    cases = {
        "silu_and_mul T1-d4096": lambda: silu_and_mul.providers["triton"].fn(x),
        "w4a16_gemm M1-4096x4096": lambda: w4a16_gemm.providers["triton"].fn(
            a, w.qweight, w.scales, None, None, None, 128
        ),
    }
    ops = {
        "silu_and_mul T1-d4096": lambda: silu_and_mul(x),
        "w4a16_gemm M1-4096x4096": lambda: w4a16_gemm(a, w.qweight, w.scales, None, None, None, 128),
    }
    if "--profile" in sys.argv:
        emit("probe_launch_path_profile.txt", profile(ops))
        return
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}",
        f"{'case':26} {'path':7} {'host µs':>8} {'GPU µs':>7}",
    ]
    for name, fn in cases.items():
        outs = {}
        for path, enabled in (("hop", True), ("direct", False)):
            with set_wrap_triton_enabled(enabled):
                outs[path] = fn()
                host = host_us(fn)
                gpu = TIMER(fn) * 1e3
            lines.append(f"{name:26} {path:7} {host:8.2f} {gpu:7.2f}")
            print(lines[-1], flush=True)
        assert torch.equal(outs["hop"], outs["direct"]), name
    # the whole eager op call (validation, provider choice, direct launch), host time only
    for name, fn in ops.items():
        lines.append(f"{name:26} {'op':7} {host_us(fn):8.2f} {'':>7}")
        print(lines[-1], flush=True)
    emit("probe_launch_path.txt", lines)


if __name__ == "__main__":
    main()
