"""Argument checks of the conv family (passed to the registry as ``check=``); errors name the argument."""

from __future__ import annotations

import torch

from exactfuse.ops.conv import calls
from exactfuse.ops.conv.native import ACTIVATIONS, FLOAT_DTYPES, HISTORY_AT, INDEX_DTYPES, MODES
from exactfuse.utils import size_at_least, sizes_equal

PAD_SLOT_ID = -1  # the default pad_slot_id: Dao's causal-conv1d and vLLM's former PAD_SLOT_ID
NULL_BLOCK_ID = 0  # vLLM's current marker of a padded request (vllm/v1/attention/backends/utils.py)


def resolve_pad_slot_id(op: str, pad_slot_id: int | None, null_block_id: int | None) -> int:
    """The pad index of a public call: ``pad_slot_id``, or ``null_block_id`` (vLLM's current keyword, whose
    value there is ``NULL_BLOCK_ID = 0``), or :data:`PAD_SLOT_ID` when neither is given; two different
    values are an error."""
    if null_block_id is None:
        return PAD_SLOT_ID if pad_slot_id is None else pad_slot_id
    if pad_slot_id is not None and pad_slot_id != null_block_id:
        _fail(op, f"pad_slot_id={pad_slot_id} and null_block_id={null_block_id} name two pad indices; pass one")
    return null_block_id


def resolve_activation(activation: str | None) -> str | None:
    """``"swish"`` (FLA's and vLLM's name) is ``"silu"``."""
    return "silu" if activation == "swish" else activation


def resolve_alias(op: str, name: str, value, alias: str, alias_value):
    """``value``, or ``alias_value`` given under the peer's name ``alias`` (both given: an error)."""
    if alias_value is None:
        return value
    if value is not None:
        _fail(op, f"{name} and {alias} name the same argument; pass one")
    return alias_value


def batch_rows(op: str, x, query_start_loc, seq_idx):
    """A public call's ``x`` as rows: ``[T, C]`` as given; ``[B, T, C]`` (FLA's and Dao's batch-first
    layout) as ``B`` sequences of ``T`` rows, or with ``query_start_loc`` (FLA's ``cu_seqlens``, ``B`` = 1)
    the one row of packed sequences; a ``[B, T]`` ``seq_idx`` (Dao's) flattened with it."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        return x, query_start_loc, seq_idx
    B, T, C = x.shape
    if query_start_loc is not None and B != 1:
        _fail(op, f"x [B, T, C] with query_start_loc / cu_seqlens must have B = 1 (packed sequences), got B = {B}")
    if query_start_loc is None:
        query_start_loc = calls.uniform_starts(B, T, x.device)
    if seq_idx is not None and seq_idx.dim() == 2:
        seq_idx = seq_idx.reshape(-1)
    return x.reshape(B * T, C), query_start_loc, seq_idx


def check_history_at(op: str, history_at: str, conv_state) -> None:
    """``history_at`` of a prefill call: ``"end"`` needs a state window at least ``SL`` wide (the checks of the
    op then see the view of its last ``SL`` positions)."""
    if history_at not in HISTORY_AT:
        _fail(op, f"history_at must be 'start' or 'end', got {history_at!r}")
    if history_at == "end" and conv_state is None:
        _fail(op, "history_at='end' describes a conv_state; pass one")


def check_final_states(return_final_states, final_states_out, conv_state, seq_idx) -> None:
    """Dao's ``return_final_states`` / ``final_states_out``: each sequence's last ``SL`` inputs, for a call
    without a slot cache (the cache keeps its own history) and without ``seq_idx`` (as Dao refuses it)."""
    op = "causal_conv1d"
    if final_states_out is not None and not return_final_states:
        _fail(op, "final_states_out is written only with return_final_states=True")
    if return_final_states and conv_state is not None:
        _fail(op, "return_final_states: a conv_state (slot cache) keeps the final history itself")
    if return_final_states and seq_idx is not None:
        _fail(op, "return_final_states is not taken with seq_idx (packed sequences have no final state each)")


def check_final_states_out(final_states_out, final: torch.Tensor) -> None:
    """``final_states_out``: a tensor of the final states' shape ``[R, C, SL]``, dtype and device."""
    if (
        not isinstance(final_states_out, torch.Tensor)
        or final_states_out.shape != final.shape
        or final_states_out.dtype != final.dtype
        or final_states_out.device != final.device
    ):
        want = f"{list(final.shape)} {final.dtype} on {final.device}"
        _fail("causal_conv1d", f"final_states_out must be {want} (each sequence's last (K-1)*dilation inputs)")


