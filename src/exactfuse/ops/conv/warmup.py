"""Warmup of the conv family: the launches ``exactfuse.warmup`` makes so that no kernel compiles inside a
CUDA-graph capture. Each hook is named for its op, whose declaration in ``__init__.py`` takes it
(``op(..., warmup=warmup.short_conv)``).

Each call is one request of one row on placeholder tensors (zeros; a state pool of three slots) in the
layout, mode and optional arguments of a specialization. Row, request and slot counts are not
specialized, so any batch is covered.
"""

from __future__ import annotations

import inspect
import itertools

import torch

from exactfuse.ops.conv import launch, native

LAYOUTS = ("cw", "wc")  # storage [slot, C, W] / [slot, W, C], both viewed as logical [slot, C, W]


def _state(slots: int, C: int, W: int, layout: str, dtype, device) -> torch.Tensor:
    """A state pool, logical ``[slots, C, W]``, stored as ``layout``."""
    if layout == "cw":
        return torch.zeros((slots, C, W), dtype=dtype, device=device)
    return torch.zeros((slots, W, C), dtype=dtype, device=device).transpose(1, 2)


def schema_args(spec, args: tuple, kwargs: dict) -> tuple:
    """Every argument positional, in the order of ``spec``'s parameters (the op's function in ``native.py``,
    whose signature is the registered schema's), as the op's calls pass them."""
    bound = inspect.signature(spec).bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args)


def _weight_dtypes(dtype, fp32_weights) -> list:
    """The weight dtypes to warm up: x's; and fp32 (Dao's convention) when ``True in fp32_weights`` and x
    is 16-bit."""
    return [dtype] + ([torch.float32] if True in fp32_weights and dtype != torch.float32 else [])


def _int32(values, device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device)


def _short_conv_args(mode, *, C, K, D, sql, layout, outer, extra, init, dtype, device) -> tuple:
    """One request of one row in ``mode``; ``extra`` rows outside the call (a token map) when 1."""
    N, SL = 1 + extra, (K - 1) * D
    W = SL + (sql - 1 if mode == "spec" else 0) + (layout == "wc")
    rows = [torch.zeros((N, C), dtype=dtype, device=device) for _ in range(3 if outer else 2)]
    weight = torch.zeros((C, K), dtype=dtype, device=device)
    kwargs = {"conv_mode": mode, "dilation": D}
    if mode != "decode":
        kwargs["query_start_loc"] = _int32([0, 1], device)
    if mode == "spec":
        kwargs["num_accepted_tokens"] = _int32([1], device)
        kwargs["spec_query_len"] = sql
    if init and mode != "spec":
        kwargs["has_initial_state"] = torch.ones((1,), dtype=torch.bool, device=device)
    if extra:
        kwargs["token_indices"] = torch.zeros((1,), dtype=torch.int64, device=device)
    if outer:
        kwargs["outer_residual"] = rows[2]
    args = (rows[0], rows[1], _state(3, C, W, layout, dtype, device), weight, _int32([1], device))
    return schema_args(native.short_conv, args, kwargs)


def short_conv(
    device: torch.device,
    dtype: torch.dtype,
    *,
    channels=(10240,),
    kernel_sizes=(4,),
    dilations=(3,),
    spec_query_lens=(4,),
    layouts=LAYOUTS,
    **other_ops_options,
) -> None:
    """Compile every specialization ``short_conv`` can launch for these model constants, through the
    real launcher: mode x layout x (outer residual or not) x (token map or not), decode with and without
    ``has_initial_state``."""
    for C, K, D, sql, layout, outer, extra in itertools.product(
        channels, kernel_sizes, dilations, spec_query_lens, layouts, (True, False), (0, 1)
    ):
        kw = {"C": C, "K": K, "D": D, "sql": sql, "layout": layout, "outer": outer, "extra": extra}
        for mode, init in (("decode", True), ("decode", False), ("spec", True), ("prefill", True)):
            launch.short_conv_triton(*_short_conv_args(mode, init=init, dtype=dtype, device=device, **kw))


