"""Warmup of silu_and_mul, gelu_and_mul, silu_mul and gelu_mul and of their backward ops: the launches
``exactfuse.warmup`` makes so that no kernel compiles inside a CUDA-graph capture."""

from __future__ import annotations

import itertools

import torch

from exactfuse.ops.act_and_mul import (
    gelu_and_mul,
    gelu_and_mul_backward,
    gelu_mul,
    gelu_mul_backward,
    native,
    silu_and_mul,
    silu_and_mul_backward,
    silu_mul,
    silu_mul_backward,
)
from exactfuse.ops.act_and_mul import triton as _triton
from exactfuse.ops.act_and_mul.heuristics import SMALL_TILE_ELEMENTS


def _warm(launch, device, dtype, widths, approximations=(None,), pair=False, backward=False):
    """One small and one large launch per width (the heuristic's two num_warps) and approximation:
    ``x [T, 2d]``, or with ``pair`` ``gate, up [T, d]``; with ``backward`` the output's gradient
    ``[T, d]`` first."""
    for d in widths:
        for a, T in itertools.product(approximations, (1, -(-SMALL_TILE_ELEMENTS // d))):
            shape = (T, d) if pair else (T, 2 * d)
            inputs = [torch.ones(shape, dtype=dtype, device=device) for _ in range(2 if pair else 1)]
            if backward:
                inputs.insert(0, torch.ones((T, d), dtype=dtype, device=device))
            launch(*inputs, **({} if a is None else {"approximate": a}))


def _approximations(approximate) -> tuple:
    return (approximate,) if isinstance(approximate, str) else tuple(approximate)


@silu_and_mul.warmup
def _silu_warmup(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the kernel for each output width ``d`` in ``widths``."""
    _warm(_triton.silu_and_mul_triton, device, dtype, widths)


@gelu_and_mul.warmup
def _gelu_warmup(device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options):
    """Compile the kernel for each ``d`` in ``widths`` and each approximation."""
    _warm(_triton.gelu_and_mul_triton, device, dtype, widths, _approximations(approximate))


@silu_mul.warmup
def _silu_mul_warmup(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the kernel for two ``[T, d]`` tensors, each ``d`` in ``widths``."""
    _warm(_triton.silu_mul_triton, device, dtype, widths, pair=True)


@gelu_mul.warmup
def _gelu_mul_warmup(device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options):
    """Compile the kernel for two ``[T, d]`` tensors, each ``d`` in ``widths`` and each approximation."""
    _warm(_triton.gelu_mul_triton, device, dtype, widths, _approximations(approximate), pair=True)


@silu_and_mul_backward.warmup
def _silu_backward_warmup(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the backward kernel for each output width ``d`` in ``widths``."""
    _warm(_triton.silu_and_mul_backward_triton, device, dtype, widths, backward=True)


@gelu_and_mul_backward.warmup
def _gelu_backward_warmup(
    device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options
):
    """Compile the backward kernel for each ``d`` in ``widths`` and each approximation."""
    _warm(_triton.gelu_and_mul_backward_triton, device, dtype, widths, _approximations(approximate), backward=True)


@silu_mul_backward.warmup
def _silu_mul_backward_warmup(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the backward kernel for two ``[T, d]`` tensors, each ``d`` in ``widths``."""
    _warm(_triton.silu_mul_backward_triton, device, dtype, widths, pair=True, backward=True)


@gelu_mul_backward.warmup
def _gelu_mul_backward_warmup(
    device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options
):
    """Compile the backward kernel for two ``[T, d]`` tensors, each ``d`` in ``widths`` and approximation."""
    _warm(
        _triton.gelu_mul_backward_triton, device, dtype, widths, _approximations(approximate), pair=True, backward=True
    )
