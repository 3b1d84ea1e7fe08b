"""Native specs of ``short_conv``, ``causal_conv1d``, ``causal_conv1d_update`` and ``causal_conv1d_fn``
(the backward's in ``native_grads.py``).

One function, :func:`conv_reference`, defines all three: a causal depthwise conv of kernel width ``K``
and dilation ``D`` over packed variable-length requests, reading a per-request state window and writing
it back (docs/short_conv.md). It is plain PyTorch with static shapes (gathers, no host
reads of index values), so it also runs under fake tensors, ``torch.compile`` and CUDA graphs.

Rows. ``x [N, C]`` holds physical rows; the op works on ``L`` logical rows (``L = len(token_indices)``
with a token map, row ``t`` living at physical row ``token_indices[t]``; else ``L = N``). In ``decode``
mode row ``t`` is request ``t``; in ``spec`` / ``prefill`` request ``r`` owns logical rows
``query_start_loc[r] .. query_start_loc[r+1] - 1`` and rows from ``query_start_loc[R]`` on are padding.

History. ``SL = (K-1)·D``. Request ``r``'s history is ``state[sid, off : off+SL] ‖ its rows``; output
position ``j`` uses history indices ``j + D·k`` for ``k = 0 .. K-1`` (``k = K-1`` is the row itself).
``off = clamp(num_accepted[r] - 1, 0, SQL - 1)`` in spec mode, else 0. Per-request arrays
(``state_indices``, ``has_initial_state``, ``num_accepted_tokens``) may be longer than ``R`` (CUDA-graph
padding): entry ``r < R`` belongs to request ``r``, the rest are not read. ``query_start_loc`` may be
int32 or int64.

Rounding, per (row, channel), ``rnd`` = round to nearest even to the activation dtype:
``acc = Σ_k w[c,k]·tap_k`` in fp32, ``k`` ascending, each product rounded to fp32 before its add (for
fp16/bf16 operands the products are exact); ``conv = rnd(acc [+ bias])``; ``y = rnd(silu(conv))`` (the
SiLU in fp32, as eager ``F.silu`` evaluates it) or ``y = conv`` without activation. With an fp32
``weight`` (and bias) and 16-bit ``x`` (Dao's convention, ``causal_*`` only) the conv is not rounded
before the SiLU: ``y = rnd(silu(acc [+ bias]))``, one rounding, as Dao's reference computes it (x and
weight in fp32, conv, bias, activation, cast); for fp32 ``x`` both read the same. ``conv_out = y``
where the row has an output, else 0. ``short_conv`` then stores
``rnd(fp32(outer) + fp32(rnd(residual + conv_out)))`` into ``residual`` (the outer step skipped without
``outer_residual``), which is eager ``residual.add_(F.silu(conv1d(...)))`` followed by ``outer + residual``.

State write-back (never to a null slot): window position ``i`` of request ``r`` becomes history index
``m = shift + i`` with ``shift = qlen`` (prefill; nothing when ``qlen = 0``) or ``1`` (decode, spec),
for ``i < SL`` (decode, prefill) or ``i < min(SL + qlen - 1, SL + SQL - 1)`` (spec). Every output
reads the old state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from exactfuse.ops.conv.calls import ConvCall, causal_conv1d_call, causal_conv1d_update_call, short_conv_call
from exactfuse.ops.conv.windows import end_history, gather_or, initial_window, prefill_end_history, store_windows

MODES = ("decode", "spec", "prefill")
HISTORY_AT = ("start", "end")
ACTIVATIONS = (None, "silu")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def silu(conv: torch.Tensor) -> torch.Tensor:
    """Eager SiLU of the rounded conv (fp32 inside, one rounding). Tests on the CPU replace it with the
    interpreter's exp to compare every other step of a kernel bit for bit."""
    return F.silu(conv)


