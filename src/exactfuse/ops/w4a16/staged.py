"""The multi-stage W4A16 tile for Hopper (Gluon): ``out^T = W^T a^T`` on wgmma, K steps in flight.

Each program computes one ``[BN, BM]`` tile of ``out^T`` over one K split. The packed words of
``STAGES - 1`` K steps (``[BK / 8, BN]`` int32) and the activations (``[BM, BK]``, in the NVMMA layout
wgmma reads as its B operand) are copied asynchronously (``cp.async``, 16 bytes a thread) into a ring of
shared-memory slots while one step is dequantized and multiplied. The words come back from shared
memory in a layout that gives the four lanes of a quad the same word (a broadcast read) and each lane
its own pair of weights in it, so the dequantized pairs join into wgmma's register A operand with no
data movement (``word_quads_layout``; the kernel asserts it). The split's scales and zero points are
read into shared memory once, as 16-bit pairs.

Dequantization is the spec's, bit for bit: two weights per PTX instruction, ``(MAGIC | q) - (MAGIC + z)``
in the activation dtype (exact: ``MAGIC`` is 128 in bf16 and 1024 in fp16, so ``MAGIC + q`` is exact),
times the scale with one rounding of the exact product, as the GEMV's packed math
(``gemv.py``). With split-K, each split stores its fp32 partial in a ``[S, M, N]`` workspace; the last
split of a tile to arrive (``ops/arrival.py``'s arrival counters) sums them in split order and rounds
(+ bias), or, for tiles with many partial bytes (``heuristics.staged_config``), the reduction kernel
``splitk.w4a16_splitk_reduce_kernel`` does the same in a second launch: deterministic, and both give the
same bits. One split writes the output directly. The wgmma is synchronous: with its A operand in
registers, an asynchronous one let ptxas reuse those registers for the next step's loads (offline SASS,
docs/heuristics.md).

What it takes (:func:`staged_unsupported` says why not otherwise): an sm_90 GPU and a Triton with Gluon,
fp16/bf16 activations whose rows start 16-byte aligned (act-order activations are gathered into a new
tensor first), N and K multiples of the tile (64: BN and BK), groups that are a multiple of BK (or one
group), no per-row groups (``group_index``). Measured against
the shipped tiles and cuBLAS in sweeps/w4a16_wgmma_staged.txt.
"""

from __future__ import annotations

import functools

import torch
import triton

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16.dequant import permuted_columns
from exactfuse.ops.w4a16.heuristics import TileConfig
from exactfuse.ops.w4a16.splitk import REDUCE_BLOCK, w4a16_splitk_reduce_kernel
from exactfuse.registry.platform import interpreter_enabled
from exactfuse.utils import compute_capability, empty

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

    # Triton 3.6 names the copy async_copy_global_to_shared and the CTA barrier thread_barrier; later
    # versions async_load (same arguments) and barrier
    _async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    _layout_function = gluon.constexpr_function
    HAS_GLUON = True
except (ImportError, AttributeError):  # a Triton without Gluon's Hopper language: the tl.dot tiles serve
    HAS_GLUON = False

SHARED_LIMIT = 200 * 1024  # bytes of shared memory a program may take (the H200 allows 227 KB)


def _pair_asm(magic: int, suffix: str) -> str:
    """Two weights of one packed word per instruction: the pair's nibbles (bits $3..$3+7 of word $2)
    become ``magic | q`` in each 16-bit half, minus $4 (``magic + z`` twice, exact), times $5 (the scale
    twice: one rounding of the exact product), out as two 16-bit floats."""
    return f"""{{
.reg .b32 t, u, p;
shr.u32 t, $2, $3;
shl.b32 u, t, 12;
lop3.b32 p, t, 0x0000000f, 0x{magic:04x}{magic:04x}, 0xea;
lop3.b32 p, u, 0x000f0000, p, 0xea;
sub.rn.{suffix} p, p, $4;
mul.rn.{suffix} p, p, $5;
mov.b32 {{$0, $1}}, p;
}}"""