def check_cache_seqlens(x, conv_state, num_accepted_tokens, history_at, cache_seqlens) -> None:
    """Dao's ``cache_seqlens``: ``[>= B]`` int32 on x's device, a circular state of its own convention."""
    op = "causal_conv1d_update"
    if num_accepted_tokens is not None or history_at != "start":
        _fail(op, "cache_seqlens (Dao's circular state) takes neither num_accepted_tokens nor history_at='end'")
    _tensor(op, "cache_seqlens", cache_seqlens, dim=1, dtypes=(torch.int32, torch.int64), device=x.device)
    if not size_at_least(cache_seqlens.shape[0], x.shape[0]):
        _fail(op, f"cache_seqlens must hold one entry per request (>= {x.shape[0]}), got {cache_seqlens.shape[0]}")
    if not isinstance(conv_state, torch.Tensor) or conv_state.dim() != 3 or conv_state.shape[2] == 0:
        _fail(op, "cache_seqlens needs a conv_state [slots, C, W] with W >= 1")


# ------------------------------------------------------------------------- argument checks
def _fail(op: str, message: str, error: type = ValueError):
    raise error(f"{op}: {message}")


def _tensor(op, name, t, *, dim, dtypes, device, optional=False):
    if t is None:
        if not optional:
            _fail(op, f"{name} is required here", ValueError)
        return
    if not isinstance(t, torch.Tensor):
        _fail(op, f"{name} must be a torch.Tensor, got {type(t).__name__}", TypeError)
    if t.dim() != dim:
        _fail(op, f"{name} must be {dim}-D, got shape {list(t.shape)}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        _fail(op, f"{name} must be {names}, got {t.dtype}", TypeError)
    if device is not None and t.device != device:
        _fail(op, f"{name} must be on {device}, got {t.device}")


def _static_count(op, name, value):
    """``value`` a Python int >= 1. The kernels are compiled per value, so under torch.compile it must be a
    constant of the trace (a module attribute or a closure of a ``dynamic=False`` compile), not a symbol."""
    if isinstance(value, torch.SymInt):
        _fail(op, f"{name} must be an int >= 1 known when the graph is traced (a module attribute or a constant), "
                  f"got the symbol {value!r}: compile with dynamic=False or keep it off the compiled function's "
                  "arguments")  # fmt: skip
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(op, f"{name} must be an int >= 1, got {value!r}")


def _values_checkable(*tensors) -> bool:
    """Index values can be read here: plain tensors, eager, not inside a CUDA-graph capture."""
    if torch.compiler.is_compiling():
        return False
    present = [t for t in tensors if t is not None]
    if any(type(t) is not torch.Tensor or t.is_meta for t in present):
        return False
    return not (any(t.is_cuda for t in present) and torch.cuda.is_current_stream_capturing())


def check_conv(op: str, call: calls.ConvCall) -> None:
    """Validate a call of the conv family (:class:`~exactfuse.ops.conv.calls.ConvCall`, read by
    ``calls.short_conv_call`` and its siblings; ``init`` follows from ``has_initial_state``, which is what is
    checked); errors name the argument. Runs before any write.

    Index values (slots, token rows, request offsets) are checked only where they can be read without
    tracing or capture (:func:`_values_checkable`); there the kernel masks what it cannot trust.
    """
    x, weight = call.x, call.weight
    if call.mode not in MODES:
        _fail(op, f"mode must be one of {MODES}, got {call.mode!r}")
    for name in ("dilation", "spec_query_len"):
        _static_count(op, name, getattr(call, name))
    if call.activation not in ACTIVATIONS:
        _fail(op, f"activation must be None or 'silu', got {call.activation!r}")
    _tensor(op, "x", x, dim=2, dtypes=FLOAT_DTYPES, device=None)
    device, dtype, (N, C) = x.device, x.dtype, x.shape
    if x.stride(1) != 1 and C > 1:
        _fail(op, f"x must have a contiguous last dimension, got strides {tuple(x.stride())}")
    # fp32 weight and bias with 16-bit x: Dao's convention, the Mamba entry points only
    wide = (dtype,) if op == "short_conv" or dtype == torch.float32 else (dtype, torch.float32)
    _tensor(op, "weight", weight, dim=2, dtypes=wide, device=device)
    if weight.shape[0] != C or weight.shape[1] < 1:
        _fail(op, f"weight must be [C, K] = [{C}, K >= 1], got {list(weight.shape)}")
    K = weight.shape[1]
    SL = (K - 1) * call.dilation
    for name, t in (("residual", call.residual), ("outer_residual", call.outer_residual)):
        if t is not None:
            _tensor(op, name, t, dim=2, dtypes=(dtype,), device=device)
            if not all(sizes_equal(a, b) for a, b in zip(t.shape, x.shape, strict=True)):
                _fail(op, f"{name} must have x's shape {list(x.shape)}, got {list(t.shape)}")
            if t.stride(1) != 1 and C > 1:
                _fail(op, f"{name} must have a contiguous last dimension, got strides {tuple(t.stride())}")
    _tensor(op, "bias", call.bias, dim=1, dtypes=(weight.dtype,), device=device, optional=True)
    if call.bias is not None and call.bias.shape[0] != C:
        _fail(op, f"bias must be [C] = [{C}], got {list(call.bias.shape)}")
    _tensor(op, "token_indices", call.token_indices, dim=1, dtypes=INDEX_DTYPES, device=device, optional=True)
    L = call.token_indices.shape[0] if call.token_indices is not None else N
    needs_qsl = call.mode != "decode"
    _tensor(op, "seq_idx", call.seq_idx, dim=1, dtypes=(torch.int32,), device=device, optional=True)
    if call.seq_idx is not None:
        if not sizes_equal(call.seq_idx.shape[0], L):
            _fail(op, f"seq_idx must be [T] = [{L}] (one per row of x), got {list(call.seq_idx.shape)}")
        if call.conv_state is not None:
            _fail(op, "seq_idx (packed sequences) takes no conv_state: the sequences in a row have no history")
    _tensor(op, "conv_state", call.conv_state, dim=3, dtypes=(dtype,), device=device, optional=call.residual is None)
    if call.conv_state is None:
        for name, t in (("state_indices", call.state_indices), ("has_initial_state", call.has_initial_state)):
            if t is not None:
                _fail(op, f"{name} needs a conv_state")
    else:
        sql = call.spec_query_len if call.mode == "spec" else 1
        width = SL + sql - 1
        if call.conv_state.shape[1] != C or call.conv_state.shape[2] < width or call.conv_state.shape[0] < 1:
            _fail(
                op,
                f"conv_state must be [slots >= 1, C, W] with C = {C} and W >= (K-1)*dilation + SQL-1 = {width}, "
                f"got {list(call.conv_state.shape)}",
            )
    optional = op != "short_conv"
    _tensor(op, "state_indices", call.state_indices, dim=1, dtypes=(torch.int32,), device=device, optional=optional)
    if needs_qsl:
        _tensor(op, "query_start_loc", call.query_start_loc, dim=1, dtypes=INDEX_DTYPES, device=device)
    R = L if not needs_qsl else call.query_start_loc.shape[0] - 1
    if call.state_indices is not None and not size_at_least(call.state_indices.shape[0], R):
        what = "one per row (decode)" if not needs_qsl else "len(query_start_loc) - 1"
        _fail(op, f"state_indices must be [R] = [{R}] ({what}) or longer, got {list(call.state_indices.shape)}")
    if needs_qsl and call.query_start_loc.shape[0] < 1:
        _fail(op, "query_start_loc must be [R + 1] with R >= 0, got an empty tensor")
    if call.mode == "spec":
        _tensor(op, "num_accepted_tokens", call.num_accepted_tokens, dim=1, dtypes=(torch.int32,), device=device)
    elif call.num_accepted_tokens is not None and op == "short_conv":
        _fail(op, f"num_accepted_tokens is for mode='spec', got mode={call.mode!r}")
    need_init = call.mode == "prefill" and op == "short_conv"
    _tensor(op, "has_initial_state", call.has_initial_state, dim=1, dtypes=(torch.bool,), device=device,
            optional=not need_init)  # fmt: skip
    used = (
        ("num_accepted_tokens", call.num_accepted_tokens),
        ("has_initial_state", None if call.mode == "spec" else call.has_initial_state),
    )
    for name, t in used:
        if t is not None and not size_at_least(t.shape[0], R):
            _fail(op, f"{name} must have at least R = {R} entries, got {list(t.shape)}")
    if not _values_checkable(x, call.conv_state, call.state_indices, call.query_start_loc, call.token_indices):
        return
    _check_values(
        op, N, L, call.mode, call.spec_query_len, call.conv_state,
        call.state_indices[:R] if call.state_indices is not None else None, call.query_start_loc, call.token_indices,
        call.null_slot,
    )  # fmt: skip


def _check_values(op, N, L, mode, sql, conv_state, state_indices, qsl, token_indices, null_slot) -> None:
    """The index-value checks, with one device read for all of them."""
    checks: list[tuple[str, torch.Tensor]] = []
    if state_indices is not None and conv_state is not None:
        slots = conv_state.shape[0]
        ok = (state_indices >= 0) & (state_indices < slots)
        if null_slot is not None:
            ok |= state_indices == null_slot
        checks.append(
            (f"state_indices must lie in [0, slots = {slots})" + (f" or be {null_slot}" if null_slot else ""), ok.all())
        )
    if token_indices is not None:
        checks.append((f"token_indices must lie in [0, N = {N})", ((token_indices >= 0) & (token_indices < N)).all()))
    if qsl is not None and mode != "decode":
        lengths = qsl[1:] - qsl[:-1]
        ok = (qsl[0] >= 0) & (qsl[-1] <= L) & (lengths >= 0).all()
        checks.append((f"query_start_loc must be non-decreasing from >= 0 to <= {L} rows", ok))
        if mode == "spec":
            checks.append(
                (
                    f"query_start_loc: spec requests must have at most spec_query_len = {sql} rows",
                    (lengths <= sql).all(),
                )
            )
    if not checks:
        return
    passed = torch.stack([c for _, c in checks]).tolist()
    for (message, _), ok in zip(checks, passed, strict=True):
        if not ok:
            _fail(op, message)


def check_short_conv(*args, **kwargs) -> None:
    """``short_conv``'s arguments (the op's signature)."""
    call = calls.short_conv_call(*args, **kwargs)
    _tensor("short_conv", "residual", call.residual, dim=2, dtypes=FLOAT_DTYPES, device=None)
    check_conv("short_conv", call)


def check_causal_conv1d(
    x, weight, bias=None, activation="silu", dilation=1, conv_state=None, query_start_loc=None,
    state_indices=None, has_initial_state=None, pad_slot_id=-1, seq_idx=None, history_at="start",
) -> None:  # fmt: skip
    """``causal_conv1d``'s arguments (the op's signature); with ``history_at="end"`` the checks see the view
    of the window's last ``SL`` positions, which must exist."""
    op = "causal_conv1d"
    _tensor(op, "x", x, dim=2, dtypes=FLOAT_DTYPES, device=None)
    check_history_at(op, history_at, conv_state)
    if history_at == "end" and isinstance(dilation, int) and dilation >= 1:  # else check_conv names dilation
        _tensor(op, "conv_state", conv_state, dim=3, dtypes=FLOAT_DTYPES, device=None)
        _tensor(op, "weight", weight, dim=2, dtypes=FLOAT_DTYPES, device=None)
        keep = conv_state.shape[2] - (weight.shape[1] - 1) * dilation
        if keep < 0:
            _fail(op, f"conv_state's window W = {conv_state.shape[2]} is narrower than (K-1)·dilation")
        conv_state = conv_state[:, :, keep:]
    call = calls.causal_conv1d_call(
        x, weight, bias, activation, dilation, conv_state, query_start_loc, state_indices, has_initial_state,
        pad_slot_id, seq_idx,
    )  # fmt: skip
    check_conv(op, call)


def check_causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> None:
    """``causal_conv1d_fn``'s arguments: ``causal_conv1d``'s without a state, and initial states."""
    _check_stateless(
        "causal_conv1d_fn", x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states
    )


def _check_stateless(op, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states) -> None:
    _tensor(op, "x", x, dim=2, dtypes=FLOAT_DTYPES, device=None)
    call = calls.causal_conv1d_call(x, weight, bias, activation, dilation, None, query_start_loc, seq_idx=seq_idx)
    check_conv(op, call)
    if initial_states is None:
        return
    if seq_idx is not None:
        _fail(op, "initial_states and seq_idx cannot be combined (Dao's causal_conv1d_fn takes neither with the other)")
    _tensor(op, "initial_states", initial_states, dim=3, dtypes=(x.dtype,), device=x.device)
    R = call.query_start_loc.shape[0] - 1
    want = (R, x.shape[1], (weight.shape[1] - 1) * dilation)
    if tuple(initial_states.shape) != want:
        _fail(op, f"initial_states must be [R, C, (K-1)·dilation] = {list(want)}, got {list(initial_states.shape)}")


def check_causal_conv1d_fn_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> None:
    """The forward's arguments, then ``grad`` of x's shape, dtype and device."""
    op = "causal_conv1d_fn_backward"
    _check_stateless(op, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states)
    _tensor(op, "grad", grad, dim=2, dtypes=(x.dtype,), device=x.device)
    if grad.dim() != x.dim() or not all(sizes_equal(a, b) for a, b in zip(grad.shape, x.shape, strict=True)):
        _fail(op, f"grad must have x's shape {tuple(x.shape)}, got {tuple(grad.shape)}")


def check_causal_conv1d_update(
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
) -> None:
    op = "causal_conv1d_update"
    if history_at not in HISTORY_AT:
        _fail(op, f"history_at must be 'start' or 'end', got {history_at!r}")
    if history_at == "end" and num_accepted_tokens is not None:
        _fail(op, "history_at='end' (Dao's wide state) takes no num_accepted_tokens (the spec window starts at 0)")
    if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
        _fail(op, f"x must be a [B, C] or [B, Lq, C] tensor, got {getattr(x, 'shape', type(x).__name__)}")
    _tensor(op, "conv_state", conv_state, dim=3, dtypes=FLOAT_DTYPES, device=None)
    if x.dim() == 3 and x.shape[1] > 1 and x.stride(1) != x.shape[2] * x.stride(2):
        _fail(op, f"x [B, Lq, C] must have rows Lq of one sequence adjacent, got strides {tuple(x.stride())}")
    call = calls.causal_conv1d_update_call(
        x, conv_state, weight, bias, activation, dilation, state_indices, num_accepted_tokens, pad_slot_id
    )
    check_conv(op, call)
