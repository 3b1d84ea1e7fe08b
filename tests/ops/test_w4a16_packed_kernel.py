"""``w4a16_gemm_packed``'s kernels (``ops/w4a16/packed_kernel.py``, ``packed_wgmma_kernel.py``): the launch rule
and stream-K grid, and on a GPU their dequantization bit for bit, the op's contract, the dense path's bits and
CUDA-graph replay (their compile for sm_90a without a GPU: ``test_w4a16_packed_sass.py``)."""

from __future__ import annotations

import re

import pytest
import torch

import exactfuse
from exactfuse.ops.w4a16 import fragment, native, packing
from exactfuse.ops.w4a16.heuristics import packed_config, shares, stream_k
from support.w4a16 import WGMMA_CONFIGS

GPU_DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]


def _weights(K, N, G, dtype, seed=0, symmetric=False):
    gen = torch.Generator().manual_seed(seed)
    groups = 1 if G == -1 else K // G
    q = torch.randint(0, 16, (K, N), generator=gen, dtype=torch.int32)
    scales = (torch.randn(groups, N, generator=gen) * 0.05).to(dtype)
    zeros = None if symmetric else torch.randint(0, 16, (groups, N), generator=gen).to(torch.uint8)
    return packing.pack_rows(q), scales, zeros


