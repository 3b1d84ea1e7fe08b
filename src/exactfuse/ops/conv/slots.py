"""The conv kernels' request and state-slot helpers (``rows.py``, ``update.py``, ``spec.py``, ``lean.py`` and
``state.py`` call them): which request a row belongs to, which prefill tiles lie clear of every request boundary (the
lean kernel's) and which program of the fixup launch takes each other one, the request's slot and permissions, and
the write of a slot's new window.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def mask_and(m, s):
    """Vector mask ``m`` restricted by scalar condition ``s`` (``m & s`` yields int32 data in the
    Triton interpreter, which ``tl.load`` rejects as a mask)."""
    return tl.where(s, m, False)


@triton.jit
def channel_mask(o_c, C, EVEN_C: tl.constexpr):
    """``o_c < C``, or a constant True where the launcher found ``BC`` dividing ``C`` (EVEN_C), which removes the
    channel masks from the program's loads and stores."""
    if EVEN_C:
        return tl.full(o_c.shape, True, tl.int1)
    return o_c < C


@triton.jit
def request_slot(r, R, p_sid, p_acc, p_init, slots, null_slot, stride_sid, MODE, SQL, HAS_STATE, HAS_SID, INIT):
    """Request ``r``'s slot (``sid`` clamped to 0 when unusable), whether it has one, whether its
    history is read, and its window offset (spec roll-back)."""
    r_ok = (r >= 0) & (r < R)
    sid = tl.load(p_sid + r * stride_sid, mask=r_ok, other=null_slot) if HAS_SID else r
    state_ok = r_ok & (sid != null_slot) & (sid >= 0) & (sid < slots)
    if not HAS_STATE:
        state_ok = state_ok & (r < 0)  # always False, as a boolean tensor
    if INIT == 1:
        has_init = state_ok & (tl.load(p_init + r, mask=r_ok, other=0) != 0)
    elif INIT == 2:
        has_init = state_ok
    else:
        has_init = state_ok & (r < 0)
    if MODE == 1:
        accepted = tl.load(p_acc + r, mask=r_ok, other=0)
        slot_off = tl.minimum(tl.maximum(accepted - 1, 0), SQL - 1)
        read_state = state_ok
    else:
        slot_off = r * 0
        read_state = has_init
    return tl.where(state_ok, sid, 0), state_ok, read_state, slot_off


@triton.jit
def window_values(
    p_slot, p_x, p_tok, o_c, m_c, q_start, shift, base, count, write_ok, read_state, L, N,
    stride_x, stride_s_c, stride_s_w,
    SL: tl.constexpr, NW: tl.constexpr, BW: tl.constexpr, HAS_TOKEN_MAP: tl.constexpr,
):  # fmt: skip
    """The new window of one slot, loaded: position ``i < count`` becomes history index ``m = shift + i``, the
    old state at ``base + m`` (0 unless ``read_state``) for ``m < SL``, else logical row ``q_start + m - SL``.
    Returns the window ``[BW, BC]`` in the state's dtype and the mask of the positions to write; the caller
    stores them with :func:`store_window` once every read of the slot (the taps included) is issued."""
    o_i = tl.arange(0, BW)
    m = shift + o_i
    from_state = m < SL
    m_w = mask_and((o_i < count) & (o_i < NW), write_ok)
    p_old = p_slot + (base + m)[:, None] * stride_s_w + o_c[None, :] * stride_s_c
    m_s = mask_and(m_w & from_state, read_state)[:, None] & m_c[None, :]
    b_s = tl.load(p_old, mask=m_s, other=0.0)
    o_row = q_start + m - SL
    m_x = m_w & (m >= SL) & (o_row >= 0) & (o_row < L)
    if HAS_TOKEN_MAP:
        o_row = tl.load(p_tok + o_row, mask=m_x, other=0)
        m_x = m_x & (o_row >= 0) & (o_row < N)
    b_x = tl.load(p_x + o_row.to(tl.int64)[:, None] * stride_x + o_c[None, :], mask=m_x[:, None] & m_c[None, :])
    return tl.where(from_state[:, None], b_s, b_x.to(b_s.dtype)), m_w


