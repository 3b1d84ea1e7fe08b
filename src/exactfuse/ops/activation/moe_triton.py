"""Triton kernel for ``moe_silu_and_mul``: ``silu(gate) * up [* w]`` in fp32, one rounding.

One kernel serves both layouts, with and without row weights, through
``constexpr`` flags (``INTERLEAVED``, ``HAS_WEIGHTS``, ``INT64_INDEX``,
``EVEN_N``). The math repeats the spec's order exactly: gate and up to fp32,
``(g * sigmoid(g)) * u``, then ``* w``, then one cast at the store. The sigmoid
is ``1 / (1 + exp(-g))`` with libdevice ``exp`` and an IEEE division
(``div_rn``), which is how ATen's ``sigmoid_kernel_cuda`` evaluates
``torch.sigmoid`` in fp32; Triton's ``tl.sigmoid``/``tl.exp`` use the
approximate ``ex2.approx`` path.

The interleaved layout is read as one contiguous ``[BM, 2*BN]`` tile and split
into gate and up in registers (``reshape`` to ``[BM, BN, 2]`` + ``split``), so
both layouts issue the same wide, coalesced loads; a stride-2 gather per
operand would touch every sector twice.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from exactfuse.ops.math import exact_exp
from exactfuse.utils import empty, next_power_of_2

# Eviction hint for the gateup loads: each byte is read exactly once, so
# "evict_first" keeps the streamed input from displacing reusable lines (the
# row weights, read by every N-tile of a row, are loaded "evict_last"). Whether
# it is faster on the H200 is to be measured by scripts/gpu/sweep_moe.py
# ("eviction" line).
GATEUP_EVICT_FIRST = True

# Whether the interleaved store keeps the split's register layout (see store_run).
INTERLEAVED_STORE_HINT = True

# Output elements per program (see moe_config): to be measured by
# scripts/gpu/sweep_moe.py, which compares 1024/2048/4096 on the bench grid.
TARGET_ELEMENTS = 1024


@triton.jit(do_not_specialize=["M"])
def moe_silu_and_mul_kernel(
    p_x,
    p_w,
    p_y,
    M,
    N,
    stride_x,
    stride_w,
    INTERLEAVED: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    INT64_INDEX: tl.constexpr,
    EVEN_N: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    STORE_RUN: tl.constexpr,
):
    """One ``[BM, BN]`` output tile of ``y = g * sigmoid(g) * u [* w]``.

    p_x: ``[M, 2N]`` rows ``stride_x`` apart, last dim contiguous; split
    (gate at column ``n``, up at ``N + n``) or interleaved (gate at ``2n``, up
    at ``2n + 1``). p_w: ``[M]`` fp32 or the input dtype, ``stride_w`` apart
    (unused unless HAS_WEIGHTS). p_y: ``[M, N]`` contiguous.

    The grid is flat and N-fastest: consecutive programs cover consecutive
    column tiles of one row block, so the reads of neighbouring programs are
    adjacent in memory. constexpr: INTERLEAVED, HAS_WEIGHTS, INT64_INDEX
    (offsets may reach 2**31), EVEN_N (``N % BN == 0``: no column mask), BM, BN,
    EVICT_FIRST (``evict_first`` on the gateup loads), STORE_RUN (see
    :func:`store_run`; 0: no hint). When ``BM == 1`` the grid has exactly M row
    blocks, so the row mask is elided too and an ``EVEN_N`` tile is loaded and
    stored without any mask.
    """
    i_p = tl.program_id(0)
    if INT64_INDEX:
        i_p = i_p.to(tl.int64)
    n_tiles = tl.cdiv(N, BN)
    i_m = i_p // n_tiles
    i_n = i_p % n_tiles
    NO_MASK: tl.constexpr = BM == 1 and EVEN_N
    X_POLICY: tl.constexpr = "evict_first" if EVICT_FIRST else ""

    o_m = i_m * BM + tl.arange(0, BM)
    o_n = i_n * BN + tl.arange(0, BN)
    # Masks are None where the tile is known to be in bounds; masked-off lanes
    # load undefined values that are computed on and never stored.
    m_m = None if BM == 1 else o_m < M
    m_n = None if EVEN_N else o_n < N
    if NO_MASK:
        m_mn = None
    elif BM == 1:
        m_mn = m_n[None, :]
    elif EVEN_N:
        m_mn = m_m[:, None]
    else:
        m_mn = m_m[:, None] & m_n[None, :]

    p_row = p_x + o_m[:, None] * stride_x
    if INTERLEAVED:
        # One contiguous [BM, 2*BN] tile, split into (gate, up) in registers.
        o_2n = i_n * (2 * BN) + tl.arange(0, 2 * BN)
        if NO_MASK:
            m_2n = None
        elif EVEN_N:
            m_2n = m_m[:, None]
        elif BM == 1:
            m_2n = o_2n[None, :] < 2 * N
        else:
            m_2n = m_m[:, None] & (o_2n[None, :] < 2 * N)
        b_x = tl.load(p_row + o_2n[None, :], mask=m_2n, eviction_policy=X_POLICY)
        b_g, b_u = tl.split(tl.reshape(b_x, (BM, BN, 2)))
    else:
        p_g = p_row + o_n[None, :]
        b_g = tl.load(p_g, mask=m_mn, eviction_policy=X_POLICY)
        b_u = tl.load(p_g + N, mask=m_mn, eviction_policy=X_POLICY)
    b_g = b_g.to(tl.float32)
    b_u = b_u.to(tl.float32)

    # fp32 throughout, in the spec's order; IEEE division, libdevice exp.
    b_y = b_g * tl.div_rn(1.0, 1.0 + exact_exp(-b_g)) * b_u
    if HAS_WEIGHTS:
        b_w = tl.load(p_w + o_m * stride_w, mask=m_m, eviction_policy="evict_last")
        b_y = b_y * b_w.to(tl.float32)[:, None]

    if STORE_RUN > 0:
        o_n = tl.max_contiguous(o_n, STORE_RUN)
    tl.store(p_y + o_m[:, None] * N + o_n[None, :], b_y.to(p_y.dtype.element_ty), mask=m_mn)


def moe_block_n(N: int) -> int:
    """Columns per program: the largest power of two ≤ 1024 that divides N, if ≥ 128.

    A dividing ``BN`` makes every tile full (``EVEN_N``: no column mask, no idle
    lanes): N = 768 -> 256, 1024 -> 1024, 1536 -> 512, 3072 -> 1024. Widths
    without such a divisor (960, 33, 7) use ``next_power_of_2(N)`` up to 1024
    and mask the tail.
    """
    divisor = N & -N if N > 0 else 1  # largest power of two dividing N
    if divisor >= 128:
        return min(divisor, 1024)
    return min(next_power_of_2(N), 1024)


def moe_config(N: int, target: int = TARGET_ELEMENTS) -> tuple[int, int, int]:
    """Static launch heuristic ``(BM, BN, num_warps)`` for rows of ``N`` outputs.

    It depends on ``N`` only: every batch size M (decode M = 1 .. prefill
    M = 49152) reuses one compiled kernel per width, CUDA graphs captured at
    many batch sizes need no new compile, and torch.compile does not guard on M.
    A program covers ``target`` outputs: ``BN`` columns (:func:`moe_block_n`)
    and ``BM = target // BN`` rows, so wide rows run one row per program
    (``BM == 1``: no masks at all on full tiles: N = 1024, 2048, 3072, 4096).
    At ``target = 1024`` 4 warps put 8 outputs in each thread: one 16-byte load
    of each operand and one 16-byte store in bf16 (split layout), as ATen's
    vectorized elementwise loops do. ``target`` and the warp count are to be
    confirmed by scripts/gpu/sweep_moe.py (1024/2048/4096 x 4/8 warps).
    """
    BN = moe_block_n(N)
    BM = max(1, target // BN)
    return BM, BN, 4


def store_run(gateup: torch.Tensor, interleaved: bool) -> int:
    """Contiguity hint for the interleaved store: outputs per 16-byte load of (g, u) pairs.

    After the split a thread holds ``16 / (2 * itemsize)`` consecutive outputs
    (4 for fp16/bf16, 2 for fp32). Left alone, Triton widens the store to 16
    bytes and moves the tile through shared memory to get there (a layout
    conversion: shared stores/loads and a barrier in the sm_90 PTX); the hint
    stores the split's registers as they are (8-byte stores in bf16, no shared
    memory). Which is faster is to be measured by scripts/gpu/sweep_moe.py.
    """
    return 16 // (2 * gateup.element_size()) if interleaved and INTERLEAVED_STORE_HINT else 0


def needs_int64_offsets(M: int, N: int, stride_x: int) -> bool:
    """Whether an element offset can reach 2**31: the end of gateup's last row, or of the output.

    A row stride larger than ``2N`` (a column slice of a wider buffer) counts,
    so a view with fewer than 2**31 elements can still need 64-bit offsets.
    """
    return M > 0 and max((M - 1) * stride_x + 2 * N, M * N) >= 2**31


def launch_moe_silu_and_mul(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None,
    interleaved: bool,
    out_dtype: torch.dtype | None,
    *,
    config: tuple[int, int, int] | None = None,
    evict_first: bool | None = None,
    int64_index: bool | None = None,
    store_hint: int | None = None,
) -> torch.Tensor:
    """Launch :func:`moe_silu_and_mul_kernel`: ``[M, 2N] -> [M, N]``.

    The keyword arguments override the heuristic (``config`` = ``(BM, BN,
    num_warps)``), :data:`GATEUP_EVICT_FIRST`, the int64 switch and :func:`store_run`, for tests and
    scripts/gpu/sweep_moe.py; the op never sets them.
    """
    M, N = gateup.shape[0], gateup.shape[1] // 2
    y = empty((M, N), out_dtype or gateup.dtype, gateup.device)
    if y.numel() == 0:
        return y
    BM, BN, num_warps = config or moe_config(N)
    has_weights = row_weights is not None
    if int64_index is None:
        int64_index = needs_int64_offsets(M, N, gateup.stride(0))
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    torch.library.wrap_triton(moe_silu_and_mul_kernel)[grid](
        gateup,
        row_weights if has_weights else gateup,
        y,
        M,
        N,
        gateup.stride(0),
        row_weights.stride(0) if has_weights else 0,
        INTERLEAVED=interleaved,
        HAS_WEIGHTS=has_weights,
        INT64_INDEX=int64_index,
        EVEN_N=N % BN == 0,
        BM=BM,
        BN=BN,
        EVICT_FIRST=GATEUP_EVICT_FIRST if evict_first is None else evict_first,
        STORE_RUN=store_run(gateup, interleaved) if store_hint is None else store_hint,
        num_warps=num_warps,
    )
    return y


def moe_silu_and_mul_triton(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    return launch_moe_silu_and_mul(gateup, row_weights, interleaved, out_dtype)