@pytest.mark.parametrize("N", [16, 48, 64, 256, 4096, 6144, 13824, 14336, 28672])
@pytest.mark.parametrize("K, G", [(64, -1), (256, 64), (1024, 128), (4096, 128), (5120, 128), (14336, 128)])
def test_launch_rule_takes_only_what_the_launcher_accepts(K, N, G):
    """``packed_config`` declines N not a multiple of 64 (the dense path takes it) and otherwise divides the
    layer as ``launch_packed`` needs: tiles among the four consumer warps, K's chunks and a group's chunks into
    steps (so zero-point rows never span two groups below 16 tiles a CTA), a ring of 3-16 slots, blocks
    covering up to 32 rows."""
    groups = 1 if G == -1 else K // G
    for M in (1, 2, 8, 9, 16, 17, 33, 64, 128):
        cfg = packed_config(M, N, K, groups)
        if N % 64:
            assert cfg is None
            continue
        assert (N // 16) % (4 * cfg["tiles"]) == 0, (M, cfg)
        assert (K // 64) % cfg["unroll"] == 0 and (K // 64 // groups) % cfg["unroll"] == 0, (M, cfg)
        assert 3 <= cfg["stages"] <= 16 and 8 * cfg["blocks"] >= min(M, 32), (M, cfg)


def test_stream_k_shares_cover_every_step_once():
    """The kernel's stream-K bookkeeping, replayed in Python: each step of each unit in one CTA's share; a unit
    cut into pieces only at a share's ends (slot 0 the unit a share begins in, 1 the one it ends in), its
    pieces the CTAs ``first`` .. ``last`` of the kernel's formulas, at most ``stream_k``'s count; and the grid
    rule's choices on the layers an H100 measured (whole units a CTA at 4096 x 14336, four pieces a unit at
    14336 x 4096 and 4096², stream-K over every SM where units outnumber them)."""
    assert [stream_k(u, s, 2, 132)[0] for u, s in ((112, 32), (32, 112), (32, 32), (224, 64))] == [112, 128, 128, 132]
    for units, steps, ctas in [(112, 32, 132), (32, 112, 132), (32, 32, 132), (7, 3, 132), (1, 1, 132), (300, 5, 264)]:
        for p in {stream_k(units, steps, 2, ctas)[0], min(ctas, units * steps), units}:
            total = units * steps
            pieces = max(b - a + 1 for a, b in (
                (((u * steps + 1) * p - 1) // total, ((u + 1) * steps * p - 1) // total) for u in range(units)
            ))  # fmt: skip
            if p == stream_k(units, steps, 2, ctas)[0]:
                assert pieces == stream_k(units, steps, 2, ctas)[1]
            seen, slots = [[] for _ in range(units)], set()
            for c in range(p):
                begin, end = c * total // p, (c + 1) * total // p
                assert end > begin
                parts = 0
                for u in range(begin // steps, (end + steps - 1) // steps):
                    s0, s1 = max(begin, u * steps) - u * steps, min(end, (u + 1) * steps) - u * steps
                    seen[u].append((s0, s1, c))
                    if (s0, s1) != (0, steps):
                        parts += 1
                        slot = (c, int(u != begin // steps))
                        assert slot not in slots and u in (begin // steps, (end - 1) // steps)
                        slots.add(slot)
                assert shares(units, steps, p)[c] == (end - begin, parts)
            for u, got in enumerate(seen):
                assert [s for s0, s1, _ in got for s in range(s0, s1)] == list(range(steps)), (units, steps, u)
                first, last = ((u * steps + 1) * p - 1) // total, ((u + 1) * steps * p - 1) // total
                assert [c for *_, c in got] == list(range(first, last + 1)) and last - first + 1 <= pieces


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_kernel_dequantizes_bit_for_bit_and_meets_the_contract(dtype):
    """One-hot activations pick weight rows (exact products and sums): the kernel's dequantization is the
    spec's bit for bit at every tiling, ring, stream-K cut (8 pieces a unit at 1024 x 256), CTAs an SM, launch
    kind and consumer partitioning (``per_warp``), with zero points and without; then the op's cases against
    its contract, repeated bit for bit."""
    from exactfuse.ops.w4a16.packed import launch_packed

    dev = torch.device("cuda")
    configs = (
        dict(tiles=2, blocks=1, unroll=2, stages=6),
        dict(tiles=1, blocks=2, unroll=1, stages=8),
        dict(tiles=2, blocks=4, unroll=2, stages=3),
        dict(tiles=1, blocks=1, unroll=2, stages=4, per_sm=2),
        dict(tiles=1, blocks=1, unroll=2, stages=4, warps=8),
        dict(tiles=2, blocks=1, unroll=2, stages=6, pdl=True),
        dict(tiles=4, blocks=2, unroll=4, stages=4),  # 16 tiles a CTA: a step spans two groups
        dict(tiles=2, blocks=1, unroll=2, stages=6, per_warp=True),
        dict(tiles=1, blocks=2, unroll=2, stages=4, per_warp=True),
        dict(tiles=4, blocks=2, unroll=4, stages=4, per_warp=True),  # each warp's records of two groups a step
        dict(tiles=2, blocks=1, unroll=4, stages=4),  # 8 tiles a CTA: zero-point rows padded to 32 words
        dict(tiles=1, blocks=2, unroll=4, stages=4, per_warp=True),
    )
    for symmetric in (False, True):
        qweight, scales, zeros = (
            None if t is None else t.to(dev) for t in _weights(1024, 256, 128, dtype, 3, symmetric)
        )
        packed = fragment.pack(qweight, scales, zeros)
        assert (packed.zeros is None) == symmetric
        w = native.dequantize(qweight, scales, zeros, 128, dtype)
        for cfg in configs:
            rows = torch.randint(0, 1024, (16 * cfg["blocks"] + 3,), device=dev)
            onehot = torch.zeros(len(rows), 1024, device=dev, dtype=dtype)
            onehot[torch.arange(len(rows)), rows] = 1
            assert torch.equal(launch_packed(onehot, *packed, None, **cfg), w[rows]), (symmetric, cfg)
    o = exactfuse.get("w4a16_gemm_packed")
    for case in o.iter_cases(dev, dtype, quick=False):
        with o.priority(["gluon"]):
            got = o(*case.args, **case.kwargs)
        want = o.native(*case.args, **case.kwargs)
        res = o.contract.check(got, want, args=case.args, kwargs=case.kwargs)
        assert res.passed, f"{case.case_id}: {res.summary()}"
        again = o(*case.args, **case.kwargs)
        assert torch.equal(got, again), f"{case.case_id}: not deterministic"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_dense_path_is_native_bit_for_bit(dtype):
    """Above ``PACKED_KERNEL_MAX_M`` rows, and at any M for a layer the kernel's tiling does not divide (N = 48),
    the provider dequantizes the layout and multiplies with cuBLAS, as the spec does."""
    from exactfuse.ops.w4a16.heuristics import PACKED_KERNEL_MAX_M
    from exactfuse.ops.w4a16.packed import w4a16_gemm_packed_gluon

    dev = torch.device("cuda")
    for N, ms in ((768, (PACKED_KERNEL_MAX_M + 1, 1000)), (48, (1, 7, 200))):
        qweight, scales, zeros = (t.to(dev) for t in _weights(2048, N, 128, dtype, seed=5))
        perm = torch.randperm(2048, device=dev).to(torch.int32)
        packed = fragment.pack(qweight, scales, zeros, perm)
        bias = torch.randn(N, device=dev).to(dtype)
        for M in ms:
            a = torch.randn(M, 2048, device=dev, dtype=dtype)
            got = w4a16_gemm_packed_gluon(a, *packed, bias)
            assert torch.equal(got, native.w4a16_gemm_packed(a, *packed, bias)), (N, M)


@pytest.mark.gpu
def test_gpu_packed_op_in_a_cuda_graph_replays_as_eager():
    """The op (its kernel's persistent grid, workspace and arrival counters) captured in a CUDA graph, and a
    programmatic dependent launch of the kernel captured after it, replay as eager."""
    from exactfuse.ops.w4a16.packed import launch_packed

    dev = torch.device("cuda")
    qweight, scales, zeros = (t.to(dev) for t in _weights(2048, 512, 128, torch.bfloat16))
    packed = fragment.pack(qweight, scales, zeros)
    a = torch.randn(4, 2048, device=dev, dtype=torch.bfloat16)
    cfg = packed_config(4, 512, 2048, 16) | {"pdl": True}
    eager = exactfuse.w4a16_gemm_packed(a, *packed)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = exactfuse.w4a16_gemm_packed(a, *packed)
        out_pdl = launch_packed(a, *packed, None, **cfg)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager) and torch.equal(out_pdl, eager)


def test_wgmma_k_order_is_the_order_of_the_operand_the_kernel_builds():
    """The wgmma kernel relabels a lane's dequantized registers as its A operand: register ``t = b + 2 h`` of
    word ``j`` (nibbles ``t`` and ``t + 4``: half ``e``) of lane ``4 r + qq`` is row ``8 b + r`` of the tile at MMA
    k-position ``16 j + 8 h + 2 qq + e`` (``packed_wgmma_kernel._operand``'s permute: wgmma's A registers
    are pairs of adjacent k-positions, as ``mma.sync``'s). Built so from the
    words, that operand times the activations in ``wgmma_columns``' order is the weight times ``a``: column
    ``64 c + kappa`` of the operand is row ``order[64 c + kappa]`` of the codes. Also a permutation, and with
    act-order the gather ``perm[order]``."""
    pytest.importorskip("triton.experimental.gluon")
    from exactfuse.ops.w4a16.packed import _mma_k_order, wgmma_columns

    K, N = 256, 32
    q = torch.randint(0, 16, (K, N), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    words = fragment.pack_codes(q)
    nibbles = (words.unsqueeze(-1) >> torch.arange(0, 32, 4, dtype=torch.int32)) & 0xF
    axes = nibbles.reshape(N // 16, K // 64, 8, 4, 4, 2, 2, 2)  # [tile, chunk, r, qq, j, e, h, b]
    operand = axes.permute(0, 7, 2, 1, 4, 6, 3, 5).reshape(N, K)  # [tile, b, r] x [chunk, j, h, qq, e]
    order = _mma_k_order(K, torch.device("cpu"))
    assert torch.equal(order.sort().values, torch.arange(K))
    assert torch.equal(operand, q[order].T)
    a = torch.randn(3, K)
    perm = torch.randperm(K).to(torch.int32)
    assert torch.equal(wgmma_columns(a, perm), a[:, perm.long()][:, order])
    assert torch.equal(wgmma_columns(a, None), a[:, order])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_wgmma_kernel_dequantizes_bit_for_bit_and_meets_the_contract(dtype):
    """The wgmma kernel (17-128 rows): one-hot activations pick weight rows bit for bit at every test
    configuration (rows 32-128, one and two warpgroups, pipelined or not, stream-K cuts), with zero points and
    without, with act-order; random activations with a bias against the spec under the op's contract, repeated
    bit for bit."""
    from exactfuse.ops.w4a16.packed import launch_packed_wgmma

    dev = torch.device("cuda")
    o = exactfuse.get("w4a16_gemm_packed")
    for symmetric in (False, True):
        qweight, scales, zeros = (
            None if t is None else t.to(dev) for t in _weights(1024, 512, 128, dtype, 4, symmetric)
        )
        perm = torch.randperm(1024, device=dev).to(torch.int32)
        packed = fragment.pack(qweight, scales, zeros, perm)
        w = native.dequantize(qweight, scales, zeros, 128, dtype)
        for config in WGMMA_CONFIGS:
            cfg = _wgmma_cfg(*config)
            rows = cfg["rows"]
            for M in {rows // 2 + 1, rows}:
                picks = torch.randint(0, 1024, (M,), device=dev)
                onehot = torch.zeros(M, 1024, device=dev, dtype=dtype)
                onehot[torch.arange(M), picks] = 1
                # a[:, perm] picks row j of the weight where perm[j] is the one-hot column
                inverse = torch.argsort(perm.long())
                # a zero bias (added in fp32, rounded again: exact) keeps to the one compiled specialization
                got = launch_packed_wgmma(onehot, *packed, torch.zeros(512, device=dev, dtype=dtype), **cfg)
                assert torch.equal(got, w[inverse[picks]]), (symmetric, cfg, M)
            a = torch.randn(rows, 1024, device=dev, dtype=dtype)
            bias = torch.randn(512, device=dev).to(dtype)
            got = launch_packed_wgmma(a, *packed, bias, **cfg)
            want = native.w4a16_gemm_packed(a, *packed, bias)
            res = o.contract.check(got, want, args=(a, *packed, bias), kwargs={})
            assert res.passed, f"{symmetric} {cfg}: {res.summary()}"
            assert torch.equal(got, launch_packed_wgmma(a, *packed, bias, **cfg)), f"{cfg}: not deterministic"


def _wgmma_cfg(config: str, warps: int, pipelined: bool, groups: int) -> dict:
    """``launch_packed_wgmma``'s tiling arguments from a ``WGMMA_CONFIGS`` entry."""
    rows, tiles, unroll, stages = (int(v) for v in re.fullmatch(r"(\d+)x(\d+)u(\d+)s(\d+)", config).groups())
    return dict(rows=rows, tiles=tiles, unroll=unroll, stages=stages, warps=warps, pipelined=pipelined, groups=groups)


@pytest.mark.gpu
def test_gpu_two_warpgroup_consumer_is_the_one_warpgroup_tile_bit_for_bit_on_a_routed_layer():
    """The tile the op routes above 64 rows (two 4-warp consumer partitions, heuristics.PACKED_WGMMA_TILES) on a
    full 4096 x 14336 layer with act-order and zero points: the same bits as one 8-warp partition over the same
    columns and stream-K cut, at 128 and 65 rows; its one-hot rows the dequantized weight's."""
    from exactfuse.ops.w4a16.heuristics import packed_wgmma_config
    from exactfuse.ops.w4a16.packed import launch_packed_wgmma

    dev = torch.device("cuda")
    K, N = 4096, 14336
    qweight, scales, zeros = (t.to(dev) for t in _weights(K, N, 128, torch.bfloat16, 6))
    perm = torch.randperm(K, device=dev).to(torch.int32)
    packed = fragment.pack(qweight, scales, zeros, perm)
    for M in (128, 65):
        routed = packed_wgmma_config(M, N, K, K // 128)
        assert routed["groups"] == 2 and routed["warps"] == 4, routed
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        got = launch_packed_wgmma(a, *packed, None, **routed)
        assert torch.equal(got, launch_packed_wgmma(a, *packed, None, **(routed | dict(warps=8, groups=1)))), M
    w = native.dequantize(qweight, scales, zeros, 128, torch.bfloat16)
    picks = torch.randint(0, K, (128,), device=dev)
    onehot = torch.zeros(128, K, device=dev, dtype=torch.bfloat16)
    onehot[torch.arange(128), picks] = 1
    got = launch_packed_wgmma(onehot, *packed, None, **packed_wgmma_config(128, N, K, K // 128))
    assert torch.equal(got, w[torch.argsort(perm.long())[picks]])


@pytest.mark.gpu
def test_gpu_pipelined_wgmma_consumer_runs_only_where_ptxas_keeps_its_operands():
    """Where Triton's sm_90 ptxas is older than 13.3, ``pipelined=True`` is refused; under a later one the
    pipelined consumer's one-hot rows are the dequantized weight's at the layer and tile where ptxas 12.8 gave
    other values (4096 x 14336, 64 rows: benchmarks/results/h100/sweeps/w4a16_packed_wgmma.txt)."""
    from exactfuse.ops.w4a16.packed import launch_packed_wgmma, pipelining_unsafe

    dev = torch.device("cuda")
    K, N, M = 4096, 14336, 64
    qweight, scales, zeros = (t.to(dev) for t in _weights(K, N, 128, torch.bfloat16, 5))
    packed = fragment.pack(qweight, scales, zeros)
    cfg = dict(rows=64, tiles=2, unroll=2, stages=6, warps=4, pipelined=True)
    picks = torch.randint(0, K, (M,), device=dev)
    onehot = torch.zeros(M, K, device=dev, dtype=torch.bfloat16)
    onehot[torch.arange(M), picks] = 1
    if reason := pipelining_unsafe():
        with pytest.raises(ValueError, match="pipelined=True"):
            launch_packed_wgmma(onehot, *packed, None, **cfg)
        assert "13.3" in reason
        return
    w = native.dequantize(qweight, scales, zeros, 128, torch.bfloat16)
    for _ in range(20):
        assert torch.equal(launch_packed_wgmma(onehot, *packed, None, **cfg), w[picks])


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_permuted_columns_gathers_in_one_kernel_as_torch_indexes(dtype, monkeypatch):
    """``dequant.permuted_columns``: the act-order gather, and with ``order`` the wgmma kernel's k order after
    it, by its Triton kernel (under the interpreter here) equal to torch's indexing; a ``perm`` entry outside
    [0, K) reads 0; a strided ``a`` and M = 0 taken."""
    from exactfuse.ops.w4a16.dequant import permuted_columns
    from exactfuse.ops.w4a16.packed import _mma_k_order

    gen = torch.Generator().manual_seed(2)
    K = 192
    a = torch.randn(5, 2 * K, generator=gen).to(dtype)[:, ::2]  # column stride 2
    perm = torch.randperm(K, generator=gen).to(torch.int32)
    perm[[3, 70]] = torch.tensor([-1, K], dtype=torch.int32)
    order = _mma_k_order(K, torch.device("cpu"))
    index = perm.long()
    want = torch.where((index >= 0) & (index < K), a[:, index.clamp(0, K - 1)], 0)
    assert torch.equal(permuted_columns(a, perm), want)
    assert torch.equal(permuted_columns(a, perm, order), want[:, order])
    assert torch.equal(permuted_columns(a, None, order), a[:, order])
    assert permuted_columns(a[:0], perm, order).shape == (0, K)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # torch's path: the same values
    assert torch.equal(permuted_columns(a, perm, order), want[:, order])
