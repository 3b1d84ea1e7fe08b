"""Baselines timed beside w4a16_gemm and w4a16_gemm_packed by ``exactfuse bench``: cuBLAS on the
dequantized weight (the dense-GEMM bound), torch's int4 kernel (tinygemm) and GemLite's A16W4 Triton
kernel; beside the packed op also ``w4a16_gemm`` on the same weight in the GPTQ layout."""

from __future__ import annotations

import torch

from exactfuse.bench.peers import PeerAdapter, PreparedCall, cuda_only, importable_on_cuda, register_peer
from exactfuse.ops.w4a16 import fragment, w4a16_gemm
from exactfuse.ops.w4a16.native import dense_weight
from exactfuse.ops.w4a16.packing import SYMMETRIC_ZERO, unpack_rows


def _w4a16_args(args: tuple, kwargs: dict) -> dict:
    """The op's arguments by name, defaults filled in (the native spec's signature)."""
    bound = w4a16_gemm.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _w4a16_cublas_dense(args: tuple, kwargs: dict) -> PreparedCall:
    """cuBLAS on the weight dequantized once, outside the timed region: the dense-GEMM bound."""
    x = _w4a16_args(args, kwargs)
    a, bias = x["a"], x["bias"]
    w = dense_weight(x["qweight"], x["scales"], x["zeros"], x["perm"], x["group_size"], a.dtype)
    if bias is None:
        return lambda: torch.matmul(a, w)
    return lambda: torch.addmm(bias, a, w)


def _int4pack_accepts(*args, **kwargs) -> bool:
    # tinygemm: bf16, groups of 32..256 along K, K a multiple of 1024 (8 inner K tiles of 16 pairs)
    x = _w4a16_args(args, kwargs)
    return (
        hasattr(torch, "_weight_int4pack_mm")
        and x["a"].dtype == torch.bfloat16
        and x["zeros"] is None
        and x["perm"] is None
        and x["group_size"] in (32, 64, 128, 256)
        and x["a"].shape[1] % 1024 == 0
    )


def _w4a16_torch_int4(args: tuple, kwargs: dict) -> PreparedCall:
    """``torch._weight_int4pack_mm`` (tinygemm) on the same 4-bit codes and scales, zero offset 0.

    Its dequantization is ``(q - 8) * scale + zero`` per group, so the symmetric
    GPTQ weight ``(q - 8) * scale`` is ``zero = 0``. Weights are repacked with
    ``_convert_weight_to_int4pack`` (``[N, K/2]`` uint8, even k in the high
    nibble) outside the timed region.
    """
    x = _w4a16_args(args, kwargs)
    a, scales, bias, group_size = x["a"], x["scales"], x["bias"], x["group_size"]
    q = unpack_rows(x["qweight"]).t().contiguous()  # [N, K] codes 0..15
    packed = torch._convert_weight_to_int4pack(((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8), 8)
    scales_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=2).contiguous()  # [K/G, N, 2]
    if bias is None:
        return lambda: torch._weight_int4pack_mm(a, packed, group_size, scales_zeros)
    return lambda: torch._weight_int4pack_mm(a, packed, group_size, scales_zeros) + bias


def _gemlite_accepts(*args, **kwargs) -> bool | str:
    x = _w4a16_args(args, kwargs)
    if x["perm"] is not None or x["group_index"] is not None:
        return "GemLite's A16W4 reads groups in row order (no act-order permutation or per-row groups)"
    G, K = x["group_size"], x["a"].shape[1]
    if G == -1 or G % 32 or K % G or G == K:
        return "GemLite's A16W4 takes groups of a multiple of 32 rows that divide K"
    return True


