"""The warp-specialized W4A16 prototype's host side (its kernel in ``w4a16_ws.py``): the launch rule
(:func:`ws_config`, the stream-K grid :func:`stream_k`), the compact scale layout (:func:`compact_scales`) and
the launcher (:func:`launch_ws`). The grid is every SM, or fewer CTAs where that cuts each unit into the same
number of pieces and the busiest CTA's chunks, each piece's cost counted, are fewer (whole units a CTA at
4096 x 14336: a piece costs about 2 µs)."""

from __future__ import annotations

import functools

import torch
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from w4a16_ws import w4a16_ws_kernel
from w4a16_ws_views import ACTS_SMEM, SCALES_SMEM, WORDS_SMEM, ZEROS_SMEM

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16.dequant import permuted_columns
from exactfuse.utils import empty


def ws_config(M: int, N: int, K: int, tiles=0, unroll=2, stages=0, warps=4, per_sm=1) -> dict:
    """``launch_ws``'s arguments: one block of 8 rows up to M = 8, two to 16; 2 tiles a warp where N allows,
    ``unroll`` chunks a step, ``per_sm`` CTAs of ``warps`` consumer warps an SM and the ring deep enough for
    48 KB of weights an SM (at most 16 slots)."""
    n_tiles = N // 16
    tiles = tiles or (2 if n_tiles % (2 * warps) == 0 else 1)
    stages = stages or max(3, min(16, -(-48 * 1024 // (warps * tiles * unroll * 512 * per_sm))))
    return {"tiles": tiles, "blocks": 1 if M <= 8 else 2, "unroll": unroll, "stages": stages, "warps": warps,
            "per_sm": per_sm}  # fmt: skip


# What a piece of a unit (a share's end inside a unit) costs, in 64-row chunks of streaming: the partial
# sums' stores, the release fence and atomic, and the last piece's sum (about 2 µs on an H100, 8-10 chunks'
# time: benchmarks/results/h100/sweeps/w4a16_ws.txt, split 8 against split 1)
PIECE_CHUNKS = 8


def shares(units: int, steps: int, grid: int) -> list[tuple[int, int]]:
    """Each CTA's (steps, pieces) when ``units`` units of ``steps`` steps, laid end to end, are cut into
    ``grid`` equal contiguous shares (``w4a16_ws_kernel``'s ``c total // P``); pieces: the units the share
    holds only part of."""
    total = units * steps
    out = []
    for c in range(grid):
        begin, end = c * total // grid, (c + 1) * total // grid
        units_held = range(begin // steps, (end + steps - 1) // steps)
        parts = sum(
            max(begin, u * steps) > u * steps or min(end, (u + 1) * steps) < (u + 1) * steps for u in units_held
        )
        out.append((end - begin, parts))
    return out


@functools.cache  # a pure function of four sizes, asked every launch
def stream_k(units: int, steps: int, unroll: int, ctas: int) -> tuple[int, int]:
    """(grid, the most pieces a unit is cut into): of the grids that cut every unit into the same number of
    pieces (``units`` times a divisor of ``steps``, at most ``ctas``) and the whole of ``ctas`` (stream-K),
    the one whose busiest CTA streams the fewest chunks, each piece counted as :data:`PIECE_CHUNKS` more
    (ties: the smaller grid)."""
    total = units * steps
    grids = {units * s for s in range(1, steps + 1) if steps % s == 0 and units * s <= ctas} | {min(ctas, total)}

    def cost(grid: int) -> int:
        return max(n * unroll + PIECE_CHUNKS * parts for n, parts in shares(units, steps, grid))

    grid = min(sorted(grids), key=cost)
    first = [((u * steps + 1) * grid - 1) // total for u in range(units)]
    last = [((u + 1) * steps * grid - 1) // total for u in range(units)]
    return grid, max(b - a + 1 for a, b in zip(first, last, strict=True))


def compact_scales(scales: torch.Tensor, zeros: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prototype's scale layout from GPTQ-order ``scales [groups, N]`` and true zero points ``zeros
    [groups, N]`` (or None: 8): ``(scales [groups, N]``, contiguous, ``zero words [groups, N/8]`` int32 with
    column ``8 j + i`` in nibble ``i`` of word ``j``, None where every zero point is 8): 2 bytes a column a
    group, and half a byte more with zero points (the fragment records: 8)."""
    if zeros is None or bool((zeros == 8).all()):
        return scales.contiguous(), None
    groups, N = zeros.shape
    nib = zeros.to(torch.int64).view(groups, N // 8, 8) << (4 * torch.arange(8, device=zeros.device))
    words = nib.sum(-1)  # distinct bits: the sum is the OR
    return scales.contiguous(), torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def launch_ws(a, words, scales, zeros, perm, bias, *, tiles, blocks, unroll, stages, warps=4, per_sm=1, pdl=False):
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` by ``w4a16_ws_kernel`` from the fragment layout's ``words``
    and :func:`compact_scales`' ``scales`` and ``zeros``: ``launch_fragment``'s contract, persistent (at most
    ``per_sm`` CTAs an SM), deterministic on a given GPU; ``pdl``: a programmatic dependent launch, the first
    weights read while the previous kernel of the stream finishes."""
    if perm is not None:
        a = permuted_columns(a, perm)
    if a.stride(1) != 1 or a.stride(0) % 8 or a.data_ptr() % 16:
        a = a.contiguous() if a.shape[1] % 8 == 0 and a.data_ptr() % 16 == 0 else a.clone()
    M = a.shape[0]
    n_tiles, chunks = words.shape[:2]
    N, groups, t_cta = n_tiles * 16, scales.shape[0], warps * tiles
    if chunks % unroll or n_tiles % t_cta:
        raise ValueError(f"unroll={unroll}, {t_cta} tiles a CTA do not divide {chunks} chunks, {n_tiles} tiles")
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    a32 = a.view(torch.int32)
    acts = a32.as_strided((chunks, M, 32), (32, a32.stride(0), 1))  # [chunk, row, pair]
    w_desc = TensorDescriptor.from_tensor(words.view(n_tiles, chunks, 128), [t_cta, unroll, 128], WORDS_SMEM)
    s_desc = TensorDescriptor.from_tensor(scales.view(torch.int16), [1, 16 * t_cta], SCALES_SMEM)
    if zeros is not None and 2 * t_cta < ZERO_ROW and (chunks // groups) % unroll:
        raise ValueError(f"zero points with {t_cta} tiles a CTA need whole groups a step (unroll={unroll})")
    z_box = [1, max(2 * t_cta, ZERO_ROW)]  # a TMA destination is 128-byte aligned: a slot's row is at least that
    z_desc = None if zeros is None else TensorDescriptor.from_tensor(zeros, z_box, ZEROS_SMEM)
    a_desc = TensorDescriptor.from_tensor(acts, [unroll, 8 * blocks, 32], ACTS_SMEM)
    n_groups, m_blocks, steps = n_tiles // t_cta, -(-M // (8 * blocks)), chunks // unroll
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid, pieces = stream_k(n_groups * m_blocks, steps, unroll, sms * per_sm)
    ws = torch.empty((grid, 2, 8 * blocks, 16 * t_cta), dtype=torch.float32, device=a.device)
    counts = arrival_counters(a.device, n_groups * m_blocks)
    w4a16_ws_kernel[(grid,)](
        w_desc, s_desc, z_desc, a_desc, bias if bias is not None else out, out, ws, counts, M, N, n_groups, steps,
        n_groups * m_blocks * steps, GROUP_CHUNKS=chunks // groups, HAS_BIAS=bias is not None,
        HAS_ZEROS=zeros is not None, BLOCKS=blocks, TILES=tiles, UNROLL=unroll, STAGES=stages, PIECES=pieces,
        PDL=pdl, num_warps=warps, maxnreg=register_cap(warps, per_sm), launch_pdl=pdl,
    )  # fmt: skip
    return out


ZERO_ROW = 32  # int32 words in 128 bytes: the shortest zero-point row a ring slot holds


def register_cap(warps: int, per_sm: int) -> int | None:
    """The registers a thread (``maxnreg``) that let ``per_sm`` CTAs share an SM's 65,536: a CTA is ``warps``
    consumer warps and the producer's warp group (4 warps, given back to 24 registers a thread by
    ``setmaxnreg``, which hands them to the consumers); None at one CTA an SM (the compiler's choice)."""
    if per_sm == 1:
        return None
    return 65536 // (per_sm * 32 * (warps + 4)) // 8 * 8
