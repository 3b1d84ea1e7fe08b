"""The fragment layout (``ops/w4a16/fragment.py``): pack/unpack identity, the dequantization, and a
lane-by-lane model of ``mma.sync.m16n8k16`` over the words that gives ``a @ W``."""

from __future__ import annotations

import itertools

import pytest
import torch

import exactfuse
from exactfuse.ops.w4a16 import fragment, native, packing

SHAPES = [(256, 64, 128), (128, 32, -1), (512, 48, 64), (64, 16, -1)]


def _weights(K, N, G, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    groups = 1 if G == -1 else K // G
    q = torch.randint(0, 16, (K, N), generator=gen, dtype=torch.int32)
    scales = (torch.randn(groups, N, generator=gen) * 0.05).to(dtype)
    zeros = torch.randint(0, 16, (groups, N), generator=gen).to(torch.uint8)
    return packing.pack_rows(q), scales, zeros


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("K, N, G", SHAPES)
def test_pack_unpack_is_the_identity_and_dequantizes_as_the_spec(K, N, G, dtype):
    qweight, scales, zeros = _weights(K, N, G, dtype)
    packed = fragment.pack(qweight, scales, zeros)
    assert packed.words.shape == (N // 16, K // 64, 32, 4) and packed.words.dtype == torch.int32
    assert packed.scales.shape == (scales.shape[0], N // 16, 8, 8) and packed.scales.dtype == dtype
    q, s, z = fragment.unpack(packed.words, packed.scales)
    assert torch.equal(q, qweight) and torch.equal(s, scales) and torch.equal(z, zeros)
    want = native.dequantize(qweight, scales, zeros, G, dtype)
    assert torch.equal(fragment.dequantize(packed.words, packed.scales), want)
    sym = fragment.pack(qweight, scales, None)  # symmetric: zero point 8
    assert torch.equal(fragment.dequantize(sym.words, sym.scales), native.dequantize(qweight, scales, None, G, dtype))


@pytest.mark.interpreter
@pytest.mark.parametrize("K, N, G", [*SHAPES, (1024, 32, 256)])
def test_dense_from_fragment_is_the_spec_dequantization(K, N, G):
    """The one-kernel dequantization of the layout (the packed op's dense path above M = 128): the spec's
    bits for every (tile, chunk), a partial last block of chunks and groups of several chunks included.
    fp16: the interpreter's fp32 -> bf16 conversion does not round to nearest (bf16 on the GPU, below)."""
    from exactfuse.ops.w4a16 import dequant

    dtype = torch.float16
    qweight, scales, zeros = _weights(K, N, G, dtype, seed=3)
    for z in (zeros, None):
        packed = fragment.pack(qweight, scales, z)
        got = dequant.dense_from_fragment(packed.words, packed.scales)
        assert torch.equal(got, native.dequantize(qweight, scales, z, G, dtype))


@pytest.mark.interpreter
def test_packed_dense_gemm_is_the_packed_spec():
    from exactfuse.ops.w4a16 import dequant

    qweight, scales, zeros = _weights(256, 64, 128, torch.float16)
    perm = torch.randperm(256).to(torch.int32)
    packed = fragment.pack(qweight, scales, zeros, perm)
    a = torch.randn(7, 256, dtype=torch.float16)
    bias = torch.randn(64, dtype=torch.float16)
    for p, b in ((None, None), (packed.perm, bias)):
        want = native.w4a16_gemm_packed(a, packed.words, packed.scales, p, b)
        assert torch.equal(dequant.packed_dense_gemm(a, packed.words, packed.scales, p, b), want)


def _mma_model(words: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``out [M, N]`` (float64) as the kernel forms it: per tile, chunk and k-step, the 32 lanes' words
    placed where ``mma.sync.m16n8k16`` reads its A operand, the activations where it reads B (lane
    ``l`` loads ``a[l // 4, 64 chunk + 16 (l % 4) + ...]``), ``D += A @ B``."""
    tiles, chunks = words.shape[:2]
    M = a.shape[0]
    out = torch.zeros(M, tiles * 16, dtype=torch.float64)
    codes = [(words >> (4 * i)) & 0xF for i in range(8)]  # nibble i of every word
    for tile in range(tiles):
        for m0 in range(0, M, 8):
            d = torch.zeros(16, 8, dtype=torch.float64)
            for chunk in range(chunks):
                for j in range(4):
                    A = torch.full((16, 16), float("nan"), dtype=torch.float64)
                    B = torch.full((16, 8), float("nan"), dtype=torch.float64)
                    for lane in range(32):
                        r, c = lane // 4, 2 * (lane % 4)
                        regs = [(r, c), (r + 8, c), (r, c + 8), (r + 8, c + 8)]  # register t: (row, k-pos)
                        for t, (row, kpos) in enumerate(regs):
                            A[row, kpos] = codes[t][tile, chunk, lane, j]  # low half
                            A[row, kpos + 1] = codes[t + 4][tile, chunk, lane, j]  # high half
                        k = 64 * chunk + 16 * (lane % 4) + 4 * j  # activation pairs 2 j and 2 j + 1
                        m = m0 + r
                        for e in range(2):
                            B[c + e, r] = a[m, k + e] if m < M else 0.0
                            B[c + 8 + e, r] = a[m, k + 2 + e] if m < M else 0.0
                    assert not A.isnan().any() and not B.isnan().any()  # every position filled once
                    d += A @ B
            rows = min(8, M - m0)
            out[m0 : m0 + rows, tile * 16 : tile * 16 + 16] = d[:, :rows].t()
    return out


def test_words_are_the_mma_operands_of_the_gemm():
    K, N, M = 128, 32, 3
    qweight, scales, zeros = _weights(K, N, -1, torch.float32 if False else torch.bfloat16)
    packed = fragment.pack(qweight, scales, zeros)
    a = torch.randint(-3, 4, (M, K)).double()
    codes = packing.unpack_rows(qweight).double()
    assert torch.equal(_mma_model(packed.words, a), a @ codes)


@pytest.mark.parametrize(
    "K, N, groups, match",
    [(100, 16, 1, "K % 64"), (128, 24, 1, "N % 16"), (256, 16, 8, "multiple of 64 rows"), (128, 16, 3, "multiple")],
)
def test_pack_refuses_what_has_no_layout(K, N, groups, match):
    qweight = torch.zeros(K // 8, N, dtype=torch.int32)
    scales = torch.ones(groups, N, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=match):
        fragment.pack(qweight, scales, None)


def test_op_checks_name_the_argument():
    qweight, scales, zeros = _weights(256, 64, 128, torch.bfloat16)
    packed = fragment.pack(qweight, scales, zeros)
    a = torch.randn(3, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"a must be \[M, K\] = \[M, 256\]"):
        exactfuse.w4a16_gemm_packed(a[:, :128], packed.words, packed.scales)
    with pytest.raises(TypeError, match="scales must have a's dtype"):
        exactfuse.w4a16_gemm_packed(a.half(), packed.words, packed.scales)
    with pytest.raises(TypeError, match=r"words must be int32 \[N/16, K/64, 32, 4\]"):
        exactfuse.w4a16_gemm_packed(a, qweight, packed.scales)
    with pytest.raises(ValueError, match="bias must be"):
        exactfuse.w4a16_gemm_packed(a, packed.words, packed.scales, bias=torch.zeros(3, dtype=torch.bfloat16))


def test_packed_spec_is_the_gptq_spec():
    for G in (128, -1):
        qweight, scales, zeros = _weights(256, 64, G, torch.bfloat16)
        perm = torch.randperm(256).to(torch.int32)
        packed = fragment.pack(qweight, scales, zeros, perm)
        a = torch.randn(5, 256, dtype=torch.bfloat16)
        bias = torch.randn(64, dtype=torch.bfloat16)
        want = native.w4a16_gemm(a, qweight, scales, zeros, perm, bias, G)
        assert torch.equal(exactfuse.w4a16_gemm_packed(a, *packed, bias=bias), want)


GPU_DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_kernel_dequantizes_bit_for_bit_and_meets_the_contract(dtype):
    """One-hot activations pick weight rows (exact products and sums): the kernel's dequantization is the
    spec's bit for bit, every configuration the launcher takes; then the op's cases against its contract."""
    from exactfuse.ops.w4a16 import mma

    dev = torch.device("cuda")
    qweight, scales, zeros = (t.to(dev) for t in _weights(1024, 256, 128, dtype))
    packed = fragment.pack(qweight, scales, zeros)
    w = native.dequantize(qweight, scales, zeros, 128, dtype)
    configs = (
        (4, 4, 1, 1, 1),
        (4, 2, 2, 4, 1),
        (2, 1, 1, 16, 1),
        (4, 1, 8, 2, 1),
        (1, 2, 4, 1, 1),
        (4, 2, 1, 4, 2),
        (4, 2, 2, 1, 2),
        (4, 1, 1, 2, 4),
        (4, 4, 2, 4, 4),
    )  # (warps, tiles, blocks, split, unroll); 16 chunks, 2 a group: a step of 4 chunks spans two groups
    for warps, tiles, blocks, split, unroll in configs:
        rows = torch.randint(0, 1024, (16 * blocks + 3,), device=dev)
        onehot = torch.zeros(len(rows), 1024, device=dev, dtype=dtype)
        onehot[torch.arange(len(rows)), rows] = 1
        out = mma.launch_fragment(onehot, packed.words, packed.scales, None, None, warps=warps, tiles=tiles,
                                  blocks=blocks, split=split, unroll=unroll)  # fmt: skip
        assert torch.equal(out, w[rows]), (warps, tiles, blocks, split, unroll)
    o = exactfuse.get("w4a16_gemm_packed")
    for case in o.iter_cases(dev, dtype, quick=False):
        with o.priority(["triton"]):
            got = o(*case.args, **case.kwargs)
        want = o.native(*case.args, **case.kwargs)
        res = o.contract.check(got, want, args=case.args, kwargs=case.kwargs)
        assert res.passed, f"{case.case_id}: {res.summary()}"
        again = o(*case.args, **case.kwargs)
        assert torch.equal(got, again), f"{case.case_id}: not deterministic"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_packed_op_above_m_128_is_native_bit_for_bit(dtype):
    """Above M = 128 the provider dequantizes the layout and multiplies with cuBLAS, as the spec does."""
    from exactfuse.ops.w4a16 import mma
    from exactfuse.ops.w4a16.heuristics import DENSE_ABOVE_M

    dev = torch.device("cuda")
    qweight, scales, zeros = (t.to(dev) for t in _weights(2048, 768, 128, dtype, seed=5))
    perm = torch.randperm(2048, device=dev).to(torch.int32)
    packed = fragment.pack(qweight, scales, zeros, perm)
    bias = torch.randn(768, device=dev).to(dtype)
    for M in (DENSE_ABOVE_M + 1, 1000):
        a = torch.randn(M, 2048, device=dev, dtype=dtype)
        got = mma.w4a16_gemm_packed_triton(a, *packed, bias)
        assert torch.equal(got, native.w4a16_gemm_packed(a, *packed, bias)), M


@pytest.mark.gpu
def test_gpu_packed_op_in_a_cuda_graph_replays_as_eager():
    dev = torch.device("cuda")
    qweight, scales, zeros = (t.to(dev) for t in _weights(2048, 512, 128, torch.bfloat16))
    packed = fragment.pack(qweight, scales, zeros)
    a = torch.randn(4, 2048, device=dev, dtype=torch.bfloat16)
    eager = exactfuse.w4a16_gemm_packed(a, packed.words, packed.scales)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = exactfuse.w4a16_gemm_packed(a, packed.words, packed.scales)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_bench_grid_builds_packed_cases():
    o = exactfuse.get("w4a16_gemm_packed")
    o.load_declarations()
    case = next(iter(o.grids["quick"](torch.device("cpu"), torch.float16)))
    a, words, scales, perm, bias = case.args
    assert case.id == "M1-K4096-N4096" and words.shape == (256, 64, 32, 4) and scales.dtype == torch.float16
    assert perm is None and bias is None and a.shape == (1, 4096)


@pytest.mark.parametrize("symmetric", [True, False])
def test_peers_take_the_same_weight_in_the_gptq_layout(symmetric):
    """The packed op's peers (``w4a16_gemm``, tinygemm, cuBLAS dense) get the weight it was packed from,
    zeros None where the weight is symmetric (tinygemm takes only that)."""
    from exactfuse.bench.peers.w4a16 import _packed_gptq_args
    from exactfuse.testing.cases.w4a16 import make_case

    a, qweight, scales, zeros, perm, bias, g = make_case(
        "peer", 3, 256, 64, torch.float16, "cpu", torch.Generator().manual_seed(0), group_size=64,
        symmetric=symmetric, act_order=True, bias=True,
    ).args  # fmt: skip
    packed = fragment.pack(qweight, scales, zeros, perm)
    got = _packed_gptq_args((a, packed.words, packed.scales, packed.perm, bias), {})
    assert got[0] is a and got[4] is packed.perm and got[5] is bias and got[6] == g == 64
    assert torch.equal(got[1], qweight) and torch.equal(got[2], scales)
    assert got[3] is None if symmetric else torch.equal(got[3], zeros)


@pytest.mark.parametrize("N", [16, 64, 256, 4096, 6144, 13824, 14336, 28672])
@pytest.mark.parametrize("K", [64, 256, 1024, 4096, 5120, 8192, 14336, 28672])
def test_launch_rule_takes_only_what_the_launcher_accepts(K, N):
    """Every configuration ``fragment_config`` returns divides the layer as the kernel needs: tiles among
    the warps, K's chunks among the splits and each split's chunks into steps."""
    from exactfuse.ops.w4a16.heuristics import fragment_config

    tile_cols, chunks = N // 16, K // 64
    for M in (1, 2, 8, 9, 16, 33, 64, 300):
        cfg = fragment_config(M, N, K, 132)
        assert tile_cols % (cfg["warps"] * cfg["tiles"]) == 0, (M, cfg)
        assert chunks % cfg["split"] == 0 and (chunks // cfg["split"]) % cfg["unroll"] == 0, (M, cfg)
        assert cfg["unroll"] in (1, 2, 4) and 8 * cfg["blocks"] >= min(M, 64), (M, cfg)


def compile_rule_configs() -> list[str]:
    """The fragment kernel (Gluon) compiled for sm_90 at every configuration ``fragment_config`` takes on the
    bench layers at M 1-128, bf16 (and M = 1 in fp16), as its launcher specializes it; the failures."""
    from exactfuse.ops.w4a16.heuristics import fragment_config
    from exactfuse.ops.w4a16.mma import w4a16_fragment_kernel
    from exactfuse.testing.offline import compile_error, compile_offline

    layers = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672)]
    picked = set()
    for (K, N), M in itertools.product(layers, (1, 8, 16, 32, 64, 128)):
        cfg = fragment_config(M, N, K, 132)
        picked.add(("bf16", cfg["blocks"], cfg["tiles"], cfg["unroll"], cfg["split"] > 1, cfg["warps"]))
        if M == 1:
            picked.add(("fp16", cfg["blocks"], cfg["tiles"], cfg["unroll"], cfg["split"] > 1, cfg["warps"]))
    failures = []
    for dtype, blocks, tiles, unroll, split, warps in sorted(picked):
        types = {"p_a32": "*i32", "p_w": "*i32", "p_s32": "*i32", "p_bias": f"*{dtype}", "p_out": f"*{dtype}",
                 "p_ws": "*fp32", "p_count": "*i32"}  # fmt: skip
        consts = dict(GROUP_CHUNKS=2, HAS_BIAS=True, SPLIT=split, BLOCKS=blocks, TILES=tiles, UNROLL=unroll,
                      num_warps=warps)  # fmt: skip
        try:
            compile_offline(w4a16_fragment_kernel, types, consts, [*types, "stride_a32", "N", "K"], (), warps)
        except Exception as exc:  # every configuration's error, not the first
            failures.append(compile_error(f"{dtype} {blocks}x{tiles}u{unroll} split={split}", exc))
    return failures


def test_fragment_kernel_compiles_for_sm90_at_every_configuration_the_rule_takes():
    """Without a GPU: a change that breaks the Gluon kernel's compile fails here, not first on the device."""
    from exactfuse.testing.offline import run_in_child

    ok, said = run_in_child(__file__, "compile_rule_configs")
    assert ok, said


def compile_ws_prototype() -> list[str]:
    """The warp-specialized prototype that reuses the fragment kernel's helpers (``scripts/gpu/w4a16_ws.py``,
    timed by ``probe_w4a16_ws.py``) compiled for sm_90a at one and two CTAs an SM, at 8 consumer warps, with
    the programmatic-dependent-launch waits and without zero points; the failures (a change to ``mma.py`` that
    breaks it shows here)."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(root / "scripts"), str(root / "scripts" / "gpu")]
    import offline_ws_sass

    lines = [
        offline_ws_sass.compile_ws(c, "bf16", w, p, pdl, zeros)
        for c, w, p, pdl, zeros in (("1x2u2s6", 4, 1, False, True), ("2x1u2s4", 4, 2, False, True),
                                    ("1x1u2s4", 8, 1, False, True), ("1x2u2s6", 4, 1, True, False))
    ]  # fmt: skip
    return [line for line in lines if " regs " not in line or " 0.00 a word" in line]


def test_ws_prototype_compiles_for_sm90():
    """Without a GPU: the prototype of ``probe_w4a16_ws`` keeps compiling as the fragment kernel changes."""
    from exactfuse.testing.offline import run_in_child

    ok, said = run_in_child(__file__, "compile_ws_prototype")
    assert ok, said


def test_ws_prototype_stream_k_shares_cover_every_step_once():
    """The prototype's stream-K bookkeeping, replayed in Python: each step of each unit in one CTA's share;
    a unit cut into pieces only at a share's ends (slot 0 the unit a share begins in, 1 the one it ends in),
    its pieces the CTAs ``first`` .. ``last`` of the kernel's formulas, at most ``stream_k``'s count; and the
    grid rule's choices on the layers the H100 measured (whole units a CTA at 4096 x 14336, four pieces a unit
    at 14336 x 4096 and 4096², stream-K over every SM where units outnumber them)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "gpu"))
    from w4a16_ws_launch import shares, stream_k

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


def test_ws_prototype_compact_scales_keep_every_zero_point():
    """``w4a16_ws.compact_scales``: the scales as they are, each zero point in its nibble (column ``8 j + i``
    in nibble ``i`` of word ``j``, the top nibble's bit the int32's sign), none where every one is 8."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "gpu"))
    from w4a16_ws_launch import compact_scales

    gen = torch.Generator().manual_seed(0)
    scales = torch.randn(3, 64, generator=gen).to(torch.bfloat16)
    zeros = torch.randint(0, 16, (3, 64), generator=gen, dtype=torch.uint8)
    zeros[0, 7] = 15  # a word whose top nibble sets the sign bit
    s, words = compact_scales(scales, zeros)
    assert torch.equal(s, scales) and words.dtype == torch.int32 and words.shape == (3, 8)
    got = (words.to(torch.int64)[..., None] >> (4 * torch.arange(8))) & 0xF
    assert torch.equal(got.reshape(3, 64), zeros.to(torch.int64))
    assert compact_scales(scales, torch.full_like(zeros, 8))[1] is None and compact_scales(scales, None)[1] is None
