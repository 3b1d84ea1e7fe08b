"""The W4A16 GEMM's Triton provider: the launcher, what it takes, and the launch-time checks of the GEMV's
fast paths. Below ``heuristics.DENSE_ABOVE_M`` rows the weights are dequantized in registers, in the fused
tile (``tile_kernel.py``), the GEMV (``gemv.py``, M <= 2) or the staged Gluon tile (``staged.py``, sm_90),
split-K partials summed as ``splitk.py`` does; above, dequantized into a dense weight for cuBLAS.

Dense path (``dequant.py``): the spec's dequantized ``[K, N]`` weight in a transient buffer, then
``torch.matmul`` (+ bias), so the output is bitwise native's.

The launcher picks the path, tile and split from the runtime M (``heuristics``), does
no host synchronization and allocates only through the caching allocator (the split-K
arrival counters once per device and stream, :func:`arrival_counters`), so it is
CUDA-graph capturable once its kernels are compiled (``exactfuse.warmup``).
"""

from __future__ import annotations

import torch
import triton

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16 import staged
from exactfuse.ops.w4a16.dequant import dense_gemm
from exactfuse.ops.w4a16.gemv import w4a16_gemv_kernel
from exactfuse.ops.w4a16.heuristics import TileConfig, dense_config, fused_config, select_config
from exactfuse.ops.w4a16.splitk import REDUCE_BLOCK, w4a16_splitk_reduce_kernel
from exactfuse.ops.w4a16.tile_kernel import w4a16_gemm_kernel
from exactfuse.registry import platform
from exactfuse.utils import compute_capability, empty, next_power_of_2, num_sms

GROUP_M = 8


def _packed_math_device(device: torch.device) -> bool:
    return compute_capability(device) >= (9, 0)


def packed_math(a: torch.Tensor) -> bool:
    """The GEMV's PACKED_MATH: PTX bf16x2 sub/mul need sm_90, f16x2 any CUDA GPU; off under the interpreter."""
    return a.is_cuda and (a.dtype == torch.float16 or _packed_math_device(a.device))


def wide_activation_loads(a: torch.Tensor) -> bool:
    """The GEMV's WIDE_A: each row of ``a`` starts 8-byte aligned, so 4 activations load as one int64."""
    return a.data_ptr() % 8 == 0 and (a.shape[0] == 1 or a.stride(0) % 4 == 0)


def kernel_group(K: int, group_size: int) -> int:
    """The GROUP constexpr: the group size, or next_pow2(K) >= K when one group spans all of K."""
    return next_power_of_2(K) if group_size == -1 or group_size >= K else group_size


def supported_group(K: int, group_size: int) -> bool:
    """Group sizes the kernel handles: one group, or a power of two >= 16."""
    G = kernel_group(K, group_size)
    return G >= K or (G >= 16 and G & (G - 1) == 0)


def launch_config(
    a: torch.Tensor,
    N: int,
    group_size: int,
    perm: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    config: TileConfig | None = None,
) -> TileConfig:
    """The configuration :func:`launch_w4a16_gemm` runs for ``a [M, K]`` (M, K, N > 0) and a weight of
    ``N`` columns: ``config`` where given, else :func:`heuristics.select_config`'s choice for this device.

    A ``group_index`` takes the dense path unless ``config`` forces a tl.dot tile (its per-row scale
    gather is not yet the rule's: ``benchmarks/results/h200/sweeps/w4a16_row_groups.txt``); the GEMV cannot
    take one. The staged tile runs where the rule chose it and its arguments fit, else the rule's tl.dot
    tile does; forced where it cannot run, it is an error.
    """
    M, K = a.shape
    if group_index is not None:
        cfg = config or dense_config()
        if cfg.gemv:
            raise ValueError(
                f"w4a16_gemm: config {cfg.name!r} is the GEMV, which reads one scale per packed word of 8 rows; "
                "group_index needs a tl.dot or the dense configuration"
            )
        G = 0
    else:
        G = kernel_group(K, group_size)
        cfg = config or select_config(
            M, N, K, group_size, num_sms(a.device), wgmma=not staged.wgmma_unavailable(a.device)
        )
    unfit = cfg.staged and staged.staged_unsupported(a, N, G, perm, group_index, cfg)
    if unfit and config is None:
        return fused_config(M, N, K, num_sms(a.device))
    if unfit:
        raise ValueError(f"w4a16_gemm: config {cfg.name!r} (the multi-stage Gluon tile) cannot run here: {unfit}")
    return cfg


