"""Host-side steps of the conv family's state windows, shared by the specs (``native.py``) and the
launchers (``launch.py``, the public calls in ``__init__.py``): torch ops on device tensors, no host reads of
index values, so they run under ``torch.compile`` and CUDA graphs.

- which requests have a usable slot (:func:`request_slots`) and the duplicate-safe window store
  (:func:`store_windows`);
- the wide window with the history at its end (Dao's wide state, FLA's state of the last ``K`` inputs):
  :func:`end_history` / :func:`shift_head` (decode), :func:`shift_prefill_head` (prefill);
- Dao's circular state (``cache_seqlens``): :func:`circular_window`, :func:`store_circular`;
- Dao's initial states as a window every request reads (:func:`initial_window`).
"""

from __future__ import annotations

import torch

from exactfuse.ops.conv import calls


def gather_or(values: torch.Tensor, index: torch.Tensor, fill: int) -> torch.Tensor:
    """``values[index]`` (int64) where ``0 <= index < len(values)``, else ``fill``; works for empty ``values``."""
    padded = torch.cat([values.long(), values.new_full((1,), fill, dtype=torch.long)])
    n = values.shape[0]
    return padded[torch.where((index >= 0) & (index < n), index, n)]


def store_windows(conv_state: torch.Tensor, sid_safe: torch.Tensor, write_ok: torch.Tensor, new: torch.Tensor) -> None:
    """``conv_state[sid_safe[r]] = new[r]`` for the requests with ``write_ok``; a request without one
    writes its slot's final value (its writer's, else the old one), so duplicate indices agree."""
    R, slots = new.shape[0], conv_state.shape[0]
    old = conv_state[sid_safe]
    owner = torch.full((slots + 1,), R, dtype=torch.long, device=new.device)
    owner.scatter_(0, torch.where(write_ok, sid_safe, slots), torch.arange(R, device=new.device))
    own = owner[sid_safe]
    new_ext = torch.cat([new, old[:1]])
    final = torch.where(
        write_ok[:, None, None], new, torch.where((own < R)[:, None, None], new_ext[own.clamp(max=R)], old)
    )
    conv_state[sid_safe] = final


def initial_window(initial_states: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Initial states as ``causal_conv1d``'s ``(conv_state, has_initial_state)``: a copy (the conv writes its
    state back; the input stays as it is) that every request reads; ``(None, None)`` without them."""
    if initial_states is None:
        return None, None
    return initial_states.clone(), torch.ones(initial_states.shape[0], dtype=torch.bool, device=initial_states.device)


def final_states(x: torch.Tensor, initial_states: torch.Tensor | None, starts: torch.Tensor, SL: int) -> torch.Tensor:
    """Dao's ``return_final_states``: each sequence's last ``SL`` inputs ``[R, C, SL]`` in x's dtype, the
    last ``SL`` columns of ``initial_states[r] ‖ x[start_r:end_r]ᵀ`` (zeros for the history without initial
    states). Torch ops on ``x`` and ``initial_states``, so autograd carries their gradient."""
    R, C = starts.shape[0] - 1, x.shape[1]
    starts = starts.long()
    lengths = starts[1:] - starts[:-1]  # [R]
    j = torch.arange(SL, device=x.device)
    row = starts[1:, None] - SL + j[None, :]  # [R, SL]: the input row of each final position
    in_x = row >= starts[:-1, None]
    # [R, C, SL]; without rows nothing to take (torch.compile specializes size 0: the test adds no guard)
    taken = x.new_zeros((R, C, SL)) if x.shape[0] == 0 else x[row.clamp(0, x.shape[0] - 1)].transpose(1, 2)
    if initial_states is None:
        history = x.new_zeros((R, C, SL))
    else:  # the history position of a final position before the sequence: lengths + j
        h = (lengths[:, None] + j[None, :]).clamp(max=SL - 1)
        history = initial_states.to(x.dtype).gather(2, h[:, None, :].expand(R, C, SL))
    return torch.where(in_x[:, None, :], taken, history)


def end_history(x, conv_state, weight, dilation, state_indices, pad_slot_id, history_at) -> torch.Tensor:
    """The state window the conv reads and writes: all of ``conv_state`` (``history_at="start"``), or for
    Dao's wide window (``"end"``) the view of its last ``SL`` positions, after :func:`shift_head` has
    shifted the first ``W - SL`` on the host side (the spec and the Triton provider both)."""
    if history_at != "end":
        return conv_state
    keep = conv_state.shape[2] - (weight.shape[1] - 1) * dilation
    shift_head(x if x.dim() == 3 else x[:, None], conv_state, state_indices, pad_slot_id, keep)
    return conv_state[:, :, keep:]


def prefill_end_history(
    x, conv_state, weight, dilation, query_start_loc, state_indices, has_initial_state, null_slot
) -> torch.Tensor:
    """A prefill's state window with the history at the end of a wide window (FLA's ``[N, C, K]``, Dao's wide
    state): the view of its last ``SL`` positions, after :func:`shift_prefill_head` has written the first
    ``W - SL`` (the spec; the Triton provider shifts them in its kernels)."""
    keep = conv_state.shape[2] - (weight.shape[1] - 1) * dilation
    starts = calls.one_sequence(x) if query_start_loc is None else query_start_loc
    shift_prefill_head(x, conv_state, starts, state_indices, has_initial_state, null_slot, keep)
    return conv_state[:, :, keep:]


def shift_head(
    x: torch.Tensor, conv_state: torch.Tensor, state_indices: torch.Tensor | None, null_slot: int, keep: int
) -> None:
    """Dao's wide window, its first ``keep`` positions: for request ``b`` (rows ``x[b] [Lq, C]``) with a
    usable slot, positions ``i < keep`` become ``(window ‖ x[b])[i + Lq]``, read before any write; the
    last ``W - keep`` positions are the conv's (history at the end). Nothing when ``keep = 0``."""
    if keep == 0:
        return
    B, Lq, _ = x.shape
    ok, sid_safe = request_slots(B, conv_state, state_indices, null_slot)
    window = torch.cat([conv_state[sid_safe], x.transpose(1, 2).to(conv_state.dtype)], dim=2)
    store_windows(conv_state[:, :, :keep], sid_safe, ok, window[:, :, Lq : Lq + keep])


