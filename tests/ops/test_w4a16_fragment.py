"""The fragment layout (``ops/w4a16/fragment.py``): pack/unpack identity, the dequantization, and a
lane-by-lane model of ``mma.sync.m16n8k16`` over the words that gives ``a @ W``."""

from __future__ import annotations

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
    groups = scales.shape[0]
    assert packed.words.shape == (N // 16, K // 64, 32, 4) and packed.words.dtype == torch.int32
    assert torch.equal(packed.scales, scales) and packed.scales.is_contiguous()
    assert packed.zeros.shape == (groups, N // 8) and packed.zeros.dtype == torch.int32
    q, s, z = fragment.unpack(packed.words, packed.scales, packed.zeros)
    assert torch.equal(q, qweight) and torch.equal(s, scales) and torch.equal(z, zeros)
    want = native.dequantize(qweight, scales, zeros, G, dtype)
    assert torch.equal(fragment.dequantize(packed.words, packed.scales, packed.zeros), want)
    sym = fragment.pack(qweight, scales, None)  # symmetric: zero point 8, no zero words
    assert sym.zeros is None
    assert torch.equal(fragment.dequantize(*sym[:3]), native.dequantize(qweight, scales, None, G, dtype))
    _, _, z8 = fragment.unpack(*sym[:3])
    assert z8.dtype == torch.uint8 and bool((z8 == 8).all()) and z8.shape == (groups, N)


def test_pack_scales_round_trips_every_zero_point():
    """Column ``8 j + i``'s zero point in nibble ``i`` of word ``j``, 0..15 all kept (a word whose top nibble
    sets bit 31 stored negative); every zero point 8, or none, gives no zero words."""
    gen = torch.Generator().manual_seed(0)
    scales = torch.randn(3, 32, generator=gen).to(torch.float16)
    zeros = torch.arange(96, dtype=torch.uint8).reshape(3, 32) % 16  # every value 0..15 in every nibble slot
    zeros[2, 8:16] = torch.tensor([1, 2, 3, 4, 5, 6, 7, 15], dtype=torch.uint8)
    s, words = fragment.pack_scales(scales, zeros)
    assert s is scales and words.dtype == torch.int32 and words.shape == (3, 4)
    assert int(words[2, 1]) == 0xF7654321 - 2**32 and bool((words < 0).any())
    nibbles = (words.to(torch.int64)[..., None] >> (4 * torch.arange(8))) & 0xF
    assert torch.equal(nibbles.reshape(3, 32), zeros.to(torch.int64))
    s2, z2 = fragment.unpack_scales(s, words)
    assert torch.equal(s2, scales) and torch.equal(z2, zeros) and z2.dtype == torch.uint8
    for symmetric in (torch.full_like(zeros, 8), None):
        s, words = fragment.pack_scales(scales.t().contiguous().t(), symmetric)
        assert words is None and s.is_contiguous() and torch.equal(s, scales)
        assert torch.equal(fragment.unpack_scales(s, None)[1], torch.full_like(zeros, 8))
    with pytest.raises(ValueError, match="zero points must be 0..15"):
        fragment.pack_scales(scales, torch.full_like(zeros, 16))  # GPTQ v1's 16 has no nibble


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
        got = dequant.dense_from_fragment(packed.words, packed.scales, packed.zeros)
        assert torch.equal(got, native.dequantize(qweight, scales, z, G, dtype))


@pytest.mark.interpreter
def test_packed_dense_gemm_is_the_packed_spec():
    from exactfuse.ops.w4a16 import dequant

    qweight, scales, zeros = _weights(256, 64, 128, torch.float16)
    perm = torch.randperm(256).to(torch.int32)
    packed = fragment.pack(qweight, scales, zeros, perm)
    a = torch.randn(7, 256, dtype=torch.float16)
    bias = torch.randn(64, dtype=torch.float16)
    for z, p, b in ((None, None, None), (packed.zeros, packed.perm, bias)):
        want = native.w4a16_gemm_packed(a, packed.words, packed.scales, z, p, b)
        assert torch.equal(dequant.packed_dense_gemm(a, packed.words, packed.scales, z, p, b), want)


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
    with pytest.raises(ValueError, match=r"scales must be \[groups, N\] = \[groups, 64\]"):
        exactfuse.w4a16_gemm_packed(a, packed.words, packed.scales.t())
    with pytest.raises(ValueError, match=r"zeros must be None or int32 \[groups, N/8\] = \[2, 8\]"):
        exactfuse.w4a16_gemm_packed(a, packed.words, packed.scales, zeros.to(torch.int32))
    with pytest.raises(ValueError, match=r"zeros must be None or int32 \[groups, N/8\] = \[2, 8\]"):
        exactfuse.w4a16_gemm_packed(a, packed.words, packed.scales, packed.zeros.to(torch.int64))


def test_packed_spec_is_the_gptq_spec():
    for G in (128, -1):
        qweight, scales, zeros = _weights(256, 64, G, torch.bfloat16)
        perm = torch.randperm(256).to(torch.int32)
        packed = fragment.pack(qweight, scales, zeros, perm)
        a = torch.randn(5, 256, dtype=torch.bfloat16)
        bias = torch.randn(64, dtype=torch.bfloat16)
        want = native.w4a16_gemm(a, qweight, scales, zeros, perm, bias, G)
        assert torch.equal(exactfuse.w4a16_gemm_packed(a, *packed, bias=bias), want)


def test_bench_grid_builds_packed_cases():
    o = exactfuse.get("w4a16_gemm_packed")
    o.load_declarations()
    case = next(iter(o.grids["quick"](torch.device("cpu"), torch.float16)))
    a, words, scales, zeros, perm, bias = case.args
    assert case.id == "M1-K4096-N4096" and words.shape == (256, 64, 32, 4) and scales.dtype == torch.float16
    assert scales.shape == (32, 4096) and zeros is None
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
    got = _packed_gptq_args((a, *packed, bias), {})
    named = _packed_gptq_args((a, packed.words, packed.scales), {"zeros": packed.zeros, "perm": perm, "bias": bias})
    assert named[4] is perm and named[5] is bias and (named[3] is None if symmetric else torch.equal(named[3], zeros))
    assert got[0] is a and got[4] is packed.perm and got[5] is bias and got[6] == g == 64
    assert torch.equal(got[1], qweight) and torch.equal(got[2], scales)
    assert got[3] is None if symmetric else torch.equal(got[3], zeros)
