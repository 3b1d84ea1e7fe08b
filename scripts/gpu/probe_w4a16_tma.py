"""The fragment kernel with its weight words streamed by TMA into a shared-memory ring, against the shipped one.

Usage: PYTHONPATH=src python3 scripts/gpu/probe_w4a16_tma.py [--ms 1,8,16] [--stages 4,6,8] [--unrolls 2,4]
       [--splits 2,4,8,16] [--check-only]

``mma.py``'s kernel loads each lane's words with its own 16-byte loads a step ahead, so the bytes in flight
an SM are what its warps' registers hold (docs/heuristics.md: long-scoreboard bound, 40% of DRAM at
4096 x 14336, M = 1). Here one TMA copy a step moves the words of all the program's tiles (one a warp) for
``UNROLL`` chunks, ``[warps, UNROLL, 128]`` int32 of ``words [N/16, K/64, 128]``, into slot ``step % STAGES`` of
a ring, ``STAGES`` steps ahead, signalled on the slot's mbarrier; each lane reads its 16 bytes of a chunk
back from shared memory (512 contiguous bytes a warp: no bank conflict), the program's warps meet at a
barrier, and the slot is refilled while the step is dequantized and multiplied exactly as ``mma.py`` does
(the same helpers, the same order: the same bits). Scale records and activations keep ``mma.py``'s
loads a step ahead.

Checked first, per configuration: bit for bit against ``mma.launch_fragment`` with the same split and
chunks a step (one tile a warp), on random activations, bias and act-order included. Then per (K, N, M),
weights rotated past the L2: the shipped rule (``fragment_config``), every TMA configuration, cuBLAS on the
dense weight; µs (median of CUDA-graph replays) and % of the bytes' roofline.
Result: benchmarks/results/h200/sweeps/w4a16_fragment_tma.txt.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

sys.path.insert(0, os.path.dirname(__file__))
from probe_w4a16_fragment import _timed, check_layers, ranked, rotated_layers
from sweep_io import emit
from sweep_w4a16_tiles import SHAPES, device_info

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16 import fragment, mma
from exactfuse.ops.w4a16.heuristics import fragment_blocks, fragment_config
from exactfuse.ops.w4a16.mma import _axis, _barrier, fragment_epilogue, fragment_step
from exactfuse.utils import empty

# mma.py's inline PTX (Gluon constexprs): the pair dequantization and the m16n8k16 MMA
DEQUANT_BF16, DEQUANT_FP16 = mma._DEQUANT_BF16, mma._DEQUANT_FP16
MMA_BF16, MMA_FP16 = mma._MMA_BF16, mma._MMA_FP16


@gluon.jit(do_not_specialize=["M"])
def w4a16_fragment_tma_kernel(
    p_a32, w_desc, p_s32, p_bias, p_out, p_ws, p_count, M, N, K, stride_a32, chunks_per_split,
    GROUP_CHUNKS: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT: gl.constexpr, BLOCKS: gl.constexpr,
    UNROLL: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``mma.w4a16_fragment_kernel`` at one tile a warp, its words from a TMA ring (module docstring).
    w_desc: ``words`` viewed as ``[N/16, K/64, 128]`` int32, block ``[num_warps, UNROLL, 128]``."""
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    pid_s = gl.program_id(2)
    DT: gl.constexpr = p_out.dtype.element_ty
    DEQUANT: gl.constexpr = DEQUANT_BF16 if gl.bfloat16 == DT else DEQUANT_FP16
    MMA: gl.constexpr = MMA_BF16 if gl.bfloat16 == DT else MMA_FP16
    R: gl.constexpr = 32 * num_warps
    U: gl.constexpr = UNROLL
    BYTES: gl.constexpr = num_warps * UNROLL * 512
    LW: gl.constexpr = gl.BlockedLayout([1, 1, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    LA: gl.constexpr = gl.BlockedLayout([1, BLOCKS, 4], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    LWU: gl.constexpr = gl.BlockedLayout([1, 1, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    LAU: gl.constexpr = gl.BlockedLayout([1, BLOCKS, U, 4], [32, 1, 1, 1], [num_warps, 1, 1, 1], [3, 2, 1, 0])
    # a slot [warps, U, 128] as each lane reads it: its 16 bytes of every chunk of its warp's tile
    LS: gl.constexpr = gl.BlockedLayout([1, U, 4], [1, 1, 32], [num_warps, 1, 1], [2, 1, 0])
    L3: gl.constexpr = gl.BlockedLayout([1, 1, BLOCKS], [32, 1, 1], [num_warps, 1, 1], [2, 1, 0])
    LT: gl.constexpr = gl.SliceLayout(2, L3)
    LB: gl.constexpr = gl.SliceLayout(1, L3)
    c_begin = pid_s * chunks_per_split
    steps = chunks_per_split // U
    tile0 = pid_n * num_warps

    ring = gl.allocate_shared_memory(gl.int32, [STAGES, num_warps, U, 128], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()
    for i in gl.static_range(STAGES):
        mbarrier.expect(bars.index(i), BYTES, pred=i < steps)
        tma.async_copy_global_to_shared(
            w_desc, [tile0, c_begin + i * U, 0], bars.index(i), ring.index(i), pred=i < steps
        )

    # scale record [group of c + u, tile, row l // 4, j] and activations as mma.py: [R, 1, U, 4], [R, B, U, 4]
    r_w = _axis(R, 0, LWU)
    tile_w = tile0 + r_w // 32
    u_w = _axis(U, 2, LWU)
    o_rec = (tile_w * 8 + (r_w % 32) // 4) * 4 + _axis(4, 3, LWU)
    group_stride = (N // 16) * 32
    r_a = _axis(R, 0, LAU)
    m_a = (pid_m * BLOCKS + _axis(BLOCKS, 1, LAU)) * 8 + (r_a % 32) // 4
    o_a = m_a * stride_a32 + (r_a % 4) * 8 + _axis(4, 3, LAU) + _axis(U, 2, LAU) * 32
    mask_a = gl.broadcast(m_a < M, o_a)[0]
    c_last = c_begin + chunks_per_split - U

    acc0 = gl.zeros([R, 1, BLOCKS], gl.float32, layout=L3)
    acc1 = gl.zeros([R, 1, BLOCKS], gl.float32, layout=L3)
    acc2 = gl.zeros([R, 1, BLOCKS], gl.float32, layout=L3)
    acc3 = gl.zeros([R, 1, BLOCKS], gl.float32, layout=L3)
    recs = gl.load(p_s32 + o_rec + ((c_begin + u_w) // GROUP_CHUNKS) * group_stride)
    x0 = gl.load(p_a32 + o_a + c_begin * 32, mask=mask_a, other=0)
    x1 = gl.load(p_a32 + o_a + (c_begin * 32 + 4), mask=mask_a, other=0)
    for step in range(steps):
        c = c_begin + step * U
        c_next = gl.minimum(c + U, c_last)
        n_recs = gl.load(p_s32 + o_rec + ((c_next + u_w) // GROUP_CHUNKS) * group_stride)
        n_x0 = gl.load(p_a32 + o_a + c_next * 32, mask=mask_a, other=0)
        n_x1 = gl.load(p_a32 + o_a + (c_next * 32 + 4), mask=mask_a, other=0)
        slot = step % STAGES
        mbarrier.wait(bars.index(slot), (step // STAGES) & 1)
        got = ring.index(slot).load(LS)  # [warps, U, 128]
        _barrier()  # every warp has its words of the slot before it is refilled
        refill = step + STAGES < steps
        mbarrier.expect(bars.index(slot), BYTES, pred=refill)
        tma.async_copy_global_to_shared(
            w_desc, [tile0, c + STAGES * U, 0], bars.index(slot), ring.index(slot), pred=refill
        )
        # [warps, U, 32, 4] -> [warps, 32, U, 4] -> [R, 1, U, 4]: lane l of warp w, the kernel's row 32 w + l
        words = gl.reshape(gl.permute(gl.reshape(got, [num_warps, U, 32, 4]), [0, 2, 1, 3]), [R, 1, U, 4])
        words = gl.convert_layout(words, LWU)
        acc0, acc1, acc2, acc3 = fragment_step(
            words, recs, x0, x1, acc0, acc1, acc2, acc3, LW, LA, LT, LB, U, DEQUANT, MMA
        )
        recs, x0, x1 = n_recs, n_x0, n_x1
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    fragment_epilogue(
        acc0, acc1, acc2, acc3, p_out, p_bias, p_ws, p_count, M, N, tile0, pid_m, LT, LB, R, 1, BLOCKS, HAS_BIAS, SPLIT
    )


def words_descriptor(words: torch.Tensor, warps: int, unroll: int) -> TensorDescriptor:
    """``words [N/16, K/64, 32, 4]`` as the ``[N/16, K/64, 128]`` descriptor the kernel's TMA copies read."""
    flat = words.view(words.shape[0], words.shape[1], 128)
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
    return TensorDescriptor.from_tensor(flat, [warps, unroll, 128], layout)


def launch_tma(a, words, scales, perm, bias, *, warps: int, blocks: int, split: int, unroll: int, stages: int):
    """``mma.launch_fragment`` at one tile a warp, through :func:`w4a16_fragment_tma_kernel`."""
    if perm is not None:
        a = mma.permuted_columns(a, perm)
    a = a.contiguous()
    M, K = a.shape
    n_tiles, chunks = words.shape[:2]
    N = n_tiles * 16
    if chunks % split or (chunks // split) % unroll or n_tiles % warps:
        raise ValueError(
            f"split={split}, unroll={unroll}, warps={warps} do not divide {chunks} chunks, {n_tiles} tiles"
        )
    out = empty((M, N), a.dtype, a.device)
    grid = (n_tiles // warps, -(-M // (8 * blocks)), split)
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device) if split > 1 else out
    counts = arrival_counters(a.device, grid[0] * grid[1]) if split > 1 else words
    w4a16_fragment_tma_kernel[grid](
        a.view(torch.int32), words_descriptor(words, warps, unroll), scales.view(torch.int32),
        bias if bias is not None else scales, out, ws, counts, M, N, K, a.stride(0) // 2, chunks // split,
        GROUP_CHUNKS=chunks // scales.shape[0], HAS_BIAS=bias is not None, SPLIT=split > 1, BLOCKS=blocks,
        UNROLL=unroll, STAGES=stages, num_warps=warps,
    )  # fmt: skip
    return out


def _configs(K: int, N: int, M: int, splits, unrolls, stages):
    chunks = K // 64
    for split in splits:
        for unroll in unrolls:
            if chunks % split or (chunks // split) % unroll or (N // 16) % 4:
                continue
            for st in stages:
                yield dict(warps=4, blocks=fragment_blocks(M), split=split, unroll=unroll, stages=st)


def _check(dtype, dev, splits, unrolls, stages) -> list[str]:
    lines = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for K, N, G, qweight, scales, zeros, perm, bias in check_layers(dtype, dev, gen):
        packed = fragment.pack(qweight, scales, zeros)
        for M in (1, 3, 8, 16):
            for kw in _configs(K, N, M, splits, unrolls, stages):
                same = dict(warps=4, tiles=1, blocks=kw["blocks"], split=kw["split"], unroll=kw["unroll"])
                a = torch.randn(M, K, device=dev, dtype=dtype, generator=gen)
                for p, b in ((None, None), (perm, bias)):
                    got = launch_tma(a, packed.words, packed.scales, p, b, **kw)
                    want = mma.launch_fragment(a, packed.words, packed.scales, p, b, **same)
                    if not torch.equal(got, want):
                        lines.append(f"FAIL K{K} N{N} G{G} M{M} {kw} perm={p is not None}: not mma.py's bits")
    lines.append(f"check {dtype}: {'all pass' if not lines else f'{len(lines)} failures'}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="1,8,16")
    parser.add_argument("--splits", default="2,4,8,16")
    parser.add_argument("--unrolls", default="2,4")
    parser.add_argument("--stages", default="4,6,8")
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args()
    dtype = torch.bfloat16
    splits, unrolls, stages = ([int(v) for v in s.split(",")] for s in (args.splits, args.unrolls, args.stages))
    dev, _, bw = device_info()
    lines = [f"{torch.cuda.get_device_name()} copy bandwidth {bw / 1e12:.2f} TB/s, bf16"]
    check = _check(dtype, dev, splits, unrolls, stages)
    lines += check
    print("\n".join(check), flush=True)
    if args.check_only or check[-1].endswith("failures"):
        emit("w4a16_fragment_tma.txt", lines)
        return
    lines.append(
        "K N M | rule us (config) | TMA best us (split, unroll, stages) | cuBLAS us | % roofline | x rule | top"
    )
    for K, N in SHAPES:
        copies, _, packs, dense = rotated_layers(K, N, dtype, dev)
        for M in (int(m) for m in args.ms.split(",")):
            a = torch.randn(M, K, device=dev, dtype=dtype)
            rule = fragment_config(M, N, K)
            t_rule = _timed(
                lambda i, a=a, p=packs, kw=rule: mma.launch_fragment(a, *p[i][:2], None, None, **kw), copies
            )
            cublas = _timed(lambda i, a=a, dense=dense: a @ dense[i], copies)
            results = []
            for kw in _configs(K, N, M, splits, unrolls, stages):
                t = _timed(lambda i, a=a, p=packs, kw=kw: launch_tma(a, *p[i][:2], None, None, **kw), copies)
                results.append((t, f"s{kw['split']} u{kw['unroll']} st{kw['stages']}"))
            best, name, roof, top = ranked(results, K, N, M, bw)
            lines.append(
                f"{K} {N} {M} | {t_rule:.1f} ({rule}) | {best:.1f} ({name}) | {cublas:.1f} | "
                f"{100 * roof / best:.0f}% | {t_rule / best:.2f}x | {top}"
            )
            print(lines[-1], flush=True)
    emit("w4a16_fragment_tma.txt", lines)


if __name__ == "__main__":
    main()
