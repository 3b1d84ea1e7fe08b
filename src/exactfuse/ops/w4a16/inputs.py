"""Inputs of w4a16_gemm (shared by tests, ``verify`` and ``bench``), its warmup, benchmark grids and
roofline cost."""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16 import triton as _triton
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.ops.w4a16.packing import PreparedW4A16, pack_rows, prepare_gptq, quantize_rtn
from exactfuse.registry import Case
from exactfuse.testing.inputs import make_generator


def random_weights(
    K: int,
    N: int,
    dtype: torch.dtype,
    device,
    gen: torch.Generator,
    *,
    group_size: int = 128,
    symmetric: bool = True,
    act_order: bool = False,
    format: str = "v1",
) -> PreparedW4A16:
    """RTN-quantized random ``[N, K]`` weights (scale ~1/sqrt(K)) in the prepared layout on ``device``."""
    w = torch.randn((N, K), generator=gen) / K**0.5
    order = torch.randperm(K, generator=gen) if act_order else None
    t = quantize_rtn(w, group_size, symmetric, format=format, order=order, scale_dtype=dtype)
    prepared = prepare_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, format=format, sym=symmetric)
    return PreparedW4A16(*(x.to(device) if isinstance(x, torch.Tensor) else x for x in prepared))


def make_case(case_id, M, K, N, dtype, device, gen, *, bias=False, **weight_options) -> Case:
    w = random_weights(K, N, dtype, device, gen, **weight_options)
    a = torch.randn((M, K), generator=gen).to(dtype).to(device)
    b = (torch.randn((N,), generator=gen) * 0.1).to(dtype).to(device) if bias else None
    return Case(case_id, (a, w.qweight, w.scales, w.zeros, w.perm, b, w.group_size))


def row_group_case(case_id, M, K, N, groups, dtype, device, gen, *, symmetric=True, bias=False) -> Case:
    """A weight with a group per row (``group_index``: random rows of ``groups`` scale rows, some unused,
    rows in no order), as a row-parallel shard of an act-order layer has."""
    codes = torch.randint(0, 16, (K, N), generator=gen, dtype=torch.int32)
    scales = (torch.rand((groups, N), generator=gen) + 0.5) / (8 * K**0.5)
    zeros = None if symmetric else torch.randint(0, 16, (groups, N), generator=gen).to(torch.uint8).to(device)
    group_index = torch.randint(0, max(1, groups - 1), (K,), generator=gen, dtype=torch.int32)
    a = torch.randn((M, K), generator=gen).to(dtype).to(device)
    b = (torch.randn((N,), generator=gen) * 0.1).to(dtype).to(device) if bias else None
    args = (a, pack_rows(codes).to(device), scales.to(dtype).to(device), zeros, None, b, 128, True,
            group_index.to(device))  # fmt: skip
    return Case(case_id, args)


GROUP_SIZES = (32, 64, 128, 256, -1)
QUICK_M = (1, 0, 3, 17)


def _group_id(g: int) -> str:
    return "gch" if g == -1 else f"g{g}"


@w4a16_gemm.inputs
def _inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    """K=256, N=64 (interpreter-sized) over M, group sizes, symmetry, act-order, bias; real shapes on CUDA."""
    gen = make_generator(seed)
    K, N = 256, 64
    for M in QUICK_M:
        for sym in (True, False):
            for act in (False, True):
                s, o = "sym" if sym else "asym", "-actorder" if act else ""
                opts = dict(group_size=128, symmetric=sym, act_order=act, bias=M == 17)
                yield make_case(f"M{M}-K{K}-N{N}-g128-{s}{o}", M, K, N, dtype, device, gen, **opts)
    for g in GROUP_SIZES:
        for M in (1, 17) if quick else (1, 17, 64):
            yield make_case(
                f"M{M}-K{K}-N{N}-{_group_id(g)}-asym", M, K, N, dtype, device, gen, group_size=g, symmetric=False
            )
    for M in (1, 17) if quick else (0, 1, 17, 200):
        for sym in (True, False):
            s = "sym" if sym else "asym"
            yield row_group_case(f"M{M}-K{K}-N{N}-rowgroups-{s}", M, K, N, 6, dtype, device, gen, symmetric=sym,
                                 bias=M == 17)  # fmt: skip
    if quick or device.type != "cuda":
        return
    yield row_group_case("M64-K7168-N4096-rowgroups-asym", 64, 7168, 4096, 112, dtype, device, gen, symmetric=False)
    for (K, N), M in [((4096, 4096), 1), ((4096, 4096), 16), ((4096, 14336), 8), ((14336, 4096), 64)]:
        yield make_case(f"M{M}-K{K}-N{N}-g128-sym", M, K, N, dtype, device, gen)
    for M in (200, 1024):
        yield make_case(
            f"M{M}-K4096-N4096-g128-asym-actorder-bias",
            M,
            4096,
            4096,
            dtype,
            device,
            gen,
            symmetric=False,
            act_order=True,
            bias=True,
        )


