"""Declarations of ``short_conv`` (PLE), ``causal_conv1d`` and ``causal_conv1d_update`` (Mamba), and of
``causal_conv1d_fn`` (the stateless conv, differentiable) with its backward op ``causal_conv1d_fn_backward``.

Spec in ``native.py`` (its host-side state-window steps in ``windows.py``), argument checks in
``checks.py``, the launchers, providers and what they take in ``launch.py``, the forward kernels in
``update.py`` (decode), ``spec.py``, ``prefill.py``, ``lean.py`` and ``state.py`` (their helpers in
``rows.py``, ``slots.py``, ``rounding.py`` and ``decode.py``), the backward's in ``grad_kernels.py``, the
launch rule in ``heuristics.py``, the warmup hooks in ``warmup.py``.
Inputs, benchmark grids and cost live in the test kit (``exactfuse.testing.cases.conv``, ``conv_grids``), peers
in the bench (``exactfuse.bench.peers``).
"""

from __future__ import annotations

import torch

from exactfuse.ops.conv import (
    calls,
    checks,
    grad_kernels,
    launch,
    lean,
    native,
    native_grads,
    prefill,
    spec,
    state,
    update,
    warmup,
    windows,
)
from exactfuse.registry import Bitwise, KeywordOp, Tolerance, op, platform
from exactfuse.registry.autograd import requires_grad
from exactfuse.registry.contracts import Float64Relative, PerOutput

# Bitwise on CUDA: outputs and every slot of the state. The kernel sums the taps in the spec's order
# with the spec's roundings and evaluates SiLU as ATen's CUDA kernel does (libdevice exp, IEEE
# division). Under the Triton interpreter the reference's SiLU runs on the CPU, whose vectorized exp
# (SLEEF) is not numpy's: on 2M normal fp32 inputs they differ in 17% of fp32 SiLU results and in 419
# fp16 ones, so the CPU contract is the per-dtype Tolerance. The interpreter tests compare bit for bit
# against the same spec evaluated with the interpreter's exp (tests/ops/test_short_conv.py), and
# states, which are copies, bit for bit against the spec itself.
CONTRACT = Bitwise()
INTERPRETER_CONTRACT = Tolerance()
KERNELS = [
    update.conv_decode_kernel,
    spec.conv_spec_kernel,
    prefill.conv_prefill_kernel,
    lean.conv_lean_kernel,
    state.conv_state_kernel,
]


_short_conv = op(
    native.short_conv,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_short_conv,
    mutates_args=("residual", "conv_state"),
    compiler="visible",
    warmup=warmup.short_conv,
)
_short_conv.provider(
    "triton", supported=platform.triton_available, supports_args=launch.short_conv_supports, kernels=KERNELS
)(launch.short_conv_triton)

_causal_conv1d = op(
    native.causal_conv1d,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_causal_conv1d,
    mutates_args=("conv_state",),
    compiler="visible",
    warmup=warmup.causal_conv1d,
)
_causal_conv1d.provider(
    "triton", supported=platform.triton_available, supports_args=launch.causal_conv1d_supports, kernels=KERNELS
)(launch.causal_conv1d_triton)

_causal_conv1d_update = op(
    native.causal_conv1d_update,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_causal_conv1d_update,
    mutates_args=("conv_state",),
    compiler="visible",
    warmup=warmup.causal_conv1d_update,
)
_causal_conv1d_update.provider(
    "triton", supported=platform.triton_available, supports_args=launch.causal_conv1d_update_supports, kernels=KERNELS
)(launch.causal_conv1d_update_triton)


# ------------------------------------------------------------------ the stateless conv and its backward
# The same spec and kernel as causal_conv1d without a state; an op of its own because an op that writes a
# state cache in place cannot have a backward (docs/contracts.md, "Gradients").
_causal_conv1d_fn = op(
    native.causal_conv1d_fn,
    contract=CONTRACT,
    interpreter_contract=INTERPRETER_CONTRACT,
    check=checks.check_causal_conv1d_fn,
    compiler="visible",
    warmup=warmup.causal_conv1d_fn,
)
_causal_conv1d_fn.provider(
    "triton", supported=platform.triton_available, supports_args=launch.causal_conv1d_fn_supports, kernels=KERNELS
)(launch.causal_conv1d_fn_triton)


def _grad64(index: int):
    def reference(*args, **kwargs):
        return native_grads.conv_fn_grads64(*args, **kwargs)[index]

    return reference


# The backward sums over taps (dx) and over rows (d weight, d bias) in its own order, in fp32 with one
# rounding, where eager autograd rounds each tap's contribution to dx to x's dtype before adding it and
# orders the row sums by ATen's reduction: each output is judged against the float64 gradient of the same
# taps, no worse than twice eager's own error (docs/contracts.md). The row sums are a fixed tree per tile of
# rows, the tiles added in order: the same bits run to run.
BACKWARD_CONTRACT = PerOutput(
    ("d_x", Float64Relative(_grad64(0))),
    ("d_weight", Float64Relative(_grad64(1))),
    ("d_bias", Float64Relative(_grad64(2))),
    ("d_initial_states", Float64Relative(_grad64(3))),
)
causal_conv1d_fn_backward = op(
    native_grads.causal_conv1d_fn_backward,
    contract=BACKWARD_CONTRACT,
    check=checks.check_causal_conv1d_fn_backward,
    compiler="visible",
    warmup=warmup.causal_conv1d_fn_backward,
)
causal_conv1d_fn_backward.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=launch.causal_conv1d_fn_backward_supports,
    kernels=[grad_kernels.conv_grad_rows_kernel, grad_kernels.conv_grad_x_kernel],
)(launch.causal_conv1d_fn_backward_triton)