@triton.jit
def store_window(p_slot, o_c, m_c, b_new, m_w, stride_s_c, stride_s_w, BW: tl.constexpr):
    """Store :func:`window_values`' window at positions ``0 .. BW - 1`` of the slot. All of the program's loads
    precede the CTA barrier before it, so no thread overwrites a position another has yet to read."""
    o_i = tl.arange(0, BW)
    tl.debug_barrier()
    tl.store(p_slot + o_i[:, None] * stride_s_w + o_c[None, :] * stride_s_c, b_new, mask=m_w[:, None] & m_c[None, :])


@triton.jit
def find_request(rows, R, p_qsl):
    """The last request starting at or before each of ``rows`` (ties: the last, non-empty one): a
    binary search over ``query_start_loc``, one gather per step, ``bit_length(R)`` steps."""
    lo = rows * 0 + R * 0  # one integer type through the loop: the wider of the rows' and R's
    hi = lo + R - 1
    span = R
    while span > 0:  # each step halves [lo, hi]; once lo == hi, mid == lo and nothing changes
        mid = (lo + hi + 1) // 2
        starts_before = tl.load(p_qsl + mid, mask=mid <= hi, other=0) <= rows
        lo = tl.where(starts_before, mid, lo)
        hi = tl.where(starts_before, hi, mid - 1)
        span = span // 2
    return lo


@triton.jit
def find_request_near(rows, first_row, last_row, lo, R, p_qsl, W: tl.constexpr):
    """:func:`find_request`'s answer from one load of the ``W`` boundaries from ``lo`` on, where they bracket
    every one of ``rows`` (all in ``[first_row, last_row]``: ``lo`` is a request that starts at or before the
    first row, and the boundary after them starts past the last row): each row's request is ``lo`` plus how
    many of them start at or before it, less one. Elsewhere (``lo < 0``: no bracket; ``lo >= R``; runs of empty
    requests wider than the bracket) the search, in a branch that is uniform over the program. Every load
    stays within ``query_start_loc``'s ``R + 1`` entries for any ``lo``."""
    j = lo + tl.arange(0, W)
    q = tl.load(p_qsl + j, mask=(j >= 0) & (j < R), other=0)
    first = tl.load(p_qsl + tl.minimum(tl.maximum(lo, 0), R))
    past = tl.load(p_qsl + tl.minimum(tl.maximum(lo + W, 0), R))
    covered = (lo >= 0) & (lo < R) & (first <= first_row) & ((lo + W >= R) | (past > last_row))
    # both branches int32 (a request index): rows are int64 where the row count is (Inductor passes a symbolic
    # size as an int64 argument), and the branches of an `if` must agree in type
    if covered:
        starts = ((q[None, :] <= rows[:, None]) & (j[None, :] < R)).to(tl.int32)
        r = tl.maximum(lo + tl.sum(starts, axis=1) - 1, 0).to(tl.int32)
    else:
        r = find_request(rows, R, p_qsl).to(tl.int32)
    return r


@triton.jit
def lean_tile(t0, L, R, p_qsl, SL: tl.constexpr, BT: tl.constexpr, STARTS: tl.constexpr = False):
    """Whether prefill tile rows ``[t0, t0 + BT)`` are the lean kernel's: no request boundary
    (``query_start_loc`` entry) in ``(t0 - SL, t0 + BT)``, so every row and tap lies in one request or every
    row outside all of them, and every tap row in ``[0, L)``. STARTS (no history is ever read: a request's
    taps before its first row are zeros): also a tile whose first row is a request's first and whose rows
    are all in that request, the taps before it zeroed by the lean kernel. Returns the verdict, whether the
    rows are inside request ``r``, ``r``, and whether the tile is such a start. Only the two boundaries around
    ``t0`` are read: the others are sorted beyond them."""
    r = find_request(t0, R, p_qsl)
    q0 = tl.load(p_qsl + r)
    q1 = tl.load(p_qsl + r + 1, mask=r < R, other=0)
    q1 = tl.where(r < R, q1, q0)  # no request (R = 0): its one boundary, and no row inside
    clear = (t0 >= SL) & (t0 + BT <= L)
    lean = ((q0 <= t0 - SL) | (q0 >= t0 + BT)) & ((q1 <= t0 - SL) | (q1 >= t0 + BT)) & clear
    if STARTS:
        start = (q0 == t0) & (q1 >= t0 + BT) & (r < R) & clear
        lean = lean | start
    else:
        start = False  # a constant: the caller's branch on it compiles away
    return lean, (q0 <= t0) & (t0 < q1), r, start


