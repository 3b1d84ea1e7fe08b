"""Bit-for-bit comparison shared by the backward test files (``tests/ops/test_act_backward.py``,
``tests/ops/test_moe_backward*.py``), and the dtypes they parametrize over by short name."""

from __future__ import annotations

import torch

SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns (the sign of zero included); any NaN matches any NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    differ = (a.contiguous().view(_BITS[a.dtype]) != b.contiguous().view(_BITS[b.dtype])) & ~(a.isnan() & b.isnan())
    return not bool(differ.any())
