"""Native spec of ``w4a16_gemm``: dequantize to the activation dtype, then ``torch.matmul``.

Arguments are the prepared layout of :mod:`exactfuse.ops.w4a16.packing`:

- ``a [M, K]`` fp16/bf16 activations, any ``M >= 0``, unit last stride.
- ``qweight [K/8, N]`` int32, K packed 8 nibbles per word (bits ``4 * (k % 8)``).
- ``scales [K/G, N]`` in ``a``'s dtype.
- ``zeros [K/G, N]`` uint8 zero points, or ``None`` (symmetric: 8).
- ``perm [K]`` int32/int64 or ``None``: prepared row ``i`` multiplies ``a[:, perm[i]]``.
- ``bias [N]`` in ``a``'s dtype, or ``None``.
- ``group_size`` G (``-1``: one group of all K rows).
- ``deterministic``: providers must not use atomics (native always is).
- ``group_index [K]`` int32/int64 or ``None``: prepared row ``i`` takes scale (and zero) row
  ``group_index[i]``, any of ``scales``' rows in any order, instead of ``i // G`` (GPTQ's ``g_idx``,
  e.g. a row-parallel shard of an act-order layer: rows in checkpoint order, groups spread over the
  layer). ``scales``/``zeros`` may then have any number of rows and ``group_size`` is not used.

Rounding: ``W = (q - z).to(dtype) * scale`` (one rounding: the product of an
integer below 2^5 and an fp16/bf16 scale is exact in fp32), then
``a[:, perm] @ W`` rounded to ``dtype`` by ``torch.matmul``, then ``+ bias``
rounded again, as eager ``matmul(a, W) + bias`` does.
"""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16 import fragment
from exactfuse.ops.w4a16.packing import PACK, SYMMETRIC_ZERO, unpack_rows


def dequantize(
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    group_size: int,
    dtype: torch.dtype,
    group_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Prepared weight -> dense ``[K, N]`` in ``dtype``, rows in prepared order (group-sorted, or as
    ``group_index`` maps them)."""
    K = qweight.shape[0] * PACK
    q = unpack_rows(qweight)
    if group_index is None:
        G = K if group_size == -1 else group_size

        def rows(t: torch.Tensor) -> torch.Tensor:
            return t.repeat_interleave(G, dim=0)
    else:
        index = group_index.to(torch.int64)

        def rows(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, index)

    z = torch.full_like(q, SYMMETRIC_ZERO) if zeros is None else rows(zeros.to(torch.int32))
    return (q - z).to(dtype) * rows(scales.to(dtype))


def dense_weight(
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    group_size: int = 128,
    dtype: torch.dtype | None = None,
    group_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dense ``[K, N]`` weight in checkpoint row order: ``a @ dense_weight(...)`` is the GEMM.

    For dense (cuBLAS) baselines and tests; ``dtype`` defaults to ``scales``'.
    """
    w = dequantize(qweight, scales, zeros, group_size, dtype or scales.dtype, group_index)
    if perm is None:
        return w
    out = torch.empty_like(w)
    out[perm.to(torch.int64)] = w
    return out


def w4a16_gemm(
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
    """``a[:, perm] @ dequantize(qweight, scales, zeros) (+ bias)``: ``[M, K] -> [M, N]`` in ``a.dtype``.

    4-bit weights with group-wise scales; see the module docstring for layouts.
    """
    w = dequantize(qweight, scales, zeros, group_size, a.dtype, group_index)
    if perm is not None:
        a = a.index_select(1, perm.to(torch.int64))
    out = torch.matmul(a, w)
    return out if bias is None else out + bias


def w4a16_gemm_fake(
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
    """Output metadata only: ``[M, N]`` in ``a.dtype`` on ``a.device``."""
    return a.new_empty((a.shape[0], qweight.shape[1]))


def w4a16_gemm_backward(
    grad: torch.Tensor,
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    group_size: int = 128,
    deterministic: bool = True,
    group_index: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(d a, d bias)`` of :func:`w4a16_gemm` for the output's gradient ``grad [M, N]`` (the quantized weight
    is frozen): the gradients eager autograd computes, ``grad @ W^T`` as ``mm``'s backward forms it (the
    transposed product for a column-major ``a``), scattered back through ``perm``, and ``grad`` summed
    over rows for the bias."""
    w = dequantize(qweight, scales, zeros, group_size, a.dtype, group_index)
    return frozen_weight_backward(grad, a, w, perm, bias)


def frozen_weight_backward(
    grad: torch.Tensor, a: torch.Tensor, w: torch.Tensor, perm: torch.Tensor | None, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(d a, d bias)`` of ``a[:, perm] @ w (+ bias)`` with ``w`` frozen, as eager autograd forms them."""
    column_major = perm is None and a.stride(0) == 1 and a.stride(1) == a.shape[0]
    d_a = w.mm(grad.t()).t() if column_major else grad.mm(w.t())
    if perm is not None:
        d_a = torch.zeros_like(d_a).index_add_(1, perm.to(torch.int64), d_a)
    return d_a, None if bias is None else grad.sum(0)


def w4a16_gemm_packed(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`w4a16_gemm` over the fragment layout (``fragment.py``): ``a[:, perm] @ W (+ bias)``, ``W``
    dequantized as ``(q - z) * s`` in ``a.dtype`` (one rounding), ``torch.matmul``, then ``+ bias``.

    ``words [N/16, K/64, 32, 4]`` int32, ``scales [groups, N]`` in ``a``'s dtype, ``zeros [groups, N/8]``
    int32 (8 zero points a word) or None (all 8), ``perm`` and ``bias`` as :func:`w4a16_gemm`'s."""
    w = fragment.dequantize(words, scales, zeros)
    if perm is not None:
        a = a.index_select(1, perm.to(torch.int64))
    out = torch.matmul(a, w)
    return out if bias is None else out + bias


def w4a16_gemm_packed_fake(a, words, scales, zeros=None, perm=None, bias=None) -> torch.Tensor:
    """Output metadata only: ``[M, N]`` in ``a.dtype`` on ``a.device``."""
    return a.new_empty((a.shape[0], words.shape[0] * 16))


def w4a16_gemm_packed_backward(
    grad: torch.Tensor,
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(d a, d bias)`` of :func:`w4a16_gemm_packed`: as :func:`w4a16_gemm_backward` (frozen weight)."""
    return frozen_weight_backward(grad, a, fragment.dequantize(words, scales, zeros), perm, bias)
