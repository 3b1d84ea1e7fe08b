"""Argument checks of ``gelu_and_mul_sparse`` (the registry's ``check=``); errors name the argument."""

from __future__ import annotations

import torch

from exactfuse.ops.act_and_mul.checks import check_approximate, check_gated_input
from exactfuse.ops.gelu_and_mul_sparse.native import OP_NAME


def check_std_multiplier(op: str, std_multiplier: float) -> None:
    """``std_multiplier`` must be a real Python number (not a tensor, not a bool)."""
    if isinstance(std_multiplier, bool) or not isinstance(std_multiplier, (int, float)):
        raise TypeError(
            f"{op}: std_multiplier must be a Python float (the normal quantile of the target sparsity), "
            f"got {type(std_multiplier).__name__}"
        )


def check_gelu_and_mul_sparse(x: torch.Tensor, std_multiplier: float, approximate: str) -> None:
    check_gated_input(OP_NAME, x)
    check_std_multiplier(OP_NAME, std_multiplier)
    check_approximate(OP_NAME, approximate)