def circular_window(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    dilation: int,
    state_indices: torch.Tensor | None,
    pad_slot_id: int,
    cache_seqlens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dao's circular state (``cache_seqlens``): for request ``b`` (rows ``x[b]``, ``x [B, Lq, C]``) the ``SL``
    positions before ``cache_seqlens[b]`` (modulo the window ``W``) of its slot, oldest first, gathered into
    a window of its own: ``(windows [B, C, SL], their indices [B] int32)``, request ``b`` at window ``b``,
    ``-1`` for a padded request (no usable slot: output 0, nothing written)."""
    B = x.shape[0]
    SL = (weight.shape[1] - 1) * dilation
    ok, sid_safe = request_slots(B, conv_state, state_indices, pad_slot_id)
    back = torch.arange(-SL, 0, device=x.device)
    pos = torch.remainder(cache_seqlens[:B].long()[:, None] + back, conv_state.shape[2])
    windows = conv_state[sid_safe[:, None], :, pos].transpose(1, 2)  # [B, SL, C] -> [B, C, SL]
    return windows, torch.where(ok, torch.arange(B, device=x.device), -1).to(torch.int32)


def request_slots(
    B: int, conv_state: torch.Tensor, state_indices: torch.Tensor | None, null_slot: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per request ``b < B``: whether it has a usable slot (its index is not ``null_slot`` and lies in
    ``[0, slots)``; no ``state_indices``: slot ``b``), and the slot, 0 where it has none."""
    req = torch.arange(B, device=conv_state.device)
    sid = gather_or(state_indices, req, null_slot) if state_indices is not None else req
    ok = (sid != null_slot) & (sid >= 0) & (sid < conv_state.shape[0])
    return ok, torch.where(ok, sid, 0)


def store_circular(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    state_indices: torch.Tensor | None,
    pad_slot_id: int,
    cache_seqlens: torch.Tensor,
) -> None:
    """The inputs ``x [B, Lq, C]`` of each request with a usable slot written at positions
    ``cache_seqlens[b] + i`` (modulo ``W``) of its slot, as Dao's circular update does."""
    B, Lq, _ = x.shape
    ok, sid_safe = request_slots(B, conv_state, state_indices, pad_slot_id)
    pos = torch.remainder(cache_seqlens[:B].long()[:, None] + torch.arange(Lq, device=x.device), conv_state.shape[2])
    new = conv_state[sid_safe].clone()
    new.scatter_(2, pos[:, None, :].expand(-1, new.shape[1], -1), x.transpose(1, 2).to(new.dtype))
    store_windows(conv_state, sid_safe, ok, new)


def shift_prefill_head(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    null_slot: int,
    keep: int,
) -> None:
    """Prefill over a wide window with the history at its end (FLA's state of the last ``K`` inputs, Dao's
    wide state): for request ``r`` (rows ``x[start_r : start_r + qlen_r]``) with a usable slot and rows,
    positions ``i < keep`` become ``(window ‖ rows)[i + qlen_r]``, the window read as zeros without
    ``has_initial_state[r]``; the last ``W - keep`` positions are the conv's (history at the end)."""
    if keep == 0:
        return
    T, C = x.shape
    W = conv_state.shape[2]
    qsl = query_start_loc.long()
    R = qsl.shape[0] - 1
    ok, sid_safe = request_slots(R, conv_state, state_indices, null_slot)
    start, qlen = qsl[:R], qsl[1:] - qsl[:R]
    old = conv_state[sid_safe]
    if has_initial_state is not None:
        old = torch.where(has_initial_state[:R, None, None], old, torch.zeros((), dtype=old.dtype, device=old.device))
    src = torch.arange(keep, device=x.device)[None, :] + qlen[:, None]  # [R, keep]: index into window ‖ rows
    from_window = old.gather(2, src.clamp(max=W - 1)[:, None, :].expand(R, C, keep))
    from_rows = x[(start[:, None] + src - W).clamp(0, max(T - 1, 0))].transpose(1, 2).to(old.dtype)
    new = conv_state[sid_safe].clone()
    new[:, :, :keep] = torch.where((src < W)[:, None, :], from_window, from_rows)
    store_windows(conv_state, sid_safe, ok & (qlen > 0), new)