if HAS_GLUON:
    _PAIR_BF16 = gl.constexpr(_pair_asm(0x4300, "bf16x2"))
    _PAIR_FP16 = gl.constexpr(_pair_asm(0x6400, "f16x2"))

    @_layout_function
    def word_quads_layout(BN, BK, num_warps):
        """``[BN, BK / 8, 4]``: (row of ``W^T``, packed word, pair within the word) laid out so that
        merging the last two dims (pair ``4 w + t``) gives the A operand's pair layout
        (``DotOperandLayout(0, NVMMA v3, k_width=2)``, warps along N): the word's four pairs on the four
        lanes of a quad, its rows and words as that layout has them."""
        reg = [[8, 0, 0]] + [[0, 1 << i, 0] for i in range((BK // 8).bit_length() - 1)]
        lane = [[0, 0, 1], [0, 0, 2], [1, 0, 0], [2, 0, 0], [4, 0, 0]]
        warp = [[16 << i, 0, 0] for i in range(num_warps.bit_length() - 1)]
        return gl.DistributedLinearLayout(reg, lane, warp, [], [BN, BK // 8, 4])

    @_layout_function
    def copy_layout(BM, BK, num_warps):
        """``[BM, BK]`` activations for cp.async with no element copied by two threads: 16 bytes a
        thread along K where the warps' rows fit in BM, else 8 or 4."""
        vec = 8
        while vec > 2 and (32 // (BK // vec)) * num_warps > BM:
            vec //= 2
        return gl.BlockedLayout([1, vec], [32 // (BK // vec), BK // vec], [num_warps, 1], [1, 0])

    @gluon.jit
    def _issue(a_ring, w_ring, p_a, p_qw, o_cm, m_cm, o_ck, o_cw, o_cn, N, stride_a, k0, slot):
        """Start the copies of one K step's activations and packed words into ring slot ``slot``."""
        _async_load(a_ring.index(slot), p_a + o_cm[:, None] * stride_a + (k0 + o_ck)[None, :], mask=m_cm[:, None])
        _async_load(w_ring.index(slot), p_qw + (k0 // 8 + o_cw)[:, None] * N + o_cn[None, :])
        async_copy.commit_group()

    @gluon.jit
    def _store_out(acc, p_out, p_bias, o_mn, out_n, m_out, HAS_BIAS: gl.constexpr):
        """Round the fp32 ``[BN, BM]`` tile of ``out^T`` to the output dtype (+ bias, rounded again) and
        store it: the split-K reduction's rounding (``splitk.w4a16_splitk_reduce_kernel``)."""
        DT: gl.constexpr = p_out.dtype.element_ty
        y = acc.to(DT)
        if HAS_BIAS:
            y = (y.to(gl.float32) + gl.expand_dims(gl.load(p_bias + out_n).to(gl.float32), 1)).to(DT)
        gl.store(p_out + o_mn, y, mask=m_out)

    @gluon.jit(do_not_specialize=["M"])
    def w4a16_staged_kernel(
        p_a, p_qw, p_s, p_z, p_bias, p_out, p_ws, p_count, M, N, stride_a, k_per_split,
        GROUP: gl.constexpr, GROUPS: gl.constexpr, HAS_ZEROS: gl.constexpr, HAS_BIAS: gl.constexpr,
        SPLIT: gl.constexpr, FIXUP: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
        STAGES: gl.constexpr, num_warps: gl.constexpr,
    ):  # fmt: skip
        """One ``[BN, BM]`` tile of ``out^T = W^T a^T`` over one K split; with FIXUP the last split of a
        tile to arrive sums the splits' fp32 partials and writes the output tile (else a second launch
        does, ``splitk.w4a16_splitk_reduce_kernel``).

        p_a: ``[M, K]`` fp16/bf16, rows ``stride_a`` apart (a multiple of 8), unit last stride, 16-byte
        aligned. p_qw: ``[K/8, N]`` int32 contiguous, k at bits ``4 * (k % 8)`` of row ``k // 8``. p_s /
        p_z: ``[K/GROUP, N]`` scales (a's dtype) / uint8 zero points (unused without HAS_ZEROS: 8),
        contiguous. p_bias: ``[N]`` (HAS_BIAS). p_out: ``[M, N]`` contiguous. With SPLIT (more than one
        program along grid axis 2): p_ws ``[S, M, N]`` fp32; with FIXUP p_count, int32 arrival counters,
        one per output tile, zero on entry and left zero. constexpr: GROUP (a multiple of BK, or >= K), GROUPS
        (the groups of one split), the tile, STAGES (ring slots), num_warps (``BN // 16``).
        """
        pid_n = gl.program_id(0)
        pid_m = gl.program_id(1)
        pid_s = gl.program_id(2)
        DT: gl.constexpr = p_a.dtype.element_ty
        MAGIC: gl.constexpr = 0x4300 if gl.bfloat16 == DT else 0x6400  # 128 (bf16) or 1024 (fp16)
        PAIR: gl.constexpr = _PAIR_BF16 if gl.bfloat16 == DT else _PAIR_FP16
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, BM, 16])  # fmt: skip
        w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        L3: gl.constexpr = word_quads_layout(BN, BK, num_warps)
        words_layout: gl.constexpr = gl.SliceLayout(2, L3)
        rows_layout: gl.constexpr = gl.SliceLayout(1, words_layout)
        ca: gl.constexpr = copy_layout(BM, BK, num_warps)
        cw: gl.constexpr = gl.BlockedLayout([1, 4], [32 // min(32, BN // 4), min(32, BN // 4)], [num_warps, 1],
                                            [1, 0])  # fmt: skip
        a_ring = gl.allocate_shared_memory(DT, [STAGES, BM, BK], gl.NVMMASharedLayout.get_default_for([BM, BK], DT))
        w_ring = gl.allocate_shared_memory(gl.int32, [STAGES, BK // 8, BN], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        o_cm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, ca))
        m_cm = o_cm < M
        o_ck = gl.arange(0, BK, layout=gl.SliceLayout(0, ca))
        o_cw = gl.arange(0, BK // 8, layout=gl.SliceLayout(1, cw))
        o_cn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, cw))
        k_begin = pid_s * k_per_split
        k_last = k_begin + k_per_split - BK
        for i in gl.static_range(STAGES - 1):
            _issue(a_ring, w_ring, p_a, p_qw, o_cm, m_cm, o_ck, o_cw, o_cn, N, stride_a, k_begin + i * BK, i)

        # the split's scales and zero points as pairs: the scale twice, MAGIC + z twice (exact)
        vec: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # a [BN] row per group
        s_smem = gl.allocate_shared_memory(gl.int32, [GROUPS, BN], flat)
        z_smem = gl.allocate_shared_memory(gl.int32, [GROUPS, BN], flat)
        o_sn = pid_n * BN + gl.arange(0, BN, layout=vec)
        for gi in gl.static_range(GROUPS):
            offs = (k_begin // GROUP + gi) * N + o_sn
            s16 = gl.load(p_s + offs).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
            z = gl.load(p_z + offs).to(gl.int32) if HAS_ZEROS else gl.full([BN], 8, gl.int32, layout=vec)
            s_smem.index(gi).store(s16 | (s16 << 16))
            z_smem.index(gi).store((z | MAGIC) * 0x10001)
        _barrier()

        t = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(0, L3)))
        shift = gl.expand_dims(gl.expand_dims(t * 8, 0), 0)
        acc = gl.zeros([BN, BM], gl.float32, layout=mma)
        for step in range(k_per_split // BK):
            async_copy.wait_group(STAGES - 2)
            # every warp is past the previous step (its wgmma synchronous), so that step's slot takes the
            # step STAGES - 1 ahead (the last step again at the tail: read, never used)
            _barrier()
            k_next = gl.minimum(k_begin + (step + STAGES - 1) * BK, k_last)
            _issue(a_ring, w_ring, p_a, p_qw, o_cm, m_cm, o_ck, o_cw, o_cn, N, stride_a, k_next,
                   (step + STAGES - 1) % STAGES)  # fmt: skip
            slot = step % STAGES
            g = (step * BK) // GROUP
            words = w_ring.index(slot).permute((1, 0)).load(words_layout)
            s3 = gl.expand_dims(gl.expand_dims(s_smem.index(g).load(rows_layout), 1), 2)
            z3 = gl.expand_dims(gl.expand_dims(z_smem.index(g).load(rows_layout), 1), 2)
            w3 = gl.broadcast(gl.expand_dims(words, 2), shift)[0]
            out_ty = p_a.dtype.element_ty  # the dtype itself: a constexpr-wrapped one cannot type the asm
            lo, hi = gl.inline_asm_elementwise(PAIR, "=h,=h,r,r,r,r", [w3, shift, z3, s3], (out_ty, out_ty), True, 1)
            w = gl.convert_layout(gl.reshape(gl.join(lo, hi), [BN, BK]), w_layout, assert_trivial=True)
            fence_async_shared()
            acc = warpgroup_mma(w, a_ring.index(slot).permute((1, 0)), acc)
        async_copy.wait_group(0)
        out_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, mma))
        out_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, mma))
        m_out = (out_m < M)[None, :]
        o_mn = out_m[None, :] * N + out_n[:, None]  # M * N < 2^31 (staged_unsupported)
        if SPLIT:
            gl.store(p_ws + pid_s.to(gl.int64) * M * N + o_mn, acc, mask=m_out)
        if SPLIT and FIXUP:
            # Serial fixup, no second launch: the barrier orders every thread's partial before the
            # arrival (released at GPU scope); the last of the tile's S programs to arrive reads the
            # partials past L1 (.cg) after the acquire and sums them in the fixed order s = 0, 1, ...,
            # as the two-launch reduction does, so the result does not depend on the arrival order.
            _barrier()
            S = gl.num_programs(2)
            tile = pid_m * gl.num_programs(0) + pid_n
            arrived = gl.atomic_add(p_count + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == S - 1:
                # read in a layout of its own, four columns a thread, at most 32 rows at a time (the
                # mma layout's offsets and addresses held across the loop doubled the kernel's
                # registers, offline)
                FM: gl.constexpr = min(BM, 32)
                fl: gl.constexpr = gl.BlockedLayout([4, 1], [16, 2], [1, num_warps], [0, 1])
                f_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, fl))
                for c in gl.static_range(BM // FM):
                    f_m = pid_m * BM + c * FM + gl.arange(0, FM, layout=gl.SliceLayout(0, fl))
                    f_mn = f_m[None, :] * N + f_n[:, None]
                    f_mask = (f_m < M)[None, :]
                    total = gl.zeros([BN, FM], gl.float32, layout=fl)
                    for s in range(S):
                        total += gl.load(p_ws + s.to(gl.int64) * M * N + f_mn, mask=f_mask, other=0.0,
                                         cache_modifier=".cg")  # fmt: skip
                    _store_out(total, p_out, p_bias, f_mn, f_n, f_mask, HAS_BIAS)
                gl.store(p_count + tile, 0)
        if not SPLIT:
            _store_out(acc, p_out, p_bias, o_mn, out_n, m_out, HAS_BIAS)


def shared_bytes(cfg: TileConfig, groups: int, itemsize: int = 2) -> int:
    """Shared memory one program takes: the activation and word rings, the split's scale and zero rows."""
    return cfg.num_stages * (cfg.BM * cfg.BK * itemsize + (cfg.BK // 8) * cfg.BN * 4) + 2 * groups * cfg.BN * 4


@functools.lru_cache(maxsize=1024)
def staged_shape_unsupported(N: int, K: int, G: int, cfg: TileConfig) -> str | None:
    """Why ``cfg`` cannot cut these sizes (None: it can): tile multiples, whole groups per split, enough K
    steps per split for the ring, 32-bit offsets and the shared memory. ``G`` is the kernel's group
    (``launch.kernel_group``: >= K for one group)."""
    BN, BK = cfg.BN, cfg.BK
    if cfg.num_warps * 16 != BN:
        return f"BN = {BN} must be 16 x num_warps ({cfg.num_warps}): one warpgroup row block a warp"
    if N % BN or K % BK or (G < K and G % BK):
        return f"it needs N % {BN}, K % {BK} and the group % {BK} to be 0 (N={N}, K={K}, group {G})"
    split, k_per_split = cfg.split_k, cfg.k_per_split
    if split * k_per_split != K or k_per_split % BK or k_per_split < (cfg.num_stages - 1) * BK:
        return f"split {split} x {k_per_split} does not cut K={K} into splits of >= {cfg.num_stages - 1} steps"
    if G < K and k_per_split % G:
        return f"splits of {k_per_split} do not hold whole groups of {G}"
    if K * N // 8 >= 2**31:
        return f"K * N / 8 = {K * N // 8} packed words need int64 offsets"
    groups = 1 if G >= K else k_per_split // G
    if shared_bytes(cfg, groups) > SHARED_LIMIT:
        return f"{groups} groups a split need more than {SHARED_LIMIT} bytes of shared memory"
    return None


def wgmma_unavailable(device: torch.device) -> str | None:
    """Why ``device`` cannot run the Gluon wgmma kernels at all (None: it can)."""
    if not HAS_GLUON:
        return "this Triton has no Gluon Hopper language"
    if interpreter_enabled() or device.type != "cuda" or compute_capability(device) != (9, 0):
        return "it runs on sm_90 (wgmma) GPUs only"
    return None


def staged_unsupported(
    a: torch.Tensor, N: int, G: int, perm: torch.Tensor | None, group_index: torch.Tensor | None, cfg: TileConfig
) -> str | None:
    """Why the staged tile cannot run these arguments at ``cfg`` (None: it can)."""
    if reason := wgmma_unavailable(a.device):
        return reason
    if group_index is not None:
        return "it reads one group for all the rows of a group (no group_index)"
    if a.dtype not in (torch.float16, torch.bfloat16):
        return f"a is {a.dtype}: it takes fp16 or bf16"
    if perm is None and (a.data_ptr() % 16 or (a.shape[0] > 1 and a.stride(0) % 8)):
        return "a's rows must start 16-byte aligned (cp.async copies 16 bytes)"
    if a.shape[0] * max(a.stride(0), a.shape[1], N) >= 2**31:
        return f"a spans {a.shape[0]} rows of {max(a.stride(0), a.shape[1], N)}: offsets past 2^31 need int64"
    return staged_shape_unsupported(N, a.shape[1], G, cfg)


def launch_staged(
    a: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
    G: int,
    cfg: TileConfig,
) -> torch.Tensor:
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` with :func:`w4a16_staged_kernel`, its split-K partials
    summed by the last split of each tile (``cfg.fixup``) or by the reduction kernel after it;
    act-order activations are gathered first
    (``dequant.permuted_columns``: one copy of the ``M x K`` activations). The caller checked
    :func:`staged_unsupported`."""
    if perm is not None:
        a = permuted_columns(a, perm)
    M, K = a.shape
    N = qweight.shape[1]
    out = empty((M, N), a.dtype, a.device)
    grid = (N // cfg.BN, triton.cdiv(M, cfg.BM), cfg.split_k)
    split = cfg.split_k > 1
    ws = torch.empty((cfg.split_k, M, N), dtype=torch.float32, device=a.device) if split else out
    fixup = split and cfg.fixup
    counts = arrival_counters(a.device, grid[0] * grid[1]) if fixup else qweight
    b = bias if bias is not None else scales
    w4a16_staged_kernel[grid](
        a, qweight, scales, zeros if zeros is not None else qweight, b, out, ws, counts, M, N, a.stride(0),
        cfg.k_per_split, GROUP=G, GROUPS=1 if G >= K else cfg.k_per_split // G, HAS_ZEROS=zeros is not None,
        HAS_BIAS=bias is not None, SPLIT=split, FIXUP=fixup, BN=cfg.BN, BM=cfg.BM, BK=cfg.BK,
        STAGES=cfg.num_stages, num_warps=cfg.num_warps,
    )  # fmt: skip
    if split and not fixup:
        w4a16_splitk_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](
            ws, b, out, M, N, cfg.split_k, HAS_BIAS=bias is not None, BLOCK=REDUCE_BLOCK
        )
    return out
