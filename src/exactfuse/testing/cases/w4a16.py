"""Inputs of w4a16_gemm and w4a16_gemm_packed (shared by tests, ``verify`` and ``bench``), their benchmark
grids and roofline cost. The registry imports this module on first use (``registry.load_declarations``)."""

from __future__ import annotations

import torch

from exactfuse.ops.w4a16 import fragment, w4a16_gemm, w4a16_gemm_packed
from exactfuse.ops.w4a16.packing import PreparedW4A16, pack_rows, random_weights
from exactfuse.registry import Case
from exactfuse.testing.inputs import make_generator


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


# ------------------------------------------------------------- bench grids
# (K, N): 7-8B-class attention and MLP layers, a 70B-class MLP pair, a 13B-class MLP and a fused QKV
BENCH_SHAPES = (
    (4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672),
    (8192, 28672), (28672, 8192), (5120, 13824), (4096, 6144),
)  # fmt: skip
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


# --------------------------------------------------------------- w4a16_gemm_packed
def packed_case(case_id, M, K, N, dtype, device, gen, *, bias=False, **weight_options) -> Case:
    """A w4a16_gemm case with its weight repacked in the fragment layout."""
    a, qweight, scales, zeros, perm, b, _ = make_case(
        case_id, M, K, N, dtype, device, gen, bias=bias, **weight_options
    ).args
    return Case(case_id, (a, *fragment.pack(qweight, scales, zeros, perm), b))


@w4a16_gemm_packed.inputs
def _packed_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    """K=256, N=64 over M (odd, empty, past one MMA block of 16), groups of 64 to all of K, symmetry,
    act-order, bias."""
    gen = make_generator(seed)
    K, N = 256, 64
    for M in QUICK_M if quick else (*QUICK_M, 8, 16, 40):
        for sym in (True, False):
            for act in (False, True):
                s, o = "sym" if sym else "asym", "-actorder" if act else ""
                opts = dict(group_size=128, symmetric=sym, act_order=act, bias=M == 17)
                yield packed_case(f"M{M}-K{K}-N{N}-g128-{s}{o}", M, K, N, dtype, device, gen, **opts)
    for g in (64, 256, -1):
        for M in (1, 17):
            opts = dict(group_size=g, symmetric=False)
            yield packed_case(f"M{M}-K{K}-N{N}-{_group_id(g)}-asym", M, K, N, dtype, device, gen, **opts)
    if device.type == "cuda":
        for M in (1, 9, 16):
            yield packed_case(f"M{M}-K4096-N1024-g128", M, 4096, 1024, dtype, device, gen, bias=True)


PACKED_BENCH_M = (1, 2, 4, 8, 16, 32, 64)


def _packed_bench_cases(device, dtype, points):
    for case in _bench_cases(device, dtype, points):
        a, qweight, scales, zeros, perm, b, _ = case.args
        yield Case(case.id, (a, *fragment.pack(qweight, scales, zeros, perm), b))


w4a16_gemm_packed.grid("default")(
    lambda device, dtype: _packed_bench_cases(
        device, dtype, [(M, K, N) for K, N in BENCH_SHAPES for M in PACKED_BENCH_M]
    )
)
w4a16_gemm_packed.grid("quick")(
    lambda device, dtype: _packed_bench_cases(device, dtype, [(1, 4096, 4096), (16, 4096, 14336)])
)


def _packed_bytes(a, words, scales, zeros=None, perm=None, bias=None) -> int:
    """Words + scales (+ zero words, perm, bias) + activations + output, each read or written once."""
    moved = sum(t.numel() * t.element_size() for t in (words, scales, zeros, perm, bias, a) if t is not None)
    return moved + a.shape[0] * words.shape[0] * 16 * a.element_size()


def _packed_flops(a, words, *args, **kwargs) -> int:
    return 2 * a.shape[0] * words.shape[0] * 16 * words.shape[1] * 64


w4a16_gemm_packed.cost(bytes=_packed_bytes, flops=_packed_flops)
