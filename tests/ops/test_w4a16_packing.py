"""GPTQ packing, formats, the RTN quantizer and load-time preparation (CPU only)."""

import pytest
import torch

from exactfuse.ops.w4a16 import native
from exactfuse.ops.w4a16.packing import (
    dequantize_gptq,
    pack_cols,
    pack_rows,
    prepare_gptq,
    quantize_rtn,
    unpack_cols,
    unpack_rows,
)
from exactfuse.testing import make_generator
from support.w4a16 import GROUPS, gid


def _codes(shape, seed=0):
    return torch.randint(0, 16, shape, generator=make_generator(seed), dtype=torch.int32)


# ------------------------------------------------------------------ bits
def test_nibble_k_sits_at_bits_4_times_k_mod_8():
    values = torch.arange(16, dtype=torch.int32).reshape(16, 1) % 16  # rows 0..15 hold 0..15
    packed = pack_rows(values)
    assert packed.shape == (2, 1) and packed.dtype == torch.int32
    assert packed[0, 0].item() == 0x76543210
    assert packed[1, 0].item() == 0xFEDCBA98 - 2**32  # top nibble >= 8: negative int32
    one = torch.zeros((8, 1), dtype=torch.int32)
    one[5] = 0xA
    assert pack_rows(one)[0, 0].item() == 0xA << 20


