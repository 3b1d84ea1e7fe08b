"""A multi-stage W4A16 tile in Gluon for ``probe_w4a16_wgmma.py``: the packed words and activations of
``STAGES`` K steps in flight.

The probe's other variants load each K step's operands from global memory into registers (one step
ahead at most) and leave latency to the few programs an SM holds. Here each K step's activations
(``[BM, BK]``, into the NVMMA layout wgmma reads) and packed words (``[BK / 8, BN]``) are copied
asynchronously (``cp.async``, 16 bytes a thread) into a ring of ``STAGES`` shared-memory slots, so
``STAGES - 1`` steps are in flight while one is dequantized and multiplied. The words come back from
shared memory in a layout that gives the four lanes of a quad the same word (a broadcast read) and each
lane its own pair of weights in it, which joins into wgmma's register A operand with no data movement
(``word_quads_layout``); the split's scales and zero points are read into shared memory once, as
pairs (bf16 or fp16). Offline (Triton 3.6, sm_90a, BN = BM = BK = 64, 4 stages): 79 registers, 45 KB of shared memory,
616 SASS instructions, ``LDGSTS.128`` copies and four ``HGMMA.64x64x16`` a step.
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from exactfuse.ops.w4a16.splitk import REDUCE_BLOCK, w4a16_splitk_reduce_kernel
from exactfuse.utils import next_power_of_2


def _pair_asm(magic: int, suffix: str) -> str:
    """Two weights of one packed word per instruction, as the GEMV's packed math: the pair's nibbles (bits
    $3..$3+7 of word $2) become ``magic | q`` in each 16-bit half (``magic`` is 128 in bf16, 1024 in fp16,
    so the half is ``magic + q``), minus $4 (``magic + z`` twice, exact), times $5 (the scale twice: one
    rounding of the exact product), out as two 16-bit floats."""
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


_PAIR_BF16 = gl.constexpr(_pair_asm(0x4300, "bf16x2"))
_PAIR_FP16 = gl.constexpr(_pair_asm(0x6400, "f16x2"))


@gluon.constexpr_function
def word_quads_layout(BN, BK, num_warps):
    """``[BN, BK / 8, 4]``: (row, packed word, pair within the word) laid out so that merging the last two
    dims (pair ``4 w + t``) gives the A operand's pair layout: the word's four pairs on the four lanes of
    a quad, its rows and words as that layout has them."""
    reg = [[8, 0, 0]] + [[0, 1 << i, 0] for i in range((BK // 8).bit_length() - 1)]
    lane = [[0, 0, 1], [0, 0, 2], [1, 0, 0], [2, 0, 0], [4, 0, 0]]
    warp = [[16 << i, 0, 0] for i in range(num_warps.bit_length() - 1)]
    return gl.DistributedLinearLayout(reg, lane, warp, [], [BN, BK // 8, 4])


@gluon.constexpr_function
def copy_layout(BM, BK, num_warps):
    """``[BM, BK]`` activations for cp.async with no element copied by two threads: 16 bytes a thread
    along K where the warps' rows fit in BM, else 8 or 4."""
    vec = 8
    while vec > 2 and (32 // (BK // vec)) * num_warps > BM:
        vec //= 2
    return gl.BlockedLayout([1, vec], [32 // (BK // vec), BK // vec], [num_warps, 1], [1, 0])


@gluon.jit
def _issue(a_ring, w_ring, p_a, p_qw, o_cm, m_cm, o_ck, o_cw, o_cn, N, stride_a, k0, slot):
    """Start the copies of one K step's activations and packed words into ring slot ``slot``."""
    async_copy.async_copy_global_to_shared(
        a_ring.index(slot), p_a + o_cm[:, None] * stride_a + (k0 + o_ck)[None, :], mask=m_cm[:, None]
    )
    async_copy.async_copy_global_to_shared(w_ring.index(slot), p_qw + (k0 // 8 + o_cw)[:, None] * N + o_cn[None, :])
    async_copy.commit_group()


@gluon.jit
def w4a16_staged_kernel(
    p_a, p_qw, p_s, p_z, p_ws, M, N, stride_a, k_per_split,
    GROUP: gl.constexpr, GROUPS: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
    STAGES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """``ws[s, m, n]``: split ``s``'s partial of ``a W`` for one ``[BN, BM]`` tile of ``out^T``, with
    ``STAGES`` K steps of activations and packed words in flight (cp.async into a shared ring); the
    split's scales and zero points (asymmetric; bf16 or fp16) read into shared memory first, as pairs."""
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    pid_s = gl.program_id(2)
    DT: gl.constexpr = p_a.dtype.element_ty
    MAGIC: gl.constexpr = 0x4300 if gl.bfloat16 == DT else 0x6400  # 128 (bf16) or 1024 (fp16): q in the mantissa
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BM, 16]
    )
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    L3: gl.constexpr = word_quads_layout(BN, BK, num_warps)
    words_layout: gl.constexpr = gl.SliceLayout(2, L3)
    rows_layout: gl.constexpr = gl.SliceLayout(1, words_layout)
    # copies: activations along K (copy_layout), words 16 bytes a thread along N
    ca: gl.constexpr = copy_layout(BM, BK, num_warps)
    cw: gl.constexpr = gl.BlockedLayout([1, 4], [32 // min(32, BN // 4), min(32, BN // 4)], [num_warps, 1], [1, 0])
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

    # the split's scales and zero points as pairs: scale twice, MAGIC + z twice (exact)
    vec: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # a [BN] row per group
    s_smem = gl.allocate_shared_memory(gl.int32, [GROUPS, BN], flat)
    z_smem = gl.allocate_shared_memory(gl.int32, [GROUPS, BN], flat)
    o_sn = pid_n * BN + gl.arange(0, BN, layout=vec)
    for gi in gl.static_range(GROUPS):
        offs = (k_begin // GROUP + gi) * N + o_sn
        s16 = gl.load(p_s + offs).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
        z = gl.load(p_z + offs).to(gl.int32)
        s_smem.index(gi).store(s16 | (s16 << 16))
        z_smem.index(gi).store((z | MAGIC) * 0x10001)
    gl.thread_barrier()

    t = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(0, L3)))
    shift = gl.expand_dims(gl.expand_dims(t * 8, 0), 0)
    acc = gl.zeros([BN, BM], gl.float32, layout=mma)
    n_steps = k_per_split // BK
    for step in range(n_steps):
        async_copy.wait_group(STAGES - 2)
        # every warp is past the previous step (its wgmma synchronous), so its slot takes the step
        # STAGES - 1 on. The wgmma stays synchronous: its A operand is registers, and an asynchronous one
        # would leave them in use while the next step's words are loaded (offline, ptxas reused them).
        gl.thread_barrier()
        k_next = gl.minimum(k_begin + (step + STAGES - 1) * BK, k_last)
        _issue(a_ring, w_ring, p_a, p_qw, o_cm, m_cm, o_ck, o_cw, o_cn, N, stride_a, k_next,
               (step + STAGES - 1) % STAGES)  # fmt: skip
        slot = step % STAGES
        g = (step * BK) // GROUP
        words = w_ring.index(slot).permute((1, 0)).load(words_layout)
        s = s_smem.index(g).load(rows_layout)
        zz = z_smem.index(g).load(rows_layout)
        w3 = gl.broadcast(gl.expand_dims(words, 2), shift)[0]
        s3 = gl.expand_dims(gl.expand_dims(s, 1), 2)
        z3 = gl.expand_dims(gl.expand_dims(zz, 1), 2)
        PAIR: gl.constexpr = _PAIR_BF16 if gl.bfloat16 == DT else _PAIR_FP16
        out_ty = p_a.dtype.element_ty
        lo, hi = gl.inline_asm_elementwise(PAIR, "=h,=h,r,r,r,r", [w3, shift, z3, s3], (out_ty, out_ty), True, 1)
        w = gl.convert_layout(gl.reshape(gl.join(lo, hi), [BN, BK]), w_layout, assert_trivial=True)
        fence_async_shared()
        acc = warpgroup_mma(w, a_ring.index(slot).permute((1, 0)), acc)
    async_copy.wait_group(0)
    out_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, mma))
    out_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, mma))
    ptrs = p_ws + (pid_s * M + out_m[None, :]).to(gl.int64) * N + out_n[:, None]
    gl.store(ptrs, acc, mask=(out_m < M)[None, :])


def staged_gemm(a, qweight, scales, zeros, BN: int, BK: int, stages: int, splits: int) -> torch.Tensor:
    """``a @ dequantize(W)`` (bf16 or fp16, asymmetric group-128 codes, ``N % BN == 0``) with
    :func:`w4a16_staged_kernel` and the shipped split-K reduction."""
    M, K = a.shape
    N = qweight.shape[1]
    k_per_split = K // splits
    assert zeros is not None and a.dtype in (torch.bfloat16, torch.float16), (a.dtype, zeros is None)
    assert N % BN == 0 and k_per_split % 128 == 0, (M, K, N)
    assert k_per_split // BK >= stages - 1, (k_per_split, BK, stages)
    BM = min(128, max(8, next_power_of_2(M)))
    ws = torch.empty((splits, M, N), dtype=torch.float32, device=a.device)
    w4a16_staged_kernel[(N // BN, triton.cdiv(M, BM), splits)](
        a, qweight, scales, zeros, ws, M, N, a.stride(0), k_per_split,
        GROUP=128, GROUPS=k_per_split // 128, BN=BN, BM=BM, BK=BK, STAGES=stages, num_warps=BN // 16,
    )  # fmt: skip
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    w4a16_splitk_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](
        ws, out, out, M, N, splits, HAS_BIAS=False, BLOCK=REDUCE_BLOCK
    )
    return out
