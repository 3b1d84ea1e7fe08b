"""Argument checks of ``moe_silu_and_mul`` and ``moe_silu_and_mul_backward`` (the registry's ``check=``);
errors name the argument."""

from __future__ import annotations

import torch

from exactfuse.ops.moe_silu_and_mul.native import FLOAT_DTYPES
from exactfuse.utils import sizes_equal

OP = "moe_silu_and_mul"
BACKWARD_OP = "moe_silu_and_mul_backward"
_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def check_moe_silu_and_mul(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
    *,
    op: str = OP,
) -> None:
    """Validate the arguments of :func:`moe_silu_and_mul` (as those of ``op``); errors name the argument."""
    if not isinstance(gateup, torch.Tensor):
        raise TypeError(f"{op}: gateup must be a torch.Tensor, got {type(gateup).__name__}")
    if gateup.dim() != 2:
        raise ValueError(f"{op}: gateup must be 2-D [M, 2*N], got {gateup.dim()}-D shape {list(gateup.shape)}")
    if gateup.shape[1] % 2 != 0:
        raise ValueError(f"{op}: gateup's last dimension must be even (2*N), got {gateup.shape[1]}")
    if gateup.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: gateup must be float16, bfloat16 or float32, got {gateup.dtype}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"{op}: interleaved must be a bool, got {type(interleaved).__name__}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: out_dtype must be None, float16, bfloat16 or float32, got {out_dtype}")
    if row_weights is None:
        return
    if not isinstance(row_weights, torch.Tensor):
        raise TypeError(f"{op}: row_weights must be a torch.Tensor or None, got {type(row_weights).__name__}")
    M = gateup.shape[0]
    if row_weights.dim() != 1 or not sizes_equal(row_weights.shape[0], M):
        raise ValueError(f"{op}: row_weights must be [M] = [{M}], got {list(row_weights.shape)}")
    if row_weights.dtype not in (torch.float32, gateup.dtype):
        raise TypeError(
            f"{op}: row_weights must be float32 or gateup's dtype ({_NAMES[gateup.dtype]}), got {row_weights.dtype}"
        )
    if row_weights.device != gateup.device:
        raise ValueError(f"{op}: row_weights must be on gateup's device {gateup.device}, got {row_weights.device}")


def check_moe_silu_and_mul_backward(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> None:
    """Validate the forward's arguments and the output's gradient ``grad``: ``[M, N]`` of the output's
    dtype (``out_dtype`` or gateup's) on gateup's device."""
    check_moe_silu_and_mul(gateup, row_weights, interleaved, out_dtype, op=BACKWARD_OP)
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"{BACKWARD_OP}: grad must be a torch.Tensor, got {type(grad).__name__}")
    shape = (gateup.shape[0], gateup.shape[1] // 2)
    if grad.dim() != 2 or not all(sizes_equal(a, b) for a, b in zip(grad.shape, shape, strict=True)):
        raise ValueError(f"{BACKWARD_OP}: grad must have the output's shape {list(shape)}, got {list(grad.shape)}")
    want = out_dtype or gateup.dtype
    if grad.dtype != want:
        raise TypeError(f"{BACKWARD_OP}: grad must have the output's dtype {want}, got {grad.dtype}")
    if grad.device != gateup.device:
        raise ValueError(f"{BACKWARD_OP}: grad must be on gateup's device {gateup.device}, got {grad.device}")