def _w4a16_gemlite(args: tuple, kwargs: dict) -> PreparedCall:
    """GemLite's ``GemLiteLinear`` (Triton, 4-bit weights, fp16/bf16 activations) on the same codes, scales and
    zero points, packed outside the timed region: HQQ's ``(q - z) * s`` per group, symmetric weights with the
    integer zero 8 (that form exactly), explicit zero points in GemLite's default fused form ``q * s - z s``."""
    from gemlite import DType, GemLiteLinear

    x = _w4a16_args(args, kwargs)
    a, qweight = x["a"], x["qweight"]
    K, N = a.shape[1], qweight.shape[1]
    dtype = DType.BF16 if a.dtype == torch.bfloat16 else DType.FP16
    layer = GemLiteLinear(
        4, group_size=x["group_size"], in_features=K, out_features=N, input_dtype=dtype, output_dtype=dtype
    )
    codes = unpack_rows(qweight).t().contiguous().to(torch.uint8)  # [N, K], 0..15
    zeros = SYMMETRIC_ZERO if x["zeros"] is None else x["zeros"].t().contiguous().to(a.dtype)
    layer.pack(codes, x["scales"].t().contiguous(), zeros, x["bias"])
    return lambda: layer(a)


register_peer(PeerAdapter("cublas-dense", "w4a16_gemm", cuda_only, _w4a16_cublas_dense))
register_peer(PeerAdapter("torch-int4", "w4a16_gemm", cuda_only, _w4a16_torch_int4, accepts=_int4pack_accepts))
register_peer(
    PeerAdapter(
        "gemlite", "w4a16_gemm", importable_on_cuda("gemlite"), _w4a16_gemlite, accepts=_gemlite_accepts,
        distribution="gemlite",
    )
)  # fmt: skip


def _packed_gptq_args(args: tuple, kwargs: dict) -> tuple:
    """The packed op's arguments as ``w4a16_gemm``'s: the weight unpacked to the GPTQ layout (zeros None
    where every zero point is the symmetric 8)."""
    a, words, scales, zeros, perm, bias = (*args, *([None] * (6 - len(args))))[:6]
    zeros, perm, bias = kwargs.get("zeros", zeros), kwargs.get("perm", perm), kwargs.get("bias", bias)
    qweight, s, z = fragment.unpack(words, scales, zeros)
    zeros = None if bool((z == SYMMETRIC_ZERO).all()) else z
    return a, qweight, s, zeros, perm, bias, (words.shape[1] * fragment.CHUNK_K) // scales.shape[0]


def _packed_cublas_dense(args: tuple, kwargs: dict) -> PreparedCall:
    """cuBLAS on the fragment layout's weight dequantized once, outside the timed region."""
    return _w4a16_cublas_dense(_packed_gptq_args(args, kwargs), {})


def _packed_gptq_layout(args: tuple, kwargs: dict) -> PreparedCall:
    """exactfuse's ``w4a16_gemm`` on the same weight in the GPTQ layout (unpacked outside the timed region)."""
    gptq = _packed_gptq_args(args, kwargs)
    return lambda: w4a16_gemm(*gptq)


register_peer(PeerAdapter("cublas-dense", "w4a16_gemm_packed", cuda_only, _packed_cublas_dense))
register_peer(PeerAdapter("gptq-layout", "w4a16_gemm_packed", cuda_only, _packed_gptq_layout))
register_peer(
    PeerAdapter(
        "torch-int4", "w4a16_gemm_packed", cuda_only,
        lambda args, kwargs: _w4a16_torch_int4(_packed_gptq_args(args, kwargs), {}),
        accepts=lambda *args, **kwargs: _int4pack_accepts(*_packed_gptq_args(args, kwargs)),
    )
)  # fmt: skip
register_peer(
    PeerAdapter(
        "gemlite", "w4a16_gemm_packed", importable_on_cuda("gemlite"),
        lambda args, kwargs: _w4a16_gemlite(_packed_gptq_args(args, kwargs), {}),
        accepts=lambda *args, **kwargs: _gemlite_accepts(*_packed_gptq_args(args, kwargs)),
        distribution="gemlite",
    )
)  # fmt: skip
