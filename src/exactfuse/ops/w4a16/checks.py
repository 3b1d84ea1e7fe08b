"""Argument checks of ``w4a16_gemm`` and ``w4a16_gemm_packed`` (the registry's ``check=``); errors name the
argument."""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16.packing import FLOAT_DTYPES, INDEX_DTYPES, PACK


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def check_w4a16_args(
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    group_size: int = 128,
    deterministic: bool = True,
    group_index: torch.Tensor | None = None,
) -> None:
    """Validate shapes, dtypes and devices; errors name the argument and the expectation.

    ``perm``'s values are range-checked when it is a CPU tensor; on a GPU that would synchronize every
    call. There :func:`~exactfuse.ops.w4a16.packing.prepare_gptq` (and so ``W4A16Linear``) builds it as a
    permutation (an argsort), and the Triton kernels read an activation of 0 for an entry outside
    ``[0, K)`` instead of reading outside ``a``. ``group_index`` likewise: range-checked on the CPU; the
    Triton kernels read a scale of 0 (a weight of 0) for an entry outside ``scales``' rows.
    """
    op = "w4a16_gemm"
    # The common path reads each attribute once, compares torch.Size with tuples (no lists) and builds
    # one torch.device for a: 2.8 -> 1.7 µs per call at M1-4096x4096 fp16 (timeit
    # on a 2-core CPU). The loops that name the argument run only when a check fails.
    if not (isinstance(a, torch.Tensor) and isinstance(qweight, torch.Tensor) and isinstance(scales, torch.Tensor)):
        for name, t in (("a", a), ("qweight", qweight), ("scales", scales)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    q_shape = qweight.shape
    if len(q_shape) != 2 or qweight.dtype != torch.int32:
        raise TypeError(f"{op}: qweight must be a 2-D int32 tensor [K/8, N], got {_shape(qweight)} {qweight.dtype}")
    K, N = q_shape[0] * PACK, q_shape[1]
    a_shape = a.shape
    if len(a_shape) != 2 or a_shape[1] != K:
        raise ValueError(f"{op}: a must be [M, K] = [M, {K}] (K = 8 * qweight.shape[0]), got {_shape(a)}")
    dtype = a.dtype
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: a must be float16 or bfloat16, got {a.dtype}")
    if group_index is None:
        G = K if group_size == -1 else group_size
        if G <= 0 or (K and K % G):
            raise ValueError(f"{op}: group_size must be -1 or a positive divisor of K = {K}, got {group_size}")
        groups = K // G if K else 0
        if scales.shape != (groups, N):
            raise ValueError(f"{op}: scales must be [K // group_size, N] = [{groups}, {N}], got {_shape(scales)}")
    else:
        _check_group_index(group_index, K, N, scales)
        groups = scales.shape[0]
    if scales.dtype != dtype:
        raise TypeError(f"{op}: scales must have a's dtype {a.dtype}, got {scales.dtype}")
    if zeros is not None and (zeros.shape != (groups, N) or zeros.dtype != torch.uint8):
        shape = f"[K // group_size, N] = [{groups}, {N}]" if group_index is None else f"scales' shape [{groups}, {N}]"
        raise ValueError(f"{op}: zeros must be uint8 {shape}, got {_shape(zeros)} {zeros.dtype}")
    if perm is not None and (perm.shape != (K,) or perm.dtype not in INDEX_DTYPES):
        raise ValueError(f"{op}: perm must be int32/int64 [K] = [{K}], got {_shape(perm)} {perm.dtype}")
    if perm is not None and perm.is_cpu and perm.numel() and not bool(((perm >= 0) & (perm < K)).all()):
        raise ValueError(f"{op}: perm's values must be in [0, K) = [0, {K}), got {int(perm.min())}..{int(perm.max())}")
    if bias is not None and (bias.shape != (N,) or bias.dtype != dtype):
        raise ValueError(f"{op}: bias must be [N] = [{N}] of a's dtype {a.dtype}, got {_shape(bias)} {bias.dtype}")
    device = a.device
    if (
        qweight.device != device
        or scales.device != device
        or (zeros is not None and zeros.device != device)
        or (perm is not None and perm.device != device)
        or (bias is not None and bias.device != device)
        or (group_index is not None and group_index.device != device)
    ):
        named = (("qweight", qweight), ("scales", scales), ("zeros", zeros), ("perm", perm), ("bias", bias),
                 ("group_index", group_index))  # fmt: skip
        for name, t in named:
            if t is not None and t.device != a.device:
                raise ValueError(f"{op}: {name} must be on a's device {a.device}, got {t.device}")


def _check_group_index(group_index, K: int, N: int, scales: torch.Tensor) -> None:
    op = "w4a16_gemm"
    if not isinstance(group_index, torch.Tensor) or group_index.shape != (K,) or group_index.dtype not in INDEX_DTYPES:
        got = (
            f"{_shape(group_index)} {group_index.dtype}" if isinstance(group_index, torch.Tensor) else type(group_index)
        )
        raise ValueError(f"{op}: group_index must be int32/int64 [K] = [{K}], got {got}")
    if scales.dim() != 2 or scales.shape[1] != N or (K and scales.shape[0] == 0):
        raise ValueError(
            f"{op}: scales must be [groups, N] = [groups >= 1, {N}] with group_index, got {_shape(scales)}"
        )
    if group_index.is_cpu and K and not bool(((group_index >= 0) & (group_index < scales.shape[0])).all()):
        raise ValueError(
            f"{op}: group_index's values must be in [0, scales.shape[0]) = [0, {scales.shape[0]}), "
            f"got {int(group_index.min())}..{int(group_index.max())}"
        )


def check_w4a16_packed_args(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> None:
    """Validate ``w4a16_gemm_packed``'s arguments (the fragment layout, ``fragment.py``); errors name the
    argument and the expectation."""
    op = "w4a16_gemm_packed"
    for name, t in (("a", a), ("words", words), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if words.dim() != 4 or words.shape[2:] != (32, 4) or words.dtype != torch.int32:
        raise TypeError(f"{op}: words must be int32 [N/16, K/64, 32, 4], got {_shape(words)} {words.dtype}")
    N, K = words.shape[0] * 16, words.shape[1] * 64
    if a.dim() != 2 or a.shape[1] != K:
        raise ValueError(f"{op}: a must be [M, K] = [M, {K}] (K = 64 * words.shape[1]), got {_shape(a)}")
    if a.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: a must be float16 or bfloat16, got {a.dtype}")
    groups = scales.shape[0] if scales.dim() == 2 else 0
    if scales.dim() != 2 or scales.shape[1] != N or groups == 0 or (K // 64) % groups:
        raise ValueError(
            f"{op}: scales must be [groups, N] = [groups, {N}] with groups dividing K/64 = {K // 64}, "
            f"got {_shape(scales)}"
        )
    if scales.dtype != a.dtype:
        raise TypeError(f"{op}: scales must have a's dtype {a.dtype}, got {scales.dtype}")
    if zeros is not None and (
        not isinstance(zeros, torch.Tensor) or zeros.shape != (groups, N // 8) or zeros.dtype != torch.int32
    ):
        got = f"{_shape(zeros)} {zeros.dtype}" if isinstance(zeros, torch.Tensor) else type(zeros).__name__
        raise ValueError(f"{op}: zeros must be None or int32 [groups, N/8] = [{groups}, {N // 8}], got {got}")
    if perm is not None and (perm.shape != (K,) or perm.dtype not in INDEX_DTYPES):
        raise ValueError(f"{op}: perm must be int32/int64 [K] = [{K}], got {_shape(perm)} {perm.dtype}")
    if perm is not None and perm.is_cpu and perm.numel() and not bool(((perm >= 0) & (perm < K)).all()):
        raise ValueError(f"{op}: perm's values must be in [0, K) = [0, {K}), got {int(perm.min())}..{int(perm.max())}")
    if bias is not None and (bias.shape != (N,) or bias.dtype != a.dtype):
        raise ValueError(f"{op}: bias must be [N] = [{N}] of a's dtype {a.dtype}, got {_shape(bias)} {bias.dtype}")
    for name, t in (("words", words), ("scales", scales), ("zeros", zeros), ("perm", perm), ("bias", bias)):
        if t is not None and t.device != a.device:
            raise ValueError(f"{op}: {name} must be on a's device {a.device}, got {t.device}")