@pytest.mark.parametrize("shape", [(8, 8), (64, 24), (256, 64)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_row_and_column_packing_round_trip_exactly(shape):
    q = _codes(shape)
    assert torch.equal(unpack_rows(pack_rows(q)), q)
    assert torch.equal(unpack_cols(pack_cols(q)), q)
    words = torch.randint(-(2**31), 2**31 - 1, (shape[0] // 8, shape[1]), dtype=torch.int32)
    assert torch.equal(pack_rows(unpack_rows(words)), words)


def test_packing_needs_multiples_of_8():
    with pytest.raises(ValueError, match=r"pack_rows: rows must be a multiple of 8, got shape \[12, 4\]"):
        pack_rows(_codes((12, 4)))
    with pytest.raises(ValueError, match=r"pack_cols: columns must be a multiple of 8"):
        pack_cols(_codes((4, 12)))


# ------------------------------------------------------------------ quantizer + formats
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("group_size", GROUPS, ids=gid)
def test_rtn_error_is_within_half_a_step(group_size, sym):
    K, N = 256, 16
    w = torch.randn((N, K), generator=make_generator(1))
    t = quantize_rtn(w, group_size, sym, format="v2", scale_dtype=torch.float16)
    deq = dequantize_gptq(t.qweight, t.qzeros, t.scales, format="v2", dtype=torch.float32)
    G = K if group_size == -1 else group_size
    step = t.scales.float().repeat_interleave(G, dim=0)
    err = (deq - w.t()).abs()
    # half a step, plus the fp16 rounding of the scale (2^-11 relative) over at most 16 steps
    assert bool((err <= step * (0.5 + 16 * 2**-11) + 1e-6).all()), float((err / step).max())


@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
def test_v1_stores_zero_point_minus_one_and_v2_the_zero_point(sym):
    w = torch.randn((16, 64), generator=make_generator(2))
    v1 = quantize_rtn(w, 32, sym, format="v1")
    v2 = quantize_rtn(w, 32, sym, format="v2")
    z2 = torch.full((2, 16), 8, dtype=torch.int32) if v2.qzeros is None else unpack_cols(v2.qzeros)
    assert torch.equal(unpack_cols(v1.qzeros) + 1, z2)
    assert torch.equal(v1.qweight, v2.qweight)  # zero points >= 1 here, so v1's clamp changed nothing
    d1 = dequantize_gptq(v1.qweight, v1.qzeros, v1.scales, format="v1")
    d2 = dequantize_gptq(v2.qweight, v2.qzeros, v2.scales, format="v2")
    assert torch.equal(d1, d2)
    if sym:
        assert v2.qzeros is None and int(v1.qzeros[0, 0]) == 0x77777777


@pytest.mark.parametrize("fmt", ["v1", "v2"])
@pytest.mark.parametrize("act", [False, True], ids=["rowmajor", "actorder"])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("group_size", GROUPS, ids=gid)
def test_prepared_weight_dequantizes_like_the_checkpoint(group_size, sym, act, fmt):
    """prepare (sort K by group, unpack zeros) then dense_weight == dequantize straight from GPTQ: bit-exact."""
    K, N = 256, 32
    gen = make_generator(3)
    w = torch.randn((N, K), generator=gen)
    order = torch.randperm(K, generator=gen) if act else None
    t = quantize_rtn(w, group_size, sym, format=fmt, order=order)
    assert (t.g_idx is not None) == act
    p = prepare_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, format=fmt)
    assert (p.zeros is None) == sym
    assert p.group_size == (-1 if group_size in (-1, K) else group_size)  # one group of all K: per-channel
    if act and group_size not in (-1, K):
        assert p.perm is not None and p.perm.dtype == torch.int32
        assert torch.equal(t.g_idx.long()[p.perm.long()], torch.arange(K) // group_size)
    expected = dequantize_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, format=fmt)
    assert torch.equal(native.dense_weight(*p[:4], p.group_size), expected)


def test_trivial_g_idx_needs_no_permutation():
    t = quantize_rtn(torch.randn((16, 256)), 64, True)
    g_idx = (torch.arange(256) // 64).to(torch.int32)
    assert prepare_gptq(t.qweight, t.qzeros, t.scales, g_idx).perm is None


def test_symmetry_is_inferred_and_checked():
    w = torch.randn((16, 128), generator=make_generator(4))
    sym = quantize_rtn(w, 64, True, format="v1")
    assert prepare_gptq(sym.qweight, sym.qzeros, sym.scales, format="v1").zeros is None
    # Read as v2, the stored 7s are zero points 7: not symmetric.
    assert prepare_gptq(sym.qweight, sym.qzeros, sym.scales, format="v2").zeros is not None
    asym = quantize_rtn(w, 64, False, format="v2")
    with pytest.raises(ValueError, match=r"sym=True but qzeros holds zero points other than 8"):
        prepare_gptq(asym.qweight, asym.qzeros, asym.scales, format="v2", sym=True)


# ------------------------------------------------------------------ bad tensors
def _gptq(K=256, N=64, G=128):
    t = quantize_rtn(torch.randn((N, K), generator=make_generator(5)), G, False, format="v2")
    return t.qweight, t.qzeros, t.scales


BAD = {
    "qweight-1d": (
        lambda q, z, s: (q.reshape(-1), z, s, None),
        ValueError,
        r"qweight must be 2-D \[K/8, N\] int32, got \[2048\]",
    ),
    "qweight-dtype": (lambda q, z, s: (q.to(torch.int64), z, s, None), TypeError, r"qweight must be int32"),
    "n-not-multiple-of-8": (
        lambda q, z, s: (q[:, :60], z, s[:, :60], None),
        ValueError,
        r"N \(qweight.shape\[1\]\) must be a multiple of 8, got 60",
    ),
    "scales-shape": (
        lambda q, z, s: (q, z, s[:, :32], None),
        ValueError,
        r"scales must be \[K/group_size, N\] = \[\?, 64\], got \[2, 32\]",
    ),
    "k-not-multiple-of-group": (
        lambda q, z, s: (q, z, torch.ones((3, 64), dtype=s.dtype), None),
        ValueError,
        r"K = 256 must be a multiple of the group size \(scales has 3 rows\)",
    ),
    "scales-dtype": (lambda q, z, s: (q, z, s.float(), None), TypeError, r"scales must be float16 or bfloat16"),
    "qzeros-shape": (lambda q, z, s: (q, z[:, :4], s, None), ValueError, r"qzeros must be \[2, 8\], got \[2, 4\]"),
    "g_idx-shape": (
        lambda q, z, s: (q, z, s, torch.zeros(128, dtype=torch.int32)),
        ValueError,
        r"g_idx must be \[256\], got \[128\]",
    ),
    "g_idx-dtype": (lambda q, z, s: (q, z, s, torch.zeros(256)), TypeError, r"g_idx must be int32 or int64"),
    "g_idx-range": (
        lambda q, z, s: (q, z, s, torch.arange(256, dtype=torch.int32) // 64),
        ValueError,
        r"g_idx values must be in \[0, 2\) \(K/group_size\), got range \[0, 3\]",
    ),
    "g_idx-uneven": (
        lambda q, z, s: (q, z, s, (torch.arange(256) >= 200).to(torch.int32)),
        ValueError,
        r"g_idx must assign exactly K/groups = 128 rows to each of the 2 groups",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_checkpoint_tensors_name_the_tensor(name):
    make, exc, message = BAD[name]
    with pytest.raises(exc, match=message):
        prepare_gptq(*make(*_gptq()), format="v2")


def test_bad_bits_and_format():
    q, z, s = _gptq()
    with pytest.raises(ValueError, match=r"only bits=4 is supported, got bits=8"):
        prepare_gptq(q, z, s, bits=8)
    with pytest.raises(ValueError, match=r"format must be 'v1' or 'v2', got 'v3'"):
        prepare_gptq(q, z, s, format="v3")


def test_quantizer_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"K = 100 must be a multiple of group_size = 32 and of 8"):
        quantize_rtn(torch.randn(16, 100), 32)
    with pytest.raises(ValueError, match=r"N = 12 must be a multiple of 8"):
        quantize_rtn(torch.randn(12, 64), 32)