# ------------------------------------------------------------------ warmup
# a row count in every bucket of heuristics.BUCKETS (M = 2 is the two-row GEMV's) and the dense path; on
# sm_90 every BM of the staged tile (8 to 128) and both its split rules (M <= 64 and above)
WARMUP_M = (1, 2, 8, 16, 32, 64, 128, 256, 512, 1024)


@w4a16_gemm.warmup
def _warmup(
    device,
    dtype,
    *,
    shapes=((4096, 4096),),
    group_size=128,
    symmetric=True,
    act_order=False,
    bias=False,
    row_groups=False,
    deterministic=True,
    **other_ops_options,
):
    """Compile every kernel specialization the layers ``shapes = ((K, N), ...)`` need.

    One launch per M bucket of the heuristic and per split / no-split variant,
    so CUDA-graph capture at any M triggers no JIT compile. ``row_groups``: the
    layers have a group per row (row shards of act-order layers, K their shard's),
    whose dequantize path serves every M. ``deterministic=False``: layers that let
    split-K use atomics (another specialization). Options meant for other ops' warmups
    (``exactfuse.warmup`` passes them to every op) are ignored.
    """
    gen = make_generator(0)
    for K, N in shapes:
        b = torch.zeros((N,), dtype=dtype, device=device) if bias else None
        if row_groups:
            groups = max(1, K // (K if group_size == -1 else group_size))
            case = row_group_case("warmup", 1, K, N, groups, dtype, device, gen, symmetric=symmetric)
            a, qweight, scales, zeros, perm, _, G, deterministic, group_index = case.args
            _triton.launch_w4a16_gemm(a, qweight, scales, zeros, perm, b, G, deterministic, group_index)
            continue
        w = random_weights(K, N, dtype, device, gen, group_size=group_size, symmetric=symmetric, act_order=act_order)
        for M in WARMUP_M:
            a = torch.ones((M, K), dtype=dtype, device=device)
            _triton.launch_w4a16_gemm(a, w.qweight, w.scales, w.zeros, w.perm, b, w.group_size, deterministic)


# ------------------------------------------------------------- bench grids
BENCH_SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672))
BENCH_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 2048, 4096)
QUICK_GRID = ((1, 4096, 4096), (16, 4096, 14336), (128, 14336, 4096), (4096, 4096, 4096))


def _random_prepared(K: int, N: int, dtype, device) -> PreparedW4A16:
    """Uniform random 4-bit codes with small positive scales (group 128, symmetric): no quantizer cost."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (K // 8, N), dtype=torch.int32, device=device)
    scales = (torch.rand((K // 128, N), device=device) * 0.01 + 0.001).to(dtype)
    return PreparedW4A16(qweight, scales, None, None, 128)


def _bench_cases(device, dtype, points):
    weights: dict[tuple[int, int], PreparedW4A16] = {}
    for M, K, N in points:
        if (K, N) not in weights:
            weights = {(K, N): _random_prepared(K, N, dtype, device)}  # keep one weight set alive
        w = weights[(K, N)]
        a = torch.randn((M, K), dtype=dtype, device=device)
        yield Case(f"M{M}-K{K}-N{N}", (a, w.qweight, w.scales, w.zeros, w.perm, None, w.group_size))


w4a16_gemm.grid("default")(
    lambda device, dtype: _bench_cases(device, dtype, [(M, K, N) for K, N in BENCH_SHAPES for M in BENCH_M])
)
w4a16_gemm.grid("quick")(lambda device, dtype: _bench_cases(device, dtype, QUICK_GRID))


def _bytes(
    a, qweight, scales, zeros=None, perm=None, bias=None, group_size=128, deterministic=True, group_index=None
) -> int:
    """Packed weights + scales (+ zeros, perm, bias, group index) + activations + output, each read or
    written once."""
    tensors = (qweight, scales, zeros, perm, bias, group_index, a)
    moved = sum(t.numel() * t.element_size() for t in tensors if t is not None)
    return moved + a.shape[0] * qweight.shape[1] * a.element_size()


def _flops(a, qweight, *args, **kwargs) -> int:
    return 2 * a.shape[0] * qweight.shape[1] * qweight.shape[0] * 8


w4a16_gemm.cost(bytes=_bytes, flops=_flops)
