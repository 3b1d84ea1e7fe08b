"""Experiment: a GEMV-style W4A16 decode kernel (no tl.dot, no reshape) against the shipped kernel.

The shipped decode path (exactfuse.ops.w4a16.triton) reached 24-36% of the
4-bit memory roofline at M <= 16 on the H200 (NOTES.md). This probe tests the
hypothesis that the nibble reshape into a tl.dot operand (and a 16-row MMA for
one row) is what costs: for each of the 8 nibble positions j it dequantizes a
``[BK/8, BN]`` slice and accumulates ``sum_r a[m, 8r + j] * w_j[r, :]`` in fp32
registers, loading packed words along N (contiguous), with split-K over a fp32
workspace reduced in fixed order by the library's reduce kernel.

Prints per (K, N, M): µs of the probe and of the shipped triton provider,
cuBLAS dense, % of roofline (bytes / copy bandwidth measured here), and the
relative Frobenius error of both against float64. It changes nothing in the
library; adopt it only if it wins.

    PYTHONPATH=src python3 scripts/gpu/probe_w4a16_gemv.py            # on the GPU
    TRITON_INTERPRET=1 PYTHONPATH=src python3 scripts/gpu/probe_w4a16_gemv.py --check  # CPU correctness only
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
import triton
import triton.language as tl

from exactfuse.ops.w4a16 import _random_prepared, dense_weight, w4a16_gemm
from exactfuse.ops.w4a16.triton import w4a16_splitk_reduce_kernel


@triton.jit
def gemv_kernel(
    p_a,
    p_qw,
    p_s,
    p_ws,
    M,
    N,
    K,
    K_PER_SPLIT,
    GROUP: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Partial ``[BM, BN]`` of ``a @ W`` over one K slice; symmetric weights (zero point 8).

    p_a ``[M, K]`` contiguous; p_qw ``[K/8, N]`` int32; p_s ``[K/GROUP, N]``; p_ws ``[S, M, N]`` fp32.
    BK <= GROUP so one K step has one scale row.
    """
    i_n = tl.program_id(0)
    i_s = tl.program_id(1)
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    o_m = tl.arange(0, BM)
    m_m = o_m < M
    o_r = tl.arange(0, BK // 8)
    DT = p_a.dtype.element_ty
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_start = i_s * K_PER_SPLIT
    for k0 in range(k_start, k_start + K_PER_SPLIT, BK):
        b_q = tl.load(p_qw + (k0 // 8 + o_r)[:, None] * N + o_n[None, :], mask=m_n[None, :], other=0)
        b_s = tl.load(p_s + (k0 // GROUP) * N + o_n, mask=m_n, other=0.0).to(tl.float32)
        for j in tl.static_range(8):
            b_w = ((((b_q >> (4 * j)) & 0xF) - 8).to(tl.float32) * b_s[None, :]).to(DT).to(tl.float32)
            b_a = tl.load(p_a + o_m[:, None] * K + (k0 + 8 * o_r + j)[None, :], mask=m_m[:, None], other=0.0)
            acc += tl.sum(b_a.to(tl.float32)[:, :, None] * b_w[None, :, :], axis=1)
    tl.store(p_ws + (i_s * M + o_m)[:, None] * N + o_n[None, :], acc, mask=m_m[:, None] & m_n[None, :])


def launch_gemv(a, qweight, scales, group, BN=128, BK=128, target_programs=264):
    M, K = a.shape
    N = qweight.shape[1]
    n_blocks = triton.cdiv(N, BN)
    steps = K // BK
    split = max(1, min(steps, target_programs // n_blocks))
    while steps % split:
        split -= 1
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device)
    gemv_kernel[(n_blocks, split)](
        a,
        qweight,
        scales,
        ws,
        M,
        N,
        K,
        K // split,
        GROUP=group,
        BM=triton.next_power_of_2(M),
        BN=BN,
        BK=BK,
        num_warps=4,
    )
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    w4a16_splitk_reduce_kernel[(triton.cdiv(M * N, 1024),)](ws, out, out, M, N, split, HAS_BIAS=False, BLOCK=1024)
    return out, split


def copy_bandwidth(device) -> float:
    """Bytes/s of a 2 GiB device-to-device copy (read + write), median."""
    src = torch.empty(2**31, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") * 1e3
    return 2 * src.numel() / us * 1e6


def time_us(fn) -> float:
    return triton.testing.do_bench_cudagraph(fn, rep=20) * 1e3


def rel_err(out, ref64):
    return float((out.double() - ref64).norm() / ref64.norm())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="small fp16 correctness check only (interpreter)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.check:
        torch.manual_seed(0)
        for M in (1, 3):
            w = _random_prepared(256, 64, torch.float16, device)
            a = torch.randn(M, 256, dtype=torch.float16, device=device)
            out, split = launch_gemv(a, w.qweight, w.scales, 128, BN=32, BK=64, target_programs=8)
            native = w4a16_gemm.native(a, *w[:4], None, 128)
            ref = a.double() @ dense_weight(w.qweight, w.scales, None, None, 128, torch.float16).double()
            print(f"M{M} split {split}: rel err {rel_err(out, ref):.2e}  native {rel_err(native, ref):.2e}")
        return
    bw = copy_bandwidth(device)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    print(
        f"{'K':>6} {'N':>6} {'M':>3} {'gemv µs':>8} {'split':>5} {'shipped µs':>10} {'cuBLAS µs':>9} "
        f"{'gemv %roof':>10} {'err gemv':>9} {'err shipped':>11}"
    )
    for K, N in ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672)):
        w = _random_prepared(K, N, torch.bfloat16, device)
        dense = dense_weight(w.qweight, w.scales, None, None, 128, torch.bfloat16)
        for M in (1, 2, 4, 8, 16):
            a = torch.randn(M, K, dtype=torch.bfloat16, device=device)
            ref = a.double() @ dense.double()
            out, split = launch_gemv(a, w.qweight, w.scales, 128)
            shipped = w4a16_gemm(a, *w[:4], None, 128)
            t_gemv = time_us(partial(launch_gemv, a, w.qweight, w.scales, 128))
            t_ship = time_us(partial(w4a16_gemm, a, *w[:4], None, 128))
            t_cub = time_us(partial(torch.matmul, a, dense))
            nbytes = K * N // 2 + w.scales.numel() * 2 + a.numel() * 2 + M * N * 2
            print(
                f"{K:>6} {N:>6} {M:>3} {t_gemv:8.2f} {split:>5} {t_ship:10.2f} {t_cub:9.2f} "
                f"{nbytes / bw / (t_gemv * 1e-6) * 100:9.1f}% {rel_err(out, ref):9.1e} {rel_err(shipped, ref):11.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
