"""How each public conv call reads: one :class:`ConvCall`, the arguments of
:func:`~exactfuse.ops.conv.native.conv_reference`, which a ``short_conv``, ``causal_conv1d`` or
``causal_conv1d_update`` call stands for (mode, rows, request starts, how histories are initialised, the null
slot). The spec (``native.py``), the checks (``checks.py``), the launch (``launch.py``) and the cost
(``exactfuse.testing.cases.conv``) all read a call through these functions, so the argument list is written
here alone."""

from __future__ import annotations

from typing import NamedTuple

import torch


class ConvCall(NamedTuple):
    """One call of the conv family (docs/short_conv.md): the spec :func:`~exactfuse.ops.conv.native.conv_reference`
    computes it, ``checks.check_conv`` validates it, ``launch.launch_conv`` launches it.

    ``x [N, C]`` physical rows; ``mode`` ``"decode"`` / ``"spec"`` / ``"prefill"``; ``conv_state`` a logical
    ``[slots, C, W]`` cache or None; ``state_indices`` each request's slot (None: request ``r`` uses slot ``r``);
    ``query_start_loc [R + 1]`` the requests' first rows (spec, prefill); ``num_accepted_tokens`` (spec);
    ``has_initial_state`` read per request when ``init == "tensor"`` (``"always"``: every history read,
    ``"never"``: zeros); ``spec_query_len`` (spec); ``token_indices`` the logical -> physical row map;
    ``null_slot`` the slot index of a request without a state; ``residual`` / ``outer_residual`` (short_conv's
    fused adds); ``seq_idx`` (packed sequences). A named tuple rather than a frozen dataclass: it is built
    on every eager call, and a tuple is built in half a frozen dataclass's time (2.1 against 4.5 µs on a
    2-core CPU, timeit)."""

    x: torch.Tensor
    weight: torch.Tensor
    mode: str
    dilation: int
    conv_state: torch.Tensor | None
    state_indices: torch.Tensor | None
    query_start_loc: torch.Tensor | None
    num_accepted_tokens: torch.Tensor | None
    has_initial_state: torch.Tensor | None
    init: str
    spec_query_len: int
    token_indices: torch.Tensor | None
    null_slot: int
    bias: torch.Tensor | None = None
    activation: str | None = "silu"
    residual: torch.Tensor | None = None
    outer_residual: torch.Tensor | None = None
    seq_idx: torch.Tensor | None = None


def short_conv_call(
    x, residual, conv_state, weight, state_indices, conv_mode, dilation=1, query_start_loc=None,
    num_accepted_tokens=None, has_initial_state=None, spec_query_len=1, token_indices=None, outer_residual=None,
) -> ConvCall:  # fmt: skip
    """A ``short_conv`` call: its mode; ``has_initial_state`` read per request in decode and prefill
    when given (else every slot's history is read); slot 0 the null slot."""
    init = "always" if has_initial_state is None or conv_mode == "spec" else "tensor"
    return ConvCall(
        x=x, weight=weight, mode=conv_mode, dilation=dilation, conv_state=conv_state, state_indices=state_indices,
        query_start_loc=query_start_loc, num_accepted_tokens=num_accepted_tokens,
        has_initial_state=has_initial_state, init=init, spec_query_len=spec_query_len, token_indices=token_indices,
        null_slot=0, residual=residual, outer_residual=outer_residual,
    )  # fmt: skip


def causal_conv1d_call(
    x, weight, bias=None, activation="silu", dilation=1, conv_state=None, query_start_loc=None,
    state_indices=None, has_initial_state=None, pad_slot_id=-1, seq_idx=None, history_at="start",
) -> ConvCall:  # fmt: skip
    """A ``causal_conv1d`` call (``history_at="start"``, or the view of a wide window's history that
    ``windows.prefill_end_history`` returns): prefill of its sequences (one over all rows without
    ``query_start_loc``), histories of zeros without ``has_initial_state``, ``pad_slot_id`` the null slot,
    ``seq_idx`` per row."""
    return ConvCall(
        x=x, weight=weight, mode="prefill", dilation=dilation, conv_state=conv_state, state_indices=state_indices,
        query_start_loc=one_sequence(x) if query_start_loc is None else query_start_loc, num_accepted_tokens=None,
        has_initial_state=has_initial_state, init="never" if has_initial_state is None else "tensor",
        spec_query_len=1, token_indices=None, null_slot=pad_slot_id, bias=bias, activation=activation,
        seq_idx=seq_idx,
    )  # fmt: skip


def causal_conv1d_update_call(
    x, conv_state, weight, bias=None, activation="silu", dilation=1, state_indices=None, num_accepted_tokens=None,
    pad_slot_id=-1, history_at="start",
) -> ConvCall:  # fmt: skip
    """A ``causal_conv1d_update`` call (``history_at="start"``, or the view :func:`end_history` returns):
    ``[B, C]`` is decode; ``[B, Lq, C]`` is ``B`` sequences of ``Lq`` rows, prefill, or spec with
    ``num_accepted_tokens``; every history is read; ``pad_slot_id`` the null slot."""
    if x.dim() == 2:
        mode, rows, qsl, sql = "decode", x, None, 1
    else:
        B, Lq, C = x.shape
        rows, qsl, sql = x.reshape(B * Lq, C), uniform_starts(B, Lq, x.device), Lq
        mode = "prefill" if num_accepted_tokens is None else "spec"
    return ConvCall(
        x=rows, weight=weight, mode=mode, dilation=dilation, conv_state=conv_state, state_indices=state_indices,
        query_start_loc=qsl, num_accepted_tokens=num_accepted_tokens if x.dim() == 3 else None,
        has_initial_state=None, init="always", spec_query_len=sql, token_indices=None, null_slot=pad_slot_id,
        bias=bias, activation=activation,
    )  # fmt: skip


def one_sequence(x: torch.Tensor) -> torch.Tensor:
    """``query_start_loc`` of one sequence over all of ``x``'s rows: ``[0, T]`` int32."""
    return torch.arange(2, dtype=torch.int32, device=x.device) * x.shape[0]


def uniform_starts(batch: int, qlen: int, device: torch.device) -> torch.Tensor:
    """``query_start_loc`` of ``batch`` sequences of ``qlen`` rows each: ``[0, qlen, 2·qlen, ...]`` int32."""
    return torch.arange(batch + 1, dtype=torch.int32, device=device) * qlen
