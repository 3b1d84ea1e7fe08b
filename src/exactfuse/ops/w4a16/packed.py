"""``w4a16_gemm_packed``'s ``gluon`` provider: the warp-specialized stream-K kernels up to
``heuristics.PACKED_KERNEL_MAX_M`` rows where :func:`packed_supports` takes the arguments (the mma.sync
kernel, ``packed_kernel.py``; the wgmma kernel, ``packed_wgmma_kernel.py``, where
``heuristics.packed_wgmma_config`` routes: 33-128 rows of a large layer), the layout dequantized in one kernel
and ``torch.matmul`` above (``dequant.packed_dense_gemm``: the spec's bits) and for layers the kernels' tiling
does not divide (N not a multiple of 64).

The kernels are launched as programmatic dependent launches (``pdl``: the first ring's weights are read while
the previous kernel of the stream finishes) wherever that previous kernel cannot have written the weights:
after a kernel of this op's own (the wgmma kernel's column gather, the act-order gather), or when the weight
tensors were read by an earlier call here and PyTorch has counted no write to them since
(:func:`weights_unchanged`). Everywhere else, the first call on a weight and the first after a write, the
launch is plain. The results are the same bits either way."""

from __future__ import annotations

import functools
import re
import weakref

import torch

from exactfuse.ops.arrival import arrival_counters
from exactfuse.ops.w4a16.dequant import packed_dense_gemm, permuted_columns
from exactfuse.ops.w4a16.fragment import CHUNK_K, TILE_N
from exactfuse.ops.w4a16.heuristics import PACKED_KERNEL_MAX_M, packed_config, packed_wgmma_config, stream_k
from exactfuse.ops.w4a16.staged import HAS_GLUON, wgmma_unavailable
from exactfuse.utils import empty, num_sms

if HAS_GLUON:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from exactfuse.ops.w4a16.packed_kernel import w4a16_packed_kernel
    from exactfuse.ops.w4a16.packed_smem import ACTS_SMEM, SCALES_SMEM, WORDS_SMEM, ZEROS_SMEM
    from exactfuse.ops.w4a16.packed_wgmma_kernel import w4a16_packed_wgmma_kernel

CONSUMER_WARPS = 4
ZERO_ROW = 32  # int32 words in 128 bytes (a TMA destination's alignment): the shortest zero-point row a slot holds
# ptxas before CUDA 13.3 may give the registers of a register-A wgmma's operand to later instructions before the
# wgmma has read them (fixed in 13.3, NVIDIA's release notes); the pipelined wgmma consumer, which dequantizes
# the next step while a step's wgmmas run, then multiplies corrupted weights: its one-hot checks failed under
# Triton 3.6's ptxas 12.8 on an H100 (benchmarks/results/h100/sweeps/w4a16_packed_wgmma.txt)
PIPELINING_PTXAS = (13, 3)