@triton.jit
def fixup_tile(p, L, R, p_qsl, SL: tl.constexpr, BT: tl.constexpr, STARTS: tl.constexpr = False):
    """Program ``p`` of the fixup launch: its tile's first row, whether it owns a tile the lean kernel
    left (:func:`lean_tile`), and where the bracket of its rows' requests starts (:func:`find_request_near`).
    Programs ``[0, (R + 1) NB)`` take boundary ``i = p // NB``'s tiles ``t0`` in
    ``[b - BT + 1, b + SL - 1]`` (at most NB), each owned by the first boundary whose range holds it; then
    ``FT`` programs the first tiles (``t0 < SL``) and one the last (``t0 + BT > L`` when ``L`` is not a
    multiple of ``BT``). With sorted boundaries every tile the lean kernel leaves has one owner.

    Only the last tile can be one the lean kernel takes, so only its program runs :func:`lean_tile`'s search:
    a boundary's tiles hold boundary ``b`` in ``(t0 - SL, t0 + BT)``, and the first tiles start before ``SL``;
    with STARTS (:func:`lean_tile`) a boundary's tile can also be a request's start the lean kernel took, so
    every boundary program that owns a tile runs the search too."""
    NB: tl.constexpr = (BT + SL - 2) // BT + 1
    FT: tl.constexpr = (SL + BT - 1) // BT
    T = (L + BT - 1) // BT
    B = (R + 1) * NB
    i = tl.minimum(p // NB, R)
    b = tl.load(p_qsl + i)
    prev = tl.load(p_qsl + i - 1, mask=i > 0, other=0)
    tile = (tl.maximum(b - BT + 1, 0) + BT - 1) // BT + p % NB
    own = (tile <= (b + SL - 1) // BT) & ((i == 0) | (tile > (prev + SL - 1) // BT)) & (tile >= FT) & (tile < T - 1)
    tile = tl.where(p < B, tile, tl.where(p < B + FT, p - B, T - 1))
    own = tl.where(p < B, own, tl.where(p < B + FT, tile < T, tile >= FT))
    if p >= B + FT:  # a uniform branch: the other programs skip the search's chain of dependent loads
        own = own & ~lean_tile(tile * BT, L, R, p_qsl, SL, BT, STARTS)[0]
    if STARTS:  # noqa: SIM102 (a constexpr branch around a runtime one)
        if (p < B) & own:
            own = own & ~lean_tile(tile * BT, L, R, p_qsl, SL, BT, STARTS)[0]
    # a boundary's rows lie in [b - BT + 1, b + SL + BT - 2]: with no empty request the requests i - BT + 1 to
    # i + SL + BT - 2, the bracket find_request_near takes from i - BT on (-1: none, the first and last tiles)
    near = tl.where(p < B, tl.maximum(i - BT, 0), -1)
    return tile * BT, own, near


@triton.jit
def window_columns(tile, BC: tl.constexpr, BW: tl.constexpr):
    """The ``BW`` columns of a ``[BC, BW]`` tile (``BW`` a power of two; its ``log2(BW)`` halvings unroll at
    compile time), in order, as a tuple of ``[BC]`` vectors. Reshapes and splits only:
    each halving takes a part's even and odd positions, so the values (NaN payloads and signed zeros included)
    are moved, never computed."""
    parts = (tile,) if BW > 1 else (tl.reshape(tile, (BC,)),)
    for level in tl.static_range(BW):  # log2(BW) halvings
        if (1 << level) < BW:
            evens = ()
            odds = ()
            for j in tl.static_range(1 << level):
                part = parts[j]
                if (BW >> level) > 2:
                    part = tl.reshape(part, (BC, (BW >> level) // 2, 2))
                even, odd = tl.split(part)
                evens += (even,)
                odds += (odd,)
            parts = evens + odds
    return parts


@triton.jit
def window_tile(columns, BC: tl.constexpr, BW: tl.constexpr):
    """The ``[BC, BW]`` tile of ``BW`` columns: the inverse of :func:`window_columns`."""
    parts = columns
    for level in tl.static_range(BW - 1, -1, -1):
        if (1 << level) < BW:
            merged = ()
            for j in tl.static_range(1 << level):
                part = tl.join(parts[j], parts[(1 << level) + j])
                if (BW >> level) > 2:
                    part = tl.reshape(part, (BC, BW >> level))
                merged += (part,)
            parts = merged
    return parts[0] if BW > 1 else tl.reshape(parts[0], (BC, 1))
