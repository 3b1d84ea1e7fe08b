"""Warmup of silu_and_mul, gelu_and_mul, silu_mul and gelu_mul and of their backward ops: the launches
``exactfuse.warmup`` makes so that no kernel compiles inside a CUDA-graph capture. Each hook is named for its
op, whose declaration in ``__init__.py`` takes it (``op(..., warmup=warmup.silu_and_mul)``)."""

from __future__ import annotations

import itertools

import torch

from exactfuse.ops.act_and_mul import launch, native
from exactfuse.ops.act_and_mul.heuristics import SMALL_TILE_ELEMENTS


def _warm(provider, device, dtype, widths, approximations=(None,), pair=False, backward=False):
    """One small and one large launch per width (the heuristic's two num_warps) and approximation:
    ``x [T, 2d]``, or with ``pair`` ``gate, up [T, d]``; with ``backward`` the output's gradient
    ``[T, d]`` first."""
    for d in widths:
        for a, T in itertools.product(approximations, (1, -(-SMALL_TILE_ELEMENTS // d))):
            shape = (T, d) if pair else (T, 2 * d)
            inputs = [torch.ones(shape, dtype=dtype, device=device) for _ in range(2 if pair else 1)]
            if backward:
                inputs.insert(0, torch.ones((T, d), dtype=dtype, device=device))
            provider(*inputs, **({} if a is None else {"approximate": a}))


def _approximations(approximate) -> tuple:
    return (approximate,) if isinstance(approximate, str) else tuple(approximate)


def silu_and_mul(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the kernel for each output width ``d`` in ``widths``."""
    _warm(launch.silu_and_mul_triton, device, dtype, widths)


def gelu_and_mul(device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options):
    """Compile the kernel for each ``d`` in ``widths`` and each approximation."""
    _warm(launch.gelu_and_mul_triton, device, dtype, widths, _approximations(approximate))


def silu_mul(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the kernel for two ``[T, d]`` tensors, each ``d`` in ``widths``."""
    _warm(launch.silu_mul_triton, device, dtype, widths, pair=True)


def gelu_mul(device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options):
    """Compile the kernel for two ``[T, d]`` tensors, each ``d`` in ``widths`` and each approximation."""
    _warm(launch.gelu_mul_triton, device, dtype, widths, _approximations(approximate), pair=True)


def silu_and_mul_backward(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the backward kernel for each output width ``d`` in ``widths``."""
    _warm(launch.silu_and_mul_backward_triton, device, dtype, widths, backward=True)


def gelu_and_mul_backward(
    device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options
):
    """Compile the backward kernel for each ``d`` in ``widths`` and each approximation."""
    _warm(launch.gelu_and_mul_backward_triton, device, dtype, widths, _approximations(approximate), backward=True)


def silu_mul_backward(device, dtype, *, widths=(4096,), **_other_ops_options):
    """Compile the backward kernel for two ``[T, d]`` tensors, each ``d`` in ``widths``."""
    _warm(launch.silu_mul_backward_triton, device, dtype, widths, pair=True, backward=True)


def gelu_mul_backward(device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS, **_other_ops_options):
    """Compile the backward kernel for two ``[T, d]`` tensors, each ``d`` in ``widths`` and approximation."""
    _warm(
        launch.gelu_mul_backward_triton, device, dtype, widths, _approximations(approximate), pair=True, backward=True
    )
