"""Split-K bookkeeping shared by the W4A16 GEMM kernels (``tile_kernel.py``, ``gemv.py``).

A kernel that computed its fp32 ``[BM, BN]`` tile over one K slice ends with :func:`finish_tile`.
Without split-K it rounds and stores the output. With split-K (deterministic mode, the default)
each slice writes its partial to a workspace ``[S, M, N]`` and counts its arrival on the tile's
counter; with ``FIXUP`` the last slice to arrive sums the S partials in the fixed order
s = 0, 1, ... and stores the output (one launch, bitwise reproducible), otherwise
:func:`w4a16_splitk_reduce_kernel` does in a second launch. With ``ATOMIC`` (``deterministic=False``)
slices ``atomic_add`` into a zeroed ``[M, N]`` fp32 buffer and the second launch rounds it.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def finish_tile(
    acc,
    p_out,
    p_bias,
    p_ws,
    p_count,
    i_mn,
    i_s,
    o_m,
    o_n,
    m_mn,
    M,
    N,
    HAS_BIAS: tl.constexpr,
    SPLIT: tl.constexpr,
    ATOMIC: tl.constexpr,
    FIXUP: tl.constexpr,
):
    """Store the fp32 tile ``acc`` of output rows ``o_m`` / columns ``o_n`` (``m_mn`` in range) computed by
    K slice ``i_s`` of output tile ``i_mn``: the output, the slice's partial, or its atomic add.

    p_ws: ``[S, M, N]`` fp32 (SPLIT), ``[M, N]`` (SPLIT and ATOMIC). p_count: int32 arrival counters, one
    per output tile, zero on entry and left zero (SPLIT, not ATOMIC).
    """
    if SPLIT and ATOMIC:
        tl.atomic_add(p_ws + o_m[:, None] * N + o_n[None, :], acc, mask=m_mn)
    elif SPLIT:
        tl.store(p_ws + (i_s * M + o_m)[:, None] * N + o_n[None, :], acc, mask=m_mn)
        if FIXUP:
            # Serial split-K fixup, no second launch: the last of the tile's S programs to arrive
            # sums the S partials in the fixed order s = 0, 1, ..., so the result does not depend
            # on which program arrives last. The barrier orders every thread's partial before the
            # arrival (released at GPU scope); the partials are read past L1 (.cg) after the
            # acquire, four loads in flight at a time (a masked one adds -0.0: exact).
            tl.debug_barrier()
            S = tl.num_programs(1)
            arrived = tl.atomic_add(p_count + i_mn, 1, sem="acq_rel")
            if arrived == S - 1:
                acc = tl.zeros_like(acc)
                for s0 in range(0, S, 4):
                    b_0 = _partial(p_ws, s0, M, N, o_m, o_n, m_mn, S)
                    b_1 = _partial(p_ws, s0 + 1, M, N, o_m, o_n, m_mn, S)
                    b_2 = _partial(p_ws, s0 + 2, M, N, o_m, o_n, m_mn, S)
                    b_3 = _partial(p_ws, s0 + 3, M, N, o_m, o_n, m_mn, S)
                    acc += b_0
                    acc += b_1
                    acc += b_2
                    acc += b_3
                tl.atomic_xchg(p_count + i_mn, 0)  # zero for the next launch
                _store_output(p_out, p_bias, acc, o_m, o_n, m_mn, N, HAS_BIAS)
    else:
        _store_output(p_out, p_bias, acc, o_m, o_n, m_mn, N, HAS_BIAS)


@triton.jit
def _partial(p_ws, s, M, N, o_m, o_n, m_mn, S):
    """Split ``s``'s fp32 partial tile from the workspace, read from L2; ``-0.0`` where ``s >= S``."""
    in_range = (o_n[None, :] * 0 + s) < S  # a tensor also where the interpreter passes Python ints
    p_s = p_ws + (s * M + o_m)[:, None] * N + o_n[None, :]
    return tl.load(p_s, mask=m_mn & in_range, other=-0.0, cache_modifier=".cg")


@triton.jit
def _store_output(p_out, p_bias, acc, o_m, o_n, m_mn, N, HAS_BIAS: tl.constexpr):
    """Round the fp32 tile to the output dtype once, then ``+ bias`` in fp32 and round again (eager's
    ``matmul(a, W) + bias``)."""
    DT = p_out.dtype.element_ty
    b_y = acc.to(DT)
    if HAS_BIAS:
        b_b = tl.load(p_bias + o_n, mask=o_n < N, other=0.0).to(tl.float32)
        b_y = (b_y.to(tl.float32) + b_b[None, :]).to(DT)
    tl.store(p_out + o_m[:, None] * N + o_n[None, :], b_y, mask=m_mn)


@triton.jit(do_not_specialize=["M", "S"])
def w4a16_splitk_reduce_kernel(p_ws, p_bias, p_out, M, N, S, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """``out = round(sum_s ws[s]) (+ bias, rounded)`` over a flat block of ``M * N`` outputs: the
    second launch of atomic mode (S = 1) and of the two-launch split (``TileConfig.fixup`` off).

    p_ws: ``[S, M, N]`` fp32 contiguous; p_out: ``[M, N]`` contiguous; p_bias: ``[N]``.
    The sum runs s = 0, 1, ..., S - 1 in fp32 for every element, as the fixup's does.
    """
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(S):
        acc += tl.load(p_ws + s * M * N + o, mask=m, other=0.0)
    DT = p_out.dtype.element_ty
    b_y = acc.to(DT)
    if HAS_BIAS:
        b_y = (b_y.to(tl.float32) + tl.load(p_bias + o % N, mask=m, other=0.0).to(tl.float32)).to(DT)
    tl.store(p_out + o, b_y, mask=m)


REDUCE_BLOCK = 1024