def launch_w4a16_gemm(
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
    group_size: int,
    deterministic: bool = True,
    group_index: torch.Tensor | None = None,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """Launch the GEMM (and the split-K reduction) on validated prepared tensors -> ``[M, N]``.

    ``config`` overrides the heuristic (tests and sweeps); :func:`launch_config` is the configuration
    that runs.
    """
    M, K = a.shape
    N = qweight.shape[1]
    out = empty((M, N), a.dtype, a.device)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_() if bias is None else out.copy_(bias.expand(M, N))
    per_row = group_index is not None
    G = 0 if per_row else kernel_group(K, group_size)  # per row: each row's group is group_index's
    cfg = launch_config(a, N, group_size, perm, group_index, config)
    if cfg.dense:
        return dense_gemm(a, qweight, scales, zeros, perm, bias, G, cfg, group_index)
    if cfg.staged:
        return staged.launch_staged(a, qweight, scales, zeros, perm, bias, G, cfg)
    split = cfg.split_k > 1
    atomic = split and not deterministic
    fixup = split and not atomic and cfg.fixup
    tiles = triton.cdiv(M, cfg.BM) * triton.cdiv(N, cfg.BN)
    ws = counts = qweight  # placeholders: unused without split
    if atomic:
        ws = torch.zeros((M, N), dtype=torch.float32, device=a.device)
    elif split:
        ws = torch.empty((cfg.split_k, M, N), dtype=torch.float32, device=a.device)
        if fixup:
            counts = arrival_counters(a.device, tiles)
    if cfg.gemv:
        kernel, tiling = (
            w4a16_gemv_kernel,
            dict(
                PACKED_MATH=cfg.packed_math and packed_math(a),
                WIDE_A=cfg.wide_a and perm is None and wide_activation_loads(a),
                SCALE_TILE=cfg.scale_tile,
            ),
        )
    else:
        kernel = w4a16_gemm_kernel
        tiling = dict(GROUP_M=GROUP_M, p_gi=group_index if per_row else qweight, groups=scales.shape[0],
                      HAS_GROUP_INDEX=per_row)  # fmt: skip
    torch.library.wrap_triton(kernel)[(tiles, cfg.split_k)](
        a,
        qweight,
        scales,
        zeros if zeros is not None else qweight,
        perm if perm is not None else qweight,
        bias if bias is not None else scales,
        out,
        ws,
        counts,
        M,
        N,
        K,
        a.stride(0),
        cfg.k_per_split,
        GROUP=max(G, 1),
        GROUPS_PER_TILE=cfg.BK // G if 0 < G < cfg.BK else 1,
        HAS_ZEROS=zeros is not None,
        HAS_PERM=perm is not None,
        HAS_BIAS=bias is not None,
        SPLIT=split,
        ATOMIC=atomic,
        FIXUP=fixup,
        EVEN_K=K % cfg.BK == 0,
        INT64_INDEX=max(a.numel(), cfg.split_k * M * N) >= 2**31,
        BM=cfg.BM,
        BN=cfg.BN,
        BK=cfg.BK,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **tiling,
    )
    if split and not fixup:
        torch.library.wrap_triton(w4a16_splitk_reduce_kernel)[(triton.cdiv(M * N, REDUCE_BLOCK),)](
            ws,
            bias if bias is not None else scales,
            out,
            M,
            N,
            1 if atomic else cfg.split_k,
            HAS_BIAS=bias is not None,
            BLOCK=REDUCE_BLOCK,
        )
    return out


def triton_supports(
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    group_size: int = 128,
    deterministic: bool = True,
    group_index: torch.Tensor | None = None,
) -> bool | str:
    """Tensors Triton can read (no bf16 under the interpreter), ``a`` with unit last stride, contiguous
    weights, a supported group size; otherwise the reason, naming the argument."""
    if not a.is_cuda and (reason := platform.triton_reads("a", a)) is not True:
        return reason
    if a.stride(1) != 1:
        return f"a has strides {tuple(a.stride())}: the kernels read rows of a with unit last stride"
    named = (("qweight", qweight), ("scales", scales), ("zeros", zeros), ("perm", perm), ("bias", bias),
             ("group_index", group_index))  # fmt: skip
    for name, t in named:
        if t is not None and not t.is_contiguous():
            return f"{name} has strides {tuple(t.stride())}: the kernels read it contiguous"
    K = a.shape[1]
    if K and group_index is None and not supported_group(K, group_size):
        return f"group_size={group_size} with K={K}: the kernels take one group or a power of two >= 16"
    return True


def w4a16_gemm_triton(
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    group_size: int = 128,
    deterministic: bool = True,
    group_index: torch.Tensor | None = None,
) -> torch.Tensor:
    return launch_w4a16_gemm(a, qweight, scales, zeros, perm, bias, group_size, deterministic, group_index)