def causal_conv1d(
    device, dtype, *, channels=(10240,), kernel_sizes=(4,), dilations=(1,), layouts=LAYOUTS, packed=(False,),
    fp32_weights=(False,), **other_ops_options,
) -> None:  # fmt: skip
    """Every ``causal_conv1d`` specialization for these constants: bias or not, SiLU or none, a state
    with or without initial states, or none; with ``packed=(False, True)`` also the stateless launch
    with a ``seq_idx`` (Dao's packed sequences), and with ``fp32_weights=(False, True)`` each launch again
    with fp32 weight and bias: both compiled only when asked for."""
    for w_dtype, C, K, D, layout, bias, act in itertools.product(
        _weight_dtypes(dtype, fp32_weights), channels, kernel_sizes, dilations, layouts, (True, False), ("silu", None)
    ):
        SL = (K - 1) * D
        variants = [(True, True, False), (True, False, False), (False, False, False)]
        if True in packed and layout == layouts[0]:  # stateless: the state layout does not matter
            variants.append((False, False, True))
        for state, init, seq in variants:
            args = (
                torch.zeros((1, C), dtype=dtype, device=device),
                torch.zeros((C, K), dtype=w_dtype, device=device),
                torch.zeros((C,), dtype=w_dtype, device=device) if bias else None,
            )
            kwargs = {"activation": act, "dilation": D, "query_start_loc": _int32([0, 1], device)}
            if state:
                kwargs["conv_state"] = _state(4, C, SL + (layout == "wc"), layout, dtype, device)
                kwargs["state_indices"] = _int32([1], device)
                if init:
                    kwargs["has_initial_state"] = torch.zeros((1,), dtype=torch.bool, device=device)
            if seq:
                kwargs["seq_idx"] = _int32([0], device)
            launch.causal_conv1d_triton(*schema_args(native.causal_conv1d, args, kwargs))


def causal_conv1d_update(
    device, dtype, *, channels=(10240,), kernel_sizes=(4,), dilations=(1,), spec_query_lens=(4,),
    layouts=LAYOUTS, fp32_weights=(False,), **other_ops_options,
) -> None:  # fmt: skip
    """Every ``causal_conv1d_update`` specialization: ``[B, C]``, ``[B, Lq, C]``, speculative, bias or
    not, SiLU or none; again with fp32 weight and bias when ``fp32_weights=(False, True)`` asks for it."""
    for w_dtype, C, K, D, sql, layout, bias, act in itertools.product(
        _weight_dtypes(dtype, fp32_weights),
        channels,
        kernel_sizes,
        dilations,
        spec_query_lens,
        layouts,
        (True, False),
        ("silu", None),
    ):
        SL = (K - 1) * D
        for Lq, spec in ((None, False), (sql, False), (sql, True)):
            W = SL + ((Lq or 1) - 1 if spec else 0) + (layout == "wc")
            args = (
                torch.zeros((1, C) if Lq is None else (1, Lq, C), dtype=dtype, device=device),
                _state(3, C, W, layout, dtype, device),
                torch.zeros((C, K), dtype=w_dtype, device=device),
                torch.zeros((C,), dtype=w_dtype, device=device) if bias else None,
            )
            kwargs = {"dilation": D, "state_indices": _int32([1], device), "activation": act}
            if spec:
                kwargs["num_accepted_tokens"] = _int32([1], device)
            launch.causal_conv1d_update_triton(*schema_args(native.causal_conv1d_update, args, kwargs))


def _stateless_variants(device, dtype, channels, kernel_sizes, dilations, packed, fp32_weights):
    """``causal_conv1d_fn``'s arguments for every specialization: bias or not, SiLU or none, ``seq_idx``
    where ``packed`` asks for it, fp32 weights where ``fp32_weights`` does."""
    for w_dtype, C, K, D, bias, act, seq in itertools.product(
        _weight_dtypes(dtype, fp32_weights), channels, kernel_sizes, dilations, (True, False), ("silu", None), packed
    ):
        yield (
            torch.zeros((1, C), dtype=dtype, device=device),
            torch.zeros((C, K), dtype=w_dtype, device=device),
            torch.zeros((C,), dtype=w_dtype, device=device) if bias else None,
            act,
            D,
            _int32([0, 1], device),
            _int32([0], device) if seq else None,
        )


def causal_conv1d_fn(
    device, dtype, *, channels=(10240,), kernel_sizes=(4,), dilations=(1,), packed=(False,), fp32_weights=(False,),
    **other_ops_options,
) -> None:  # fmt: skip
    """The stateless forward launches (the kernels ``causal_conv1d``'s warmup compiles without a state)."""
    for args in _stateless_variants(device, dtype, channels, kernel_sizes, dilations, packed, fp32_weights):
        launch.causal_conv1d_fn_triton(*args)


def causal_conv1d_fn_backward(
    device, dtype, *, channels=(10240,), kernel_sizes=(4,), dilations=(1,), packed=(False,), fp32_weights=(False,),
    **other_ops_options,
) -> None:  # fmt: skip
    """Both gradient kernels for every stateless specialization."""
    for args in _stateless_variants(device, dtype, channels, kernel_sizes, dilations, packed, fp32_weights):
        launch.causal_conv1d_fn_backward_triton(torch.zeros_like(args[0]), *args)
