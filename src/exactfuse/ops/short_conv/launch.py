"""Host launchers of the conv family's kernels (``triton.py``): one row launch, then in spec and prefill
mode the state write-back launch; and the three ops' Triton providers.
"""

from __future__ import annotations

import torch
import triton

from exactfuse.ops.fastmath import chosen_formula
from exactfuse.ops.short_conv import heuristics, native
from exactfuse.ops.short_conv.triton import INIT_CODES, MODE_CODES, conv_rows_kernel, conv_state_kernel
from exactfuse.utils import empty, is_symbolic

NO_ACTIVATION = -1  # conv_rows_kernel's ACT without an activation (else a fastmath formula id)


def launch_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    mode: str,
    dilation: int,
    conv_state: torch.Tensor | None,
    state_indices: torch.Tensor | None,
    query_start_loc: torch.Tensor | None,
    num_accepted_tokens: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    init: str,
    spec_query_len: int,
    token_indices: torch.Tensor | None,
    null_slot: int,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    residual: torch.Tensor | None = None,
    outer_residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    config: heuristics.ConvConfig | None = None,
) -> None:
    """Launch the row kernel, then (spec, prefill, with a state) the write-back kernel.

    Arguments as :func:`exactfuse.ops.short_conv.native.conv_reference`; ``out [L, C]`` receives the
    conv output when there is no ``residual``; ``config`` (sweeps, tests) replaces
    ``heuristics.conv_config``'s choice. Nothing here branches on a row, request or slot count:
    the grids are expressions in them, and an empty grid launches nothing. The kernels read
    ``query_start_loc`` as int32: an int64 one (FLA's ``cu_seqlens``) is converted here, one device op
    (the eager check has bounded its values by the row count).
    """
    if query_start_loc is not None and query_start_loc.dtype == torch.int64:
        query_start_loc = query_start_loc.to(torch.int32)
    N, C = x.shape
    K = weight.shape[1]
    SL = (K - 1) * dilation
    SQL = spec_query_len if mode == "spec" else 1
    L = token_indices.shape[0] if token_indices is not None else N
    R = L if mode == "decode" else query_start_loc.shape[0] - 1
    has_state = conv_state is not None
    state = conv_state if has_state else x
    s_strides = conv_state.stride() if has_state else (0, 0, 0)
    contiguous = not is_symbolic(s_strides[1]) and s_strides[1] == 1  # a symbolic stride is not 1
    cfg = config or heuristics.conv_config(C, SL + SQL - 1, mode, contiguous)
    slots = conv_state.shape[0] if has_state else 1
    flags = dict(
        MODE=MODE_CODES[mode],
        K=K,
        D=dilation,
        SQL=SQL,
        HAS_SID=state_indices is not None,
        INIT=INIT_CODES[init],
        HAS_TOKEN_MAP=token_indices is not None,
    )
    sid = state_indices if state_indices is not None else x
    qsl = query_start_loc if query_start_loc is not None else x
    acc = num_accepted_tokens if num_accepted_tokens is not None else x
    hinit = has_initial_state if has_initial_state is not None else x
    tok = token_indices if token_indices is not None else x
    sid_stride = state_indices.stride(0) if state_indices is not None else 0
    target = residual if residual is not None else out
    act = chosen_formula("silu", x.dtype, x.device) if activation == "silu" else NO_ACTIVATION
    torch.library.wrap_triton(conv_rows_kernel)[(triton.cdiv(L, cfg.BT), triton.cdiv(C, cfg.BC))](
        x, weight, bias if bias is not None else x, target, outer_residual if outer_residual is not None else x,
        target, state, sid, qsl, acc, hinit, tok,
        L, R, N, C, slots, null_slot,
        x.stride(0), target.stride(0), outer_residual.stride(0) if outer_residual is not None else 0,
        target.stride(0), weight.stride(0), weight.stride(1),
        *s_strides, sid_stride,
        HAS_STATE=has_state, HAS_RESIDUAL=residual is not None, HAS_OUTER=outer_residual is not None,
        HAS_BIAS=bias is not None, ACT=act, BC=cfg.BC, BW=cfg.BW, BT=cfg.BT,
        UNROLL=cfg.unroll if mode != "decode" else 1, num_warps=cfg.num_warps, **flags,
    )  # fmt: skip
    if mode != "decode" and has_state:
        torch.library.wrap_triton(conv_state_kernel)[(R, triton.cdiv(C, cfg.BC_STATE))](
            x, state, sid, qsl, acc, hinit, tok,
            L, R, N, C, slots, null_slot,
            x.stride(0), *s_strides, sid_stride,
            BC=cfg.BC_STATE, BW=cfg.BW, num_warps=cfg.num_warps, **flags,
        )  # fmt: skip