def request_of(qsl: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Each row's request: the last one starting at or before it, clamped to ``[0, R - 1]``. The search runs
    over the whole ``query_start_loc`` (``R + 1`` entries; rows at or past its last entry clamp to ``R - 1``,
    the answer over its first ``R``): Inductor (torch 2.11) cannot lower a search over a slice of it."""
    R = qsl.shape[0] - 1
    return (torch.searchsorted(qsl, t, right=True) - 1).clamp(max=R - 1).clamp(min=0)


def conv_reference(call: ConvCall) -> torch.Tensor:
    """The conv family's spec (module docstring) of one call (:class:`~exactfuse.ops.conv.calls.ConvCall`);
    returns ``conv_out`` per logical row ``[L, C]``.

    Writes ``residual`` (when given) and ``conv_state`` (when given) in place. ``state_indices=None``
    with a state means request ``r`` uses slot ``r``. ``init``: ``"tensor"`` (``has_initial_state[r]``
    says whether the slot's history is read), ``"always"`` or ``"never"`` (zeros; the state is still
    written). A request whose index equals ``null_slot`` or lies outside ``[0, slots)`` has no state;
    in decode and prefill it has no output either. The SiLU is :func:`silu`.

    ``seq_idx [L]`` int32 (Dao's packed sequences; only without a state): a tap on row ``s`` of row ``t``'s
    window is zero unless ``seq_idx[s] == seq_idx[t]``, and a row with ``seq_idx[t] < 0`` has no output.
    """
    x, weight, conv_state, mode, dilation = call.x, call.weight, call.conv_state, call.mode, call.dilation
    dtype, device = x.dtype, x.device
    N, C = x.shape
    K = weight.shape[1]
    SL = (K - 1) * dilation
    SQL = call.spec_query_len if mode == "spec" else 1
    L = call.token_indices.shape[0] if call.token_indices is not None else N
    t = torch.arange(L, device=device)
    phys = call.token_indices.long() if call.token_indices is not None else t
    # x and a zero row at index N, which every masked-out gather reads (there may be no row at all)
    x_ext = torch.cat([x, x.new_zeros((1, C))])

    # Row -> request.
    if mode == "decode":
        R = L
        r, q_start, in_range = t, t, torch.ones(L, dtype=torch.bool, device=device)
        qlen = torch.ones(R, dtype=torch.long, device=device)
        req_start = torch.arange(R, device=device)
    else:
        R = call.query_start_loc.shape[0] - 1
        qsl = call.query_start_loc.long()
        r = request_of(qsl, t)
        q_start = gather_or(qsl, r, 0)
        in_range = (q_start <= t) & (t < qsl[R])
        req_start = qsl[:R]
        qlen = qsl[1 : R + 1] - qsl[:R]
    j = t - q_start
    req = torch.arange(R, device=device)

    # Request -> slot, permissions.
    has_state = conv_state is not None
    slots = conv_state.shape[0] if has_state else 1
    sid = gather_or(call.state_indices, req, call.null_slot) if call.state_indices is not None else req
    state_ok = has_state & (sid != call.null_slot) & (sid >= 0) & (sid < slots)
    sid_safe = torch.where(state_ok, sid, 0)
    if call.init == "tensor":
        has_init = state_ok & (gather_or(call.has_initial_state.long(), req, 0) != 0)
    else:
        has_init = state_ok & (call.init == "always")
    if mode == "spec":
        slot_off = (gather_or(call.num_accepted_tokens, req, 0) - 1).clamp(0, SQL - 1)
        read_state = state_ok
    else:
        slot_off = torch.zeros(R, dtype=torch.long, device=device)
        read_state = has_init
    out_ok_req = state_ok if (mode != "spec" and has_state) else torch.ones(R, dtype=torch.bool, device=device)
    row_out_ok = in_range & gather_or(out_ok_req.long(), r, 0).bool()
    row_read = gather_or(read_state.long(), r, 0).bool()
    row_sid = gather_or(sid_safe, r, 0)
    row_off = gather_or(slot_off, r, 0)
    if call.seq_idx is not None:
        seq = call.seq_idx.long()
        row_out_ok = row_out_ok & (seq >= 0)

    # Taps, ascending k, fp32.
    acc = torch.zeros(L, C, dtype=torch.float32, device=device)
    for k in range(K):
        h = j + dilation * k
        from_state = h <= SL - 1
        if has_state:
            pos = (h + row_off).clamp(0, conv_state.shape[2] - 1)
            s_val = conv_state[row_sid, :, pos].float()
        else:
            s_val = torch.zeros(L, C, dtype=torch.float32, device=device)
        x_row = (q_start + h - SL).clamp(max=L - 1).clamp(min=0)
        x_val = x_ext[gather_or(phys, x_row, N)].float()
        x_ok = row_out_ok
        if call.seq_idx is not None:
            x_ok = x_ok & (gather_or(seq, q_start + h - SL, -1) == seq)
        tap = torch.where(
            from_state[:, None],
            torch.where(row_read[:, None], s_val, 0.0),
            torch.where(x_ok[:, None], x_val, 0.0),
        )
        acc = acc + weight[:, k].float() * tap
    if call.bias is not None:
        acc = acc + call.bias.float()
    if weight.dtype == torch.float32:  # fp32 weights: the conv and its SiLU in fp32, one rounding
        y = (silu(acc) if call.activation == "silu" else acc).to(dtype)
    else:
        conv = acc.to(dtype)
        y = silu(conv).to(dtype) if call.activation == "silu" else conv
    conv_out = torch.where(row_out_ok[:, None], y, torch.zeros((), dtype=dtype, device=device))

    # State write-back, computed from the old state.
    if has_state:
        old = conv_state[sid_safe]  # [R, C, W]
        new = old.clone()
        if mode == "spec":
            count, shift, write_ok = (SL + qlen - 1).clamp(max=SL + SQL - 1), torch.ones_like(qlen), state_ok
        elif mode == "prefill":
            count, shift, write_ok = torch.full_like(qlen, SL), qlen, state_ok & (qlen > 0)
        else:
            count, shift, write_ok = torch.full_like(qlen, SL), torch.ones_like(qlen), state_ok
        for i in range(SL + SQL - 1):
            m = shift + i
            pos = (slot_off + m).clamp(0, conv_state.shape[2] - 1)
            s_val = torch.where(read_state[:, None], old[req, :, pos], torch.zeros((), dtype=old.dtype, device=device))
            x_row = (req_start + m - SL).clamp(max=L - 1).clamp(min=0)
            x_val = x_ext[gather_or(phys, x_row, N)].to(old.dtype)
            value = torch.where((m <= SL - 1)[:, None], s_val, x_val)
            new[:, :, i] = torch.where((write_ok & (i < count))[:, None], value, old[:, :, i])
        store_windows(conv_state, sid_safe, write_ok, new)

    if call.residual is not None:
        ple = (call.residual[phys].float() + conv_out.float()).to(dtype)
        if call.outer_residual is not None:
            ple = (call.outer_residual[phys].float() + ple.float()).to(dtype)
        call.residual.index_copy_(0, phys, ple)
    return conv_out


# ---------------------------------------------------------------------------- the public specs
def short_conv(
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
    """PLE short conv: ``residual[row] = rnd(outer + rnd(residual + rnd(silu(rnd(conv)))))`` in place.

    x, residual, outer_residual: ``[N, C]`` fp16/bf16 (fp32 accepted), last dim contiguous.
    conv_state: logical ``[slots, C, W]``, any strides, the activation dtype; slot 0 is the null slot
    (never read or written). weight: ``[C, K]``. state_indices: ``[R]`` int32 (decode: ``R = L``).
    mode: ``"decode"`` (one row per request), ``"spec"`` (``query_start_loc [R+1]`` and
    ``num_accepted_tokens [>=R]`` int32 required; ``has_initial_state`` ignored) or ``"prefill"``
    (``query_start_loc`` and ``has_initial_state [>=R]`` bool required). spec_query_len: ``SQL``, spec
    mode only (``W >= (K-1)·dilation + SQL - 1``). token_indices: ``[L]`` int32/int64 logical -> physical
    row map. Every logical row gets the outer residual, padding and null-slot rows included (their
    conv output is 0). Mutates ``residual`` and ``conv_state``; returns None.
    """
    conv_reference(
        short_conv_call(
            x, residual, conv_state, weight, state_indices, conv_mode, dilation, query_start_loc,
            num_accepted_tokens, has_initial_state, spec_query_len, token_indices, outer_residual,
        )
    )  # fmt: skip


def causal_conv1d(
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
    seq_idx: torch.Tensor | None = None,
    history_at: str = "start",
) -> torch.Tensor:
    """Mamba-style varlen causal conv: ``out = act(rnd(Σ_k w·x + bias))``, ``[T, C] -> [T, C]``.

    x: ``[T, C]`` channel-last (last dim contiguous), sequences at ``query_start_loc [R+1]`` int32 or
    int64 (``None``: one sequence). weight ``[C, K]``, bias ``[C]`` or None (x's dtype, or both fp32:
    then the conv and SiLU are fp32 with one rounding at the output), activation None or "silu".
    conv_state: logical ``[slots, C, W]`` with ``W >= (K-1)·dilation``; positions ``0 .. SL-1`` hold the
    history, oldest first, and get the sequence's last ``SL`` inputs. state_indices ``[>=R]`` int32, the
    first ``R`` used (None: request ``r`` uses slot ``r``); a request whose index is ``pad_slot_id`` is
    skipped (output rows 0, state untouched): ``-1`` (Dao's and vLLM's former ``PAD_SLOT_ID``) by
    default, ``0`` for vLLM's ``NULL_BLOCK_ID`` convention. has_initial_state ``[>=R]`` bool, the first
    ``R`` used (None: every history starts at zeros). seq_idx ``[T]`` int32 or None (Dao's packed
    sequences, its ``[B, L]`` flattened; without ``conv_state``, as Dao takes no initial state with it):
    the sequence of each row; a tap counts only when its row has the output row's ``seq_idx``, and a row
    with ``seq_idx < 0`` (padding) gets 0. It splits the sequences of ``query_start_loc`` further.

    history_at ``"end"`` (FLA's state of the last ``K`` inputs, Dao's wide state): the history is the
    **last** ``SL`` positions of each window, and a request with rows makes its whole window the last ``W``
    entries of ``window ‖ rows`` (read as zeros without ``has_initial_state``; :func:`prefill_end_history`).
    """
    if history_at == "end":
        conv_state = prefill_end_history(x, conv_state, weight, dilation, query_start_loc, state_indices,
                                          has_initial_state, pad_slot_id)  # fmt: skip
    return conv_reference(
        causal_conv1d_call(
            x, weight, bias, activation, dilation, conv_state, query_start_loc, state_indices, has_initial_state,
            pad_slot_id, seq_idx,
        )
    )  # fmt: skip


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`causal_conv1d` without a state cache, the form to train through: the same output for the
    same arguments, nothing written in place, so the op has a backward (with respect to ``x``, ``weight``,
    ``bias`` and ``initial_states``: :func:`causal_conv1d_fn_backward`). Every history is zeros, or with
    ``initial_states [R, C, SL]`` (Dao's, ``SL = (K - 1)·dilation``) request ``r``'s is ``initial_states[r]``,
    oldest first, as a ``conv_state`` window read by every request (not with ``seq_idx``)."""
    state, every = initial_window(initial_states)
    return causal_conv1d(x, weight, bias, activation, dilation, state, query_start_loc, None, every, -1, seq_idx)


def causal_conv1d_update(
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
    """Mamba-style decode step: ``[B, C]`` (one token per sequence) or ``[B, Lq, C]`` -> same shape.

    Reads each sequence's history from ``conv_state`` (positions ``0 .. SL-1``) and shifts its inputs in. weight and
    bias as in :func:`causal_conv1d` (x's dtype or fp32). ``[B, C]``: the state shifts by one. ``[B, Lq, C]``
    without ``num_accepted_tokens``: it becomes the last ``SL`` entries of ``history ‖ inputs``. With
    ``num_accepted_tokens [>=B]`` int32 (speculative decoding, ``W >= SL + Lq - 1``): the history starts at
    ``clamp(accepted - 1, 0, Lq - 1)`` and the state becomes ``history[1:] ‖ all Lq inputs``, as ``short_conv``'s
    spec mode. state_indices ``[>=B]`` int32, the first ``B`` used; ``pad_slot_id`` as in :func:`causal_conv1d`.

    history_at ``"end"`` (Dao's ``causal_conv1d_update``, transformers' PyTorch path; without
    ``num_accepted_tokens``): the history is the **last** ``SL`` positions of a window of any
    ``W >= SL``, and the whole window becomes the last ``W`` entries of ``window ‖ inputs``
    (:func:`end_history`).
    """
    conv_state = end_history(x, conv_state, weight, dilation, state_indices, pad_slot_id, history_at)
    out = conv_reference(
        causal_conv1d_update_call(
            x, conv_state, weight, bias, activation, dilation, state_indices, num_accepted_tokens, pad_slot_id,
        )
    )  # fmt: skip
    return out.reshape(x.shape)
