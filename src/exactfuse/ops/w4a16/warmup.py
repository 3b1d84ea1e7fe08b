"""Warmup of w4a16_gemm and w4a16_gemm_packed: the launches ``exactfuse.warmup`` makes so that no kernel
compiles inside a CUDA-graph capture. Each hook is named for its op, whose declaration in ``__init__.py`` takes
it (``op(..., warmup=warmup.w4a16_gemm)``)."""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16 import fragment, launch, packed
from exactfuse.ops.w4a16.heuristics import PACKED_KERNEL_MAX_M
from exactfuse.ops.w4a16.packing import random_weights

# a row count in every bucket of heuristics.BUCKETS (M = 2 is the two-row GEMV's) and the dense path; on
# sm_90 every BM of the staged tile (8 to 128) and both its split rules (M <= 64 and above)
WARMUP_M = (1, 2, 8, 16, 32, 64, 128, 256, 512, 1024)


def w4a16_gemm(
    device,
    dtype,
    *,
    shapes=((4096, 4096),),
    group_size=128,
    symmetric=True,
    act_order=False,
    bias=False,
    row_groups=False,
    deterministic=True,
    **other_ops_options,
):
    """Compile every kernel specialization the layers ``shapes = ((K, N), ...)`` need.

    One launch per M bucket of the heuristic and per split / no-split variant,
    so CUDA-graph capture at any M triggers no JIT compile. ``row_groups``: the
    layers have a group per row (row shards of act-order layers, K their shard's),
    whose dequantize path serves every M. ``deterministic=False``: layers that let
    split-K use atomics (another specialization). Options meant for other ops' warmups
    (``exactfuse.warmup`` passes them to every op) are ignored.
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    for K, N in shapes:
        b = torch.zeros((N,), dtype=dtype, device=device) if bias else None
        if row_groups:  # the dense path at every M: placeholder codes, scales and a group per row
            groups = max(1, K // (K if group_size == -1 else group_size))
            qweight = torch.zeros((K // 8, N), dtype=torch.int32, device=device)
            scales = torch.ones((groups, N), dtype=dtype, device=device)
            zeros = None if symmetric else torch.zeros((groups, N), dtype=torch.uint8, device=device)
            group_index = torch.zeros((K,), dtype=torch.int32, device=device)
            a = torch.ones((1, K), dtype=dtype, device=device)
            launch.launch_w4a16_gemm(a, qweight, scales, zeros, None, b, 128, True, group_index)
            continue
        w = random_weights(K, N, dtype, device, gen, group_size=group_size, symmetric=symmetric, act_order=act_order)
        for M in WARMUP_M:
            a = torch.ones((M, K), dtype=dtype, device=device)
            launch.launch_w4a16_gemm(a, w.qweight, w.scales, w.zeros, w.perm, b, w.group_size, deterministic)


# one M for every block count the mma.sync kernel serves (heuristics.packed_config: 1, 2, 4), for each tile of
# the wgmma kernel on the layers it serves (heuristics.packed_wgmma_config: 64, 128), and one above
# heuristics.PACKED_KERNEL_MAX_M (the layout's dequantization kernel, then cuBLAS)
PACKED_WARMUP_M = (1, 16, 32, 64, PACKED_KERNEL_MAX_M, PACKED_KERNEL_MAX_M + 1)


def w4a16_gemm_packed(device, dtype, *, shapes=((4096, 4096),), group_size=128, symmetric=True, bias=False, **other):
    """Compile the packed kernel's specializations for the layers ``shapes = ((K, N), ...)`` (repacked
    with ``fragment.pack``) at every block count the launch rule takes; nothing where the provider cannot
    run (no sm_90 GPU, a layer with no fragment layout). Other options are ignored."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    for K, N in shapes:
        w = random_weights(K, N, dtype, device, gen, group_size=group_size, symmetric=symmetric)
        if fragment.layout_unsupported(K, N, w.scales.shape[0]):
            continue
        words, scales, zeros, _ = fragment.pack(w.qweight, w.scales, w.zeros)
        b = torch.zeros((N,), dtype=dtype, device=device) if bias else None
        for M in PACKED_WARMUP_M:
            a = torch.ones((M, K), dtype=dtype, device=device)
            if packed.packed_supports(a, words, scales, zeros, None, b) is True:
                packed.w4a16_gemm_packed_gluon(a, words, scales, zeros, None, b)