@functools.cache
def pipelining_unsafe() -> str | None:
    """Why the wgmma kernel's pipelined consumer may not run here (the ptxas Triton runs for sm_90 is older
    than :data:`PIPELINING_PTXAS`), else None."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        version = get_ptxas(90).version
    except Exception as exc:  # no NVIDIA backend, or a Triton that names its tools otherwise
        return f"the version of Triton's sm_90 ptxas cannot be read ({type(exc).__name__}: {exc})"
    found = re.match(r"(\d+)\.(\d+)", str(version))
    if found is None or tuple(map(int, found.groups())) < PIPELINING_PTXAS:
        return (
            f"Triton's sm_90 ptxas is {version}; before {'.'.join(map(str, PIPELINING_PTXAS))} it may reuse a "
            "register-A wgmma's operand registers before the wgmma reads them (TRITON_PTXAS_PATH names another)"
        )
    return None


# per words tensor (by id, while it lives): weak references to the words, scales and zero points of its last
# call here and their version counters then; a plain dict lookup, not a weak-keyed one: 0.6 against 7.8 µs a
# call (timeit, a 2-core CPU)
_READ: dict[int, tuple] = {}


def _ref(t: torch.Tensor | None):
    return None if t is None else weakref.ref(t)


def weights_unchanged(words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None) -> bool:
    """Whether these same three tensors were read by the last call here on ``words`` and PyTorch has counted no
    write to any of them since (the version counter, which every in-place op, ``copy_`` and ``load_state_dict``
    advances; a tensor made anew, as ``.to()`` makes one, has no record), recording them now. Then no kernel
    just before this call wrote them, and a launch may read them before the previous kernel of the stream
    finishes. An inference tensor (made under ``torch.inference_mode``) counts no versions: never. A write
    PyTorch does not see (through ``.data``, or a kernel launched on the raw pointer) must be followed by
    :func:`weights_written`."""
    if words.is_inference() or scales.is_inference() or (zeros is not None and zeros.is_inference()):
        return False
    versions = (words._version, scales._version, None if zeros is None else zeros._version)
    seen = _READ.get(id(words))
    if (seen is not None and seen[3] == versions and seen[0]() is words and seen[1]() is scales
            and (seen[2] is None if zeros is None else seen[2]() is zeros)):  # fmt: skip
        return True
    key = id(words)
    _READ[key] = (weakref.ref(words, lambda _, key=key: _READ.pop(key, None)), _ref(scales), _ref(zeros), versions)
    return False


def weights_written(*tensors: torch.Tensor | None) -> None:
    """Say that these weight tensors were written where PyTorch's version counters do not see it (a kernel
    launched on their raw pointers): the next call on them launches plainly (:func:`weights_unchanged`)."""
    written = {id(t) for t in tensors if t is not None}
    for key, entry in list(_READ.items()):
        if any(ref is not None and id(ref()) in written for ref in entry[:3]):
            _READ.pop(key, None)


def register_cap(warps: int, per_sm: int) -> int | None:
    """The registers a thread (``maxnreg``) that let ``per_sm`` CTAs share an SM's 65,536: a CTA is ``warps``
    consumer warps and the producer's warp group (4 warps, given back to 24 registers a thread by
    ``setmaxnreg``, which hands them to the consumers); None at one CTA an SM (the compiler's choice)."""
    if per_sm == 1:
        return None
    return 65536 // (per_sm * 32 * (warps + 4)) // 8 * 8


def _kernel_operands(a, words, scales, zeros, *, t_cta: int, unroll: int, rows: int, per_sm: int):
    """What both kernels take after the activations' layout: ``a`` contiguous by rows (act-order gathered),
    the TMA descriptors of the words, scales, zero points and ``[chunk, row, pair]`` activations (box ``[unroll,
    rows, 32]``), the units (tile groups, row blocks, steps), the stream-K grid and pieces, and the fp32
    workspace (two slots of ``rows x 16 t_cta`` a CTA)."""
    if a.stride(1) != 1 or a.stride(0) % 8 or a.data_ptr() % 16:
        a = a.contiguous() if a.shape[1] % 8 == 0 and a.data_ptr() % 16 == 0 else a.clone()
    M = a.shape[0]
    n_tiles, chunks = words.shape[:2]
    a32 = a.view(torch.int32)
    acts = a32.as_strided((chunks, M, 32), (32, a32.stride(0), 1))  # [chunk, row, pair]
    w_desc = TensorDescriptor.from_tensor(words.view(n_tiles, chunks, 128), [t_cta, unroll, 128], WORDS_SMEM)
    s_desc = TensorDescriptor.from_tensor(scales.view(torch.int16), [1, 16 * t_cta], SCALES_SMEM)
    z_box = [1, max(2 * t_cta, ZERO_ROW)]
    z_desc = None if zeros is None else TensorDescriptor.from_tensor(zeros, z_box, ZEROS_SMEM)
    a_desc = TensorDescriptor.from_tensor(acts, [unroll, rows, 32], ACTS_SMEM)
    n_groups, m_blocks, steps = n_tiles // t_cta, -(-M // rows), chunks // unroll
    grid, pieces = stream_k(n_groups * m_blocks, steps, unroll, num_sms(a.device) * per_sm)
    ws = torch.empty((grid, 2, rows, 16 * t_cta), dtype=torch.float32, device=a.device)
    return (w_desc, s_desc, z_desc, a_desc), (n_groups, m_blocks, steps), grid, pieces, ws


def _check_tiling(words, t_cta: int, unroll: int) -> None:
    n_tiles, chunks = words.shape[:2]
    if chunks % unroll or n_tiles % t_cta:
        raise ValueError(f"unroll={unroll}, {t_cta} tiles a CTA do not divide {chunks} chunks, {n_tiles} tiles")


def launch_packed(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
    *,
    tiles: int,
    blocks: int,
    unroll: int,
    stages: int,
    warps: int = CONSUMER_WARPS,
    per_sm: int = 1,
    pdl: bool = False,
    per_warp: bool = False,
) -> torch.Tensor:
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` by ``w4a16_packed_kernel`` from the fragment layout
    (``fragment.py``): persistent (at most ``per_sm`` CTAs an SM), deterministic on a given GPU. ``pdl``: a
    programmatic dependent launch, the first weights read while the previous kernel of the stream finishes,
    for callers whose weights no kernel just before wrote (the reads come before the wait). ``per_warp``: each
    of the 4 consumer warps a partition of its own, releasing its part of a slot alone."""
    if per_warp and (warps != 4 or per_sm != 1):
        raise ValueError(f"per_warp takes 4 consumer warps and one CTA an SM, got warps={warps}, per_sm={per_sm}")
    t_cta = warps * tiles
    _check_tiling(words, t_cta, unroll)
    if perm is not None:
        a = permuted_columns(a, perm)
    M, N = a.shape[0], words.shape[0] * TILE_N
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    descs, (n_groups, m_blocks, steps), grid, pieces, ws = _kernel_operands(
        a, words, scales, zeros, t_cta=t_cta, unroll=unroll, rows=8 * blocks, per_sm=per_sm
    )
    counts = arrival_counters(a.device, n_groups * m_blocks * (4 if per_warp else 1))
    w4a16_packed_kernel[(grid,)](
        *descs, bias if bias is not None else out, out, ws, counts, M, N, n_groups, steps,
        n_groups * m_blocks * steps, GROUP_CHUNKS=words.shape[1] // scales.shape[0], HAS_BIAS=bias is not None,
        HAS_ZEROS=zeros is not None, BLOCKS=blocks, TILES=tiles, UNROLL=unroll, STAGES=stages, PIECES=pieces,
        PDL=pdl, PER_WARP=per_warp, num_warps=warps, maxnreg=register_cap(warps, per_sm), launch_pdl=pdl,
    )  # fmt: skip
    return out


@functools.cache
def _mma_k_order(K: int, device: torch.device) -> torch.Tensor:
    """:func:`wgmma_columns` without act-order: column ``64 c + kappa`` of ``a'`` is column ``64 c + k`` of
    ``a``, ``kappa = 16 j + 8 h + 2 qq + e`` and ``k = 16 qq + 4 j + 2 h + e`` (j, qq < 4; h, e < 2)."""
    kappa = torch.arange(K)
    j, h, qq, e = kappa % 64 // 16, kappa % 16 // 8, kappa % 8 // 2, kappa % 2
    return (kappa - kappa % 64 + 16 * qq + 4 * j + 2 * h + e).to(device)


def wgmma_columns(a: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    """``a[:, perm]`` with each 64-column chunk's columns in the wgmma kernel's k order
    (``packed_wgmma_kernel.py``: MMA k-position ``kappa`` of a chunk holds the weights of the fragment layout's
    ``k``), as a new contiguous tensor: one gather kernel."""
    return permuted_columns(a, perm, _mma_k_order(a.shape[1], a.device))


def launch_packed_wgmma(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    bias: torch.Tensor | None,
    *,
    tiles: int,
    rows: int,
    unroll: int,
    stages: int,
    warps: int = CONSUMER_WARPS,
    pdl: bool = False,
    pipelined: bool = False,
    groups: int = 1,
) -> torch.Tensor:
    """``a[:, perm] @ W (+ bias)`` -> ``[M, N]`` by ``w4a16_packed_wgmma_kernel`` from the fragment layout:
    units of ``rows`` (32, 64 or 128) rows of ``a`` by ``16 tiles warps groups`` columns, ``warps`` 4 or 8
    consumer warps (one or two warpgroups) in each of ``groups`` consumer partitions; persistent, one CTA an SM,
    deterministic on a given GPU. The activations are gathered once into the kernel's k order
    (:func:`wgmma_columns`). ``pipelined``: each step's wgmmas run while the next step is dequantized (else each
    step waits for its own), refused where :func:`pipelining_unsafe` says why. ``groups`` 2: two consumer
    warpgroups (``warps`` 4, not ``pipelined``), each a partition of its own that takes its half of each slot's
    tiles and releases the slot alone, so one dequantizes while the other's wgmmas run; the results are those
    of ``groups`` 1 with 8 warps, bit for bit."""
    if warps not in (4, 8) or rows not in (32, 64, 128):
        raise ValueError(f"the wgmma kernel takes 4 or 8 consumer warps and 32, 64 or 128 rows, got {warps}, {rows}")
    if groups not in (1, 2) or (groups == 2 and (warps != 4 or pipelined)):
        raise ValueError(
            f"groups={groups}: the wgmma kernel takes 1 or 2 consumer partitions, 2 with warps=4 and "
            f"pipelined=False (got warps={warps}, pipelined={pipelined})"
        )
    if pipelined and (reason := pipelining_unsafe()):
        raise ValueError(f"pipelined=True: {reason}")
    t_cta = warps * tiles * groups
    _check_tiling(words, t_cta, unroll)
    M, N = a.shape[0], words.shape[0] * TILE_N
    out = empty((M, N), a.dtype, a.device)
    if M == 0:
        return out
    descs, (n_groups, m_blocks, steps), grid, pieces, ws = _kernel_operands(
        wgmma_columns(a, perm), words, scales, zeros, t_cta=t_cta, unroll=unroll, rows=rows, per_sm=1
    )
    counts = arrival_counters(a.device, n_groups * m_blocks * groups)  # a counter a unit and consumer partition
    w4a16_packed_wgmma_kernel[(grid,)](
        *descs, bias if bias is not None else out, out, ws, counts, M, N, n_groups, steps,
        n_groups * m_blocks * steps, GROUP_CHUNKS=words.shape[1] // scales.shape[0], HAS_BIAS=bias is not None,
        HAS_ZEROS=zeros is not None, BM=rows, TILES=tiles, UNROLL=unroll, STAGES=stages, PIECES=pieces, PDL=pdl,
        PIPELINED=pipelined, GROUPS=groups, num_warps=warps, launch_pdl=pdl,
    )  # fmt: skip
    return out


def packed_supports(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> bool | str:
    """An sm_90 GPU with Gluon, ``a`` with unit last stride, contiguous, 16-byte aligned layout tensors; else
    the reason."""
    if reason := wgmma_unavailable(a.device):
        return reason
    if a.stride(1) != 1:
        return f"a has strides {tuple(a.stride())}: the kernel reads rows of a with unit last stride"
    for name, t in (("words", words), ("scales", scales), ("zeros", zeros), ("perm", perm), ("bias", bias)):
        if t is not None and not t.is_contiguous():
            return f"{name} has strides {tuple(t.stride())}: the kernel reads it contiguous"
    for name, t in (("words", words), ("scales", scales), ("zeros", zeros)):
        if t is not None and t.data_ptr() % 16:
            return f"{name} starts at an address that is not 16-byte aligned: the kernel reads it by TMA"
    if a.shape[0] * words.shape[0] * TILE_N >= 2**31:
        return "outputs past 2^31 need int64 offsets, which the kernel does not take"
    return True


def w4a16_gemm_packed_gluon(
    a: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    perm: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    N, K = words.shape[0] * TILE_N, words.shape[1] * CHUNK_K
    cfg = packed_config(a.shape[0], N, K, scales.shape[0])
    if a.shape[0] > PACKED_KERNEL_MAX_M or cfg is None:  # rows past the kernel's, or a layer it does not divide
        return packed_dense_gemm(a, words, scales, zeros, perm, bias)
    unchanged = weights_unchanged(words, scales, zeros)  # recorded on every call, whatever the launch
    if wgmma := packed_wgmma_config(a.shape[0], N, K, scales.shape[0]):  # after its own column gather
        return launch_packed_wgmma(a, words, scales, zeros, perm, bias, **wgmma, pdl=True)
    return launch_packed(a, words, scales, zeros, perm, bias, **cfg, pdl=unchanged or perm is not None)
