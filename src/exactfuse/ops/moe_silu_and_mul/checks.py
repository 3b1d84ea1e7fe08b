"""Argument checks of ``moe_silu_and_mul`` (the registry's ``check=``); errors name the argument."""

from __future__ import annotations

import torch

from exactfuse.ops.moe_silu_and_mul.native import FLOAT_DTYPES
from exactfuse.utils import sizes_equal

OP = "moe_silu_and_mul"
_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def check_moe_silu_and_mul(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> None:
    """Validate the arguments of :func:`moe_silu_and_mul`; errors name the argument."""
    if not isinstance(gateup, torch.Tensor):
        raise TypeError(f"{OP}: gateup must be a torch.Tensor, got {type(gateup).__name__}")
    if gateup.dim() != 2:
        raise ValueError(f"{OP}: gateup must be 2-D [M, 2*N], got {gateup.dim()}-D shape {list(gateup.shape)}")
    if gateup.shape[1] % 2 != 0:
        raise ValueError(f"{OP}: gateup's last dimension must be even (2*N), got {gateup.shape[1]}")
    if gateup.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{OP}: gateup must be float16, bfloat16 or float32, got {gateup.dtype}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"{OP}: interleaved must be a bool, got {type(interleaved).__name__}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"{OP}: out_dtype must be None, float16, bfloat16 or float32, got {out_dtype}")
    if row_weights is None:
        return
    if not isinstance(row_weights, torch.Tensor):
        raise TypeError(f"{OP}: row_weights must be a torch.Tensor or None, got {type(row_weights).__name__}")
    M = gateup.shape[0]
    if row_weights.dim() != 1 or not sizes_equal(row_weights.shape[0], M):
        raise ValueError(f"{OP}: row_weights must be [M] = [{M}], got {list(row_weights.shape)}")
    if row_weights.dtype not in (torch.float32, gateup.dtype):
        raise TypeError(
            f"{OP}: row_weights must be float32 or gateup's dtype ({_NAMES[gateup.dtype]}), got {row_weights.dtype}"
        )
    if row_weights.device != gateup.device:
        raise ValueError(f"{OP}: row_weights must be on gateup's device {gateup.device}, got {row_weights.device}")