def short_conv_triton(
    x: torch.Tensor,
    residual: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    state_indices: torch.Tensor,
    conv_mode: str,
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    spec_query_len: int = 1,
    token_indices: torch.Tensor | None = None,
    outer_residual: torch.Tensor | None = None,
) -> None:
    launch_short(
        x, residual, conv_state, weight, state_indices, conv_mode, dilation, query_start_loc, num_accepted_tokens,
        has_initial_state, spec_query_len, token_indices, outer_residual,
    )  # fmt: skip


def launch_short(
    x, residual, conv_state, weight, state_indices, conv_mode, dilation, query_start_loc, num_accepted_tokens,
    has_initial_state, spec_query_len, token_indices, outer_residual, config: heuristics.ConvConfig | None = None,
) -> None:  # fmt: skip
    """short_conv's launch (arguments as the op's); ``config`` for the decode sweep."""
    init = "always" if has_initial_state is None or conv_mode == "spec" else "tensor"
    launch_conv(
        x,
        weight,
        mode=conv_mode,
        dilation=dilation,
        conv_state=conv_state,
        state_indices=state_indices,
        query_start_loc=query_start_loc,
        num_accepted_tokens=num_accepted_tokens if conv_mode == "spec" else None,
        has_initial_state=has_initial_state if init == "tensor" else None,
        init=init,
        spec_query_len=spec_query_len,
        token_indices=token_indices,
        null_slot=0,
        residual=residual,
        outer_residual=outer_residual,
        config=config,
    )


def causal_conv1d_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    conv_state: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    out = empty(x.shape, x.dtype, x.device)
    launch_causal(
        x, weight, bias, activation, dilation, conv_state, query_start_loc, state_indices, has_initial_state,
        pad_slot_id, out,
    )  # fmt: skip
    return out


def launch_causal(
    x, weight, bias, activation, dilation, conv_state, query_start_loc, state_indices, has_initial_state,
    pad_slot_id, out: torch.Tensor, config: heuristics.ConvConfig | None = None,
) -> None:  # fmt: skip
    """causal_conv1d's launch into ``out`` (arguments as the op's); ``config`` for the tile sweep."""
    launch_conv(
        x,
        weight,
        mode="prefill",
        dilation=dilation,
        conv_state=conv_state,
        state_indices=state_indices,
        query_start_loc=native.one_sequence(x) if query_start_loc is None else query_start_loc,
        num_accepted_tokens=None,
        has_initial_state=has_initial_state,
        init="never" if has_initial_state is None else "tensor",
        spec_query_len=1,
        token_indices=None,
        null_slot=pad_slot_id,
        bias=bias,
        activation=activation,
        out=out,
        config=config,
    )


def causal_conv1d_update_triton(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    history_at: str = "start",
) -> torch.Tensor:
    out = empty(x.shape, x.dtype, x.device)
    if history_at == "end":  # Dao's wide window: its head shifted here, the kernels on the last SL positions
        keep = conv_state.shape[2] - (weight.shape[1] - 1) * dilation
        native.shift_head(x if x.dim() == 3 else x[:, None], conv_state, state_indices, pad_slot_id, keep)
        conv_state = conv_state[:, :, keep:]
    if x.dim() == 2:
        mode, rows, qsl, sql = "decode", x, None, 1
    else:
        B, Lq, C = x.shape
        rows, sql, qsl = x.reshape(B * Lq, C), Lq, native.uniform_starts(B, Lq, x.device)
        mode = "prefill" if num_accepted_tokens is None else "spec"
    launch_conv(
        rows,
        weight,
        mode=mode,
        dilation=dilation,
        conv_state=conv_state,
        state_indices=state_indices,
        query_start_loc=qsl,
        num_accepted_tokens=num_accepted_tokens if mode == "spec" else None,
        has_initial_state=None,
        init="always",
        spec_query_len=sql,
        token_indices=None,
        null_slot=pad_slot_id,
        bias=bias,
        activation=activation,
        out=out.view(rows.shape),
    )
    return out
