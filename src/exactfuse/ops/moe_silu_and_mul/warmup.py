"""Warmup of moe_silu_and_mul and moe_silu_and_mul_backward: the launches ``exactfuse.warmup`` makes so
that no kernel compiles inside a CUDA-graph capture. Each hook is named for its op, whose declaration in
``__init__.py`` takes it (``op(..., warmup=warmup.moe_silu_and_mul)``)."""

from __future__ import annotations

import torch

from exactfuse.ops.moe_silu_and_mul import launch


def moe_silu_and_mul(
    device: torch.device,
    dtype: torch.dtype,
    *,
    widths=(1024,),
    interleaved=(False, True),
    weights=(None, torch.float32),
    out_dtype: torch.dtype | None = None,
    **other_ops_options,
) -> None:
    """Compile the kernel for each width ``N`` x layout x row-weights dtype (``None``: no weights).

    The launch configuration depends on ``N`` only, so one call per width
    covers every batch size (except ``numel >= 2**31``, a separate int64 build).
    Options meant for other ops' warmups (``exactfuse.warmup`` passes them to
    every op) are ignored.
    """
    for x, w, layout in _variants(device, dtype, widths, interleaved, weights):
        launch.launch_moe_silu_and_mul(x, w, layout, out_dtype)


def _variants(device, dtype, widths, interleaved, weights):
    """``(gateup [1, 2N], row weights or None, interleaved)`` for every width x layout x weights dtype."""
    for N in widths:
        x = torch.ones((1, 2 * N), dtype=dtype, device=device)
        for layout in (interleaved,) if isinstance(interleaved, bool) else interleaved:
            for w_dtype in weights:
                yield x, None if w_dtype is None else torch.ones((1,), dtype=w_dtype, device=device), layout


def moe_silu_and_mul_backward(
    device: torch.device,
    dtype: torch.dtype,
    *,
    widths=(1024,),
    interleaved=(False, True),
    weights=(None, torch.float32),
    out_dtype: torch.dtype | None = None,
    **other_ops_options,
) -> None:
    """Compile the backward kernel for each width ``N`` x layout x row-weights dtype (``None``: no
    weights), the output's gradient of ``out_dtype`` (default ``dtype``). The launch depends on ``N``
    only, as the forward's does."""
    for x, w, layout in _variants(device, dtype, widths, interleaved, weights):
        grad = torch.ones((1, x.shape[1] // 2), dtype=out_dtype or dtype, device=device)
        launch.launch_moe_silu_and_mul_backward(grad, x, w, layout)
