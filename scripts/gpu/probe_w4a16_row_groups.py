"""W4A16 with a group per row (row shards of act-order layers) on the GPU: the dequantize path, the
tl.dot tile with its per-row scale gather, and the same-shaped weight with uniform groups.

Usage: PYTHONPATH=src python3 scripts/gpu/probe_w4a16_row_groups.py [M ...]

Shapes: the two row-parallel projections of a Llama-8B-sized layer sharded two ways, ``down_proj``
(K = 7168 of 14336, N = 4096) and ``o_proj`` (K = 2048 of 4096, N = 4096), bf16, asymmetric, the
groups of a group-128 act-order layer (``group_index`` random over 112 and 32 scale rows). Per M:
``dense`` (the rule today: dequantize, then cuBLAS), ``fused`` (the tl.dot bucket for M, the decode
tile up to M = 16, forced), ``uniform`` (a group-128 weight of the same shape, the heuristic's path:
what a shard of a layer without act-order takes) and ``cublas`` (the dense bf16 weight). Weights
rotate past the L2; each path's output passes the op's contract first; median of CUDA-graph replays.
Result: benchmarks/results/h200/sweeps/w4a16_row_groups.txt.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit
from sweep_w4a16_tiles import bench_rotating, device_info, rotating_weights

from exactfuse.ops.w4a16 import CONTRACT, native
from exactfuse.ops.w4a16 import triton as w4
from exactfuse.ops.w4a16.heuristics import bucket_config, dense_config, fused_config
from exactfuse.testing import make_generator
from exactfuse.testing.cases.w4a16 import row_group_case

SHAPES = ((7168, 4096, 112), (2048, 4096, 32))  # (K, N, scale rows)
MS = (1, 4, 16, 32, 64, 128)


def row_group_weights(K: int, N: int, groups: int, copies: int) -> list[tuple]:
    """``copies`` weights with a group per row: (qweight, scales, zeros, group_index) on the GPU."""
    out = []
    for i in range(copies):
        case = row_group_case("w", 1, K, N, groups, torch.bfloat16, "cuda", make_generator(i), symmetric=False)
        _, qweight, scales, zeros, *_, group_index = case.args
        out.append((qweight, scales, zeros, group_index))
    return out


def shape_lines(K: int, N: int, groups: int, ms: tuple[int, ...], sms: int, dev) -> list[str]:
    """One line per M for a (K, N) shard, each path checked against native first."""
    uniform, dense_bf16, copies = rotating_weights(K, N, torch.bfloat16, dev)
    rows = row_group_weights(K, N, groups, copies)
    lines = []
    for M in ms:
        a = torch.randn((M, K), dtype=torch.bfloat16, device=dev)
        fused = bucket_config("decode", M, N, K, sms) if M <= 16 else fused_config(M, N, K, sms)
        times = {}
        for name, cfg in (("dense", dense_config()), ("fused", fused)):
            q, s, z, gi = rows[0]
            args = (a, q, s, z, None, None, 128, True, gi)
            check = CONTRACT.check(w4.launch_w4a16_gemm(*args, config=cfg), native.w4a16_gemm(*args), args=args)
            assert check.passed, f"K{K} M{M} {name}: {check.summary()}"

            def call(i, a=a, cfg=cfg):
                q, s, z, gi = rows[i]
                return w4.launch_w4a16_gemm(a, q, s, z, None, None, 128, True, gi, config=cfg)

            times[name] = bench_rotating(call, copies)
        u = uniform[0]
        u_args = (a, u.qweight, u.scales, u.zeros, u.perm, None, u.group_size)
        assert CONTRACT.check(w4.launch_w4a16_gemm(*u_args), native.w4a16_gemm(*u_args), args=u_args).passed
        path = w4.select_config(M, N, K, 128, sms).name
        times["uniform"] = bench_rotating(
            lambda i, a=a: w4.launch_w4a16_gemm(a, uniform[i].qweight, uniform[i].scales, None, None, None, 128),
            copies,
        )
        times["cublas"] = bench_rotating(lambda i, a=a: torch.matmul(a, dense_bf16[i]), copies)
        lines.append(
            f"{K} | {N} | {M} | {times['dense']:.1f} | {times['fused']:.1f} ({fused.name}) | "
            f"{times['uniform']:.1f} ({path}) | {times['cublas']:.1f} | {times['dense'] / times['fused']:.2f}"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ms = tuple(int(m) for m in sys.argv[1:]) or MS
    dev, sms, _ = device_info()
    lines = [f"{torch.cuda.get_device_name()}; µs per call, median of CUDA-graph replays, weights rotated past the L2"]
    lines.append("K | N | M | dense | fused (tile) | uniform (path) | cublas | dense / fused")
    for K, N, groups in SHAPES:
        lines += shape_lines(K, N, groups, ms, sms, dev)
        torch.cuda.empty_cache()
    emit("w4a16_row_groups.txt", lines)


if __name__ == "__main__":
    main()