def _causal_conv1d_fn_grad(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    d_x, d_weight, d_bias, d_init = causal_conv1d_fn_backward(
        grad, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states
    )
    return d_x, d_weight, (d_bias if bias is not None else None), (d_init if initial_states is not None else None)


_causal_conv1d_fn.differentiable("x", "weight", "bias", "initial_states", backward=_causal_conv1d_fn_grad)


def _short_conv_call(
    x: torch.Tensor,
    residual: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    state_indices: torch.Tensor,
    *,
    mode: str,
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    spec_query_len: int = 1,
    token_indices: torch.Tensor | None = None,
    outer_residual: torch.Tensor | None = None,
) -> None:
    return _short_conv(
        x, residual, conv_state, weight, state_indices, mode, dilation, query_start_loc,
        num_accepted_tokens, has_initial_state, spec_query_len, token_indices, outer_residual,
    )  # fmt: skip


def _causal_conv1d_call(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    activation: str | None = "silu",
    dilation: int = 1,
    conv_state: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    pad_slot_id: int | None = None,
    null_block_id: int | None = None,
    seq_idx: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    history_at: str = "start",
    return_final_states: bool = False,
    final_states_out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    pad_slot_id = checks.resolve_pad_slot_id("causal_conv1d", pad_slot_id, null_block_id)
    activation = checks.resolve_activation(activation)
    qsl = checks.resolve_alias("causal_conv1d", "query_start_loc", query_start_loc, "cu_seqlens", cu_seqlens)
    rows, query_start_loc, seq_idx = checks.batch_rows("causal_conv1d", x, qsl, seq_idx)
    checks.check_history_at("causal_conv1d", history_at, conv_state)
    if return_final_states or final_states_out is not None:
        checks.check_final_states(return_final_states, final_states_out, conv_state, seq_idx)
    stateless = conv_state is None and (initial_states is not None or requires_grad((x, weight, bias), {}))
    if stateless:  # nothing written in place: the differentiable op (Dao's initial states are an input of it)
        if state_indices is not None or has_initial_state is not None:
            raise ValueError("causal_conv1d: state_indices and has_initial_state need a conv_state")
        out = _causal_conv1d_fn(rows, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states)
    elif initial_states is not None:
        raise ValueError("causal_conv1d: initial_states (Dao's) and conv_state (a slot cache) name two histories")
    else:
        out = _causal_conv1d(
            rows, weight, bias, activation, dilation, conv_state, query_start_loc, state_indices,
            has_initial_state, pad_slot_id, seq_idx, history_at,
        )  # fmt: skip
    if rows is not x:  # [B, T, C] in: its shape back (a 2-D call pays no view)
        out = out.view(x.shape)
    out = _plus_residual("causal_conv1d", out, residual)
    if not return_final_states:
        return out
    starts = calls.one_sequence(rows) if query_start_loc is None else query_start_loc
    final = windows.final_states(rows, initial_states, starts, (weight.shape[1] - 1) * dilation)
    if final_states_out is None:
        return out, final
    checks.check_final_states_out(final_states_out, final)
    return out, final_states_out.copy_(final)


def _plus_residual(op: str, out: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    """``out + residual`` (FLA's ``residual``): an elementwise add in x's dtype after the conv, as FLA's
    reference adds it; not fused into the kernels."""
    if residual is None:
        return out
    if not isinstance(residual, torch.Tensor) or residual.shape != out.shape or residual.dtype != out.dtype:
        shape, dtype = tuple(out.shape), out.dtype
        raise ValueError(f"{op}: residual must be a tensor of x's shape {shape} and dtype {dtype}")
    return out + residual


def _causal_conv1d_update_call(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    activation: str | None = "silu",
    dilation: int = 1,
    state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    pad_slot_id: int | None = None,
    null_block_id: int | None = None,
    history_at: str = "start",
    residual: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    pad_slot_id = checks.resolve_pad_slot_id("causal_conv1d_update", pad_slot_id, null_block_id)
    activation = checks.resolve_activation(activation)
    if cache_seqlens is not None:  # Dao's circular state: the op runs on each request's gathered history
        checks.check_cache_seqlens(x, conv_state, num_accepted_tokens, history_at, cache_seqlens)
        rows = x if x.dim() == 3 else x[:, None]
        history, indices = windows.circular_window(
            rows, conv_state, weight, dilation, state_indices, pad_slot_id, cache_seqlens
        )
        out = _causal_conv1d_update(x, history, weight, bias, activation, dilation, indices, None, -1, "start")
        windows.store_circular(rows, conv_state, state_indices, pad_slot_id, cache_seqlens)
    else:
        out = _causal_conv1d_update(
            x, conv_state, weight, bias, activation, dilation, state_indices, num_accepted_tokens, pad_slot_id,
            history_at,
        )  # fmt: skip
    return _plus_residual("causal_conv1d_update", out, residual)


short_conv = KeywordOp(_short_conv, _short_conv_call)
causal_conv1d = KeywordOp(_causal_conv1d, _causal_conv1d_call)
causal_conv1d_update = KeywordOp(_causal_conv1d_update, _causal_conv1d_update_call)
causal_conv1d_fn = _causal_conv1d_fn

__all__ = ["causal_conv1d", "causal_conv1d_fn", "causal_conv1d_fn_backward", "causal_conv1d_update", "short_conv"]
