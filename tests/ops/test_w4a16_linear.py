"""W4A16Linear: from_linear / from_gptq, state_dict round trip, repr, the Triton provider under the interpreter."""

import pytest
import torch

from exactfuse.layers import W4A16Linear
from exactfuse.ops.w4a16 import CONTRACT, quantize_rtn, w4a16_gemm
from exactfuse.ops.w4a16.packing import dequantize_gptq
from exactfuse.testing import make_generator


def _layer(K=256, N=64, **kw):
    lin = torch.nn.Linear(K, N, bias=True).half()
    return W4A16Linear.from_linear(lin, **kw)


def test_layer_matches_dense_weight_and_round_trips_state_dict():
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 64, bias=True).half()
    layer = W4A16Linear.from_linear(lin, group_size=64, symmetric=False)
    x = torch.randn(2, 3, 256, dtype=torch.float16)
    y = layer(x)
    assert y.shape == (2, 3, 64) and y.dtype == torch.float16
    assert torch.equal(y, torch.matmul(x, layer.dense_weight()) + layer.bias)
    # quantization error of 4-bit RTN: well below the output's own scale
    with torch.no_grad():
        ref = lin(x)
    assert float((y - ref).float().norm() / ref.float().norm()) < 0.15
    clone = W4A16Linear(256, 64, group_size=64, symmetric=False, bias=True)
    clone.load_state_dict(layer.state_dict())
    assert torch.equal(clone(x), y)
    assert set(layer.state_dict()) == {"qweight", "scales", "zeros", "bias"}
    text = repr(layer)
    assert "format='gptq-v2'" in text and "group_size=64" in text


@pytest.mark.parametrize("fmt", ["v1", "v2"])
def test_layer_from_gptq_act_order(fmt):
    gen = make_generator(0)
    order = torch.randperm(256, generator=gen)
    w = torch.randn((64, 256), generator=gen)
    t = quantize_rtn(w, 32, False, format=fmt, order=order, scale_dtype=torch.float16)
    layer = W4A16Linear.from_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, format=fmt)
    assert layer.act_order and "perm" in layer.state_dict() and f"format='gptq-{fmt}'" in repr(layer)
    assert torch.equal(layer.dense_weight(), dequantize_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, format=fmt))
    clone = W4A16Linear(256, 64, group_size=32, symmetric=False, act_order=True)
    clone.load_state_dict(layer.state_dict())
    x = torch.randn(5, 256, dtype=torch.float16)
    assert torch.equal(clone(x), layer(x))


@pytest.mark.interpreter
def test_layer_on_the_triton_provider_interpreter():
    layer = _layer(group_size=128, symmetric=False)
    x = torch.randn(4, 256, dtype=torch.float16)
    with w4a16_gemm.priority(["triton"]):
        y = layer(x)
    assert CONTRACT.check(y, layer(x), args=(x, *_layer_args(layer))).passed


def _layer_args(layer):
    return layer.qweight, layer.scales, layer.zeros, layer.perm, layer.bias, layer.group_size


# ------------------------------------------------------------------ layout="fragment"
@pytest.mark.parametrize("symmetric", [True, False])
def test_fragment_layout_is_the_gptq_layers_weight_and_checkpoint(symmetric):
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 64, bias=True).half()
    gptq = W4A16Linear.from_linear(lin, group_size=64, symmetric=symmetric)
    frag = W4A16Linear.from_linear(lin, group_size=64, symmetric=symmetric, layout="fragment")
    assert frag.layout == "fragment" and not hasattr(frag, "qweight") and "layout='fragment'" in repr(frag)
    x = torch.randn(3, 5, 256, dtype=torch.float16)
    assert torch.equal(frag.dense_weight(), gptq.dense_weight())
    assert torch.equal(frag(x), gptq(x))  # both specs: the same dequantized weight, the same matmul
    # the checkpoint is the GPTQ layout's, key for key and bit for bit
    saved, want = frag.state_dict(), gptq.state_dict()
    assert set(saved) == set(want) and all(torch.equal(saved[k], want[k]) for k in want)
    # and loads into either layout
    assert frag.fragment_scales.shape == (4, 64) and frag.fragment_scales.dtype == torch.float16
    if symmetric:
        assert frag.fragment_zeros is None
    else:
        assert frag.fragment_zeros.shape == (4, 8) and frag.fragment_zeros.dtype == torch.int32
    clone = W4A16Linear(256, 64, group_size=64, symmetric=symmetric, bias=True, layout="fragment")
    clone.load_state_dict(want)
    assert torch.equal(clone.words, frag.words) and torch.equal(clone.fragment_scales, frag.fragment_scales)
    assert clone.fragment_zeros is None if symmetric else torch.equal(clone.fragment_zeros, frag.fragment_zeros)
    back = W4A16Linear(256, 64, group_size=64, symmetric=symmetric, bias=True)
    back.load_state_dict(saved)
    assert torch.equal(back.qweight, gptq.qweight) and torch.equal(back.scales, gptq.scales)


def test_fragment_layout_converts_dtype_as_the_gptq_layout():
    """``.to(dtype)`` converts the scales (and bias) as any float buffer; the zero words stay int32."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(128, 32, bias=True).half()
    gptq = W4A16Linear.from_linear(lin, group_size=64, symmetric=False).to(torch.bfloat16)
    frag = W4A16Linear.from_linear(lin, group_size=64, symmetric=False, layout="fragment").to(torch.bfloat16)
    assert frag.fragment_scales.dtype == torch.bfloat16 and frag.bias.dtype == torch.bfloat16
    assert frag.fragment_zeros.dtype == torch.int32
    assert torch.equal(frag.dense_weight(), gptq.dense_weight())
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    assert torch.equal(frag(x), gptq(x))


def test_fragment_layout_with_act_order():
    gen = make_generator(0)
    order = torch.randperm(256, generator=gen)
    t = quantize_rtn(torch.randn((64, 256), generator=gen), 64, False, format="v1", order=order,
                     scale_dtype=torch.float16)  # fmt: skip
    gptq = W4A16Linear.from_gptq(t.qweight, t.qzeros, t.scales, t.g_idx)
    frag = W4A16Linear.from_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, layout="fragment")
    x = torch.randn(5, 256, dtype=torch.float16)
    assert torch.equal(frag(x), gptq(x)) and torch.equal(frag.perm, gptq.perm)
    clone = W4A16Linear(256, 64, group_size=64, symmetric=False, act_order=True, layout="fragment")
    clone.load_state_dict(gptq.state_dict())
    assert torch.equal(clone(x), gptq(x))


def test_fragment_layout_errors_name_what_it_cannot_take():
    with pytest.raises(ValueError, match="layout must be one of"):
        W4A16Linear(256, 64, layout="marlin")
    with pytest.raises(ValueError, match="groups must be a multiple of 64 rows"):
        W4A16Linear(256, 64, group_size=32, layout="fragment")
    with pytest.raises(ValueError, match="no per-row groups"):
        W4A16Linear(256, 64, groups=2, layout="fragment")
    layer = W4A16Linear(256, 64, group_size=64, bias=True, layout="fragment")
    full = W4A16Linear.from_linear(torch.nn.Linear(256, 64).half(), group_size=64).state_dict()
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "qweight"'):
        layer.load_state_dict({k: v for k, v in full.items() if k != "qweight"})
    wrong = {**full, "scales": full["scales"][:2]}
    with pytest.raises(RuntimeError, match="size mismatch for scales"):
        layer.load_state_dict(wrong)
    with pytest.raises(TypeError, match="keeps its scales in float16 or bfloat16"):
        layer.float()
    assert layer.fragment_scales.dtype == torch.float16  # a refused dtype leaves the layer as it was


def test_fragment_layout_refuses_a_zero_point_of_16():
    """A GPTQ v1 zero point of 16 (stored 15) has no nibble in the fragment layout's zero words."""
    t = quantize_rtn(torch.randn(64, 128, generator=make_generator(0)), 64, False, scale_dtype=torch.float16)
    qzeros = t.qzeros.clone()
    qzeros[0, 0] |= 0xF  # column 0 of group 0: stored 15, true zero point 16
    gptq = W4A16Linear.from_gptq(t.qweight, qzeros, t.scales, format="v1")
    assert "zero points must be 0..15" in gptq.fragment_unsupported()
    with pytest.raises(ValueError, match="zero points must be 0..15"):
        W4A16Linear.from_gptq(t.qweight, qzeros, t.scales, format="v1", layout="fragment")
    frag = W4A16Linear(128, 64, group_size=64, symmetric=False, layout="fragment")
    with pytest.raises(RuntimeError, match="holds zero points 0..15, got up to 16"):
        frag.load_state_dict(gptq.state_dict())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_gpu_fragment_layout_meets_the_contract_at_every_path(dtype):
    """The fragment layer's kernel (M <= 128) and dense path (M > 128) on the GPU: within the op's contract of
    the GPTQ layer's spec, which dequantizes the same weight."""
    from exactfuse.ops.w4a16 import w4a16_gemm_packed
    from exactfuse.ops.w4a16.mma import gluon_gpu_available

    if not gluon_gpu_available():
        pytest.skip("w4a16_gemm_packed's kernel needs sm_90")
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 1024, bias=True).to("cuda", dtype)
    frag = W4A16Linear.from_linear(lin, group_size=128, layout="fragment")
    for M in (1, 16, 64, 200):
        x = torch.randn(M, 4096, device="cuda", dtype=dtype)
        with w4a16_gemm_packed.priority(["gluon"]):
            y = frag(x)
        want = torch.matmul(x, frag.dense_weight()) + frag.bias
        args = (x, frag.words, frag.fragment_scales, frag.fragment_zeros, frag.perm, frag.bias)
        assert w4a16_gemm_packed.contract.check(y, want, args=args).passed, M


def test_auto_layout_is_the_fragment_layout_where_its_kernel_runs(monkeypatch):
    """``layout="auto"``: the fragment layout where the layer has one, holds at least
    ``FRAGMENT_LAYOUT_MIN_WEIGHTS`` weights and ``w4a16_gemm_packed``'s kernel runs on its device, else the GPTQ
    layout (here, without an sm_90 GPU: the GPTQ layout); the same outputs either way. The default stays the
    GPTQ layout."""
    from exactfuse.layers import w4a16 as layers
    from exactfuse.ops.w4a16 import heuristics

    lin = torch.nn.Linear(256, 64, bias=True).half()
    x = torch.randn(3, 256, dtype=torch.float16)
    assert W4A16Linear.from_linear(lin, group_size=64, layout="auto").layout == "gptq"
    monkeypatch.setattr(layers, "fragment_kernel_runs", lambda device: device.type == "cpu")
    assert W4A16Linear.from_linear(lin, group_size=64, layout="auto").layout == "gptq"  # 2^14 weights: too few
    monkeypatch.setattr(heuristics, "FRAGMENT_LAYOUT_MIN_WEIGHTS", 256 * 64 + 1)
    assert W4A16Linear.from_linear(lin, group_size=64, layout="auto").layout == "gptq"
    monkeypatch.setattr(heuristics, "FRAGMENT_LAYOUT_MIN_WEIGHTS", 256 * 64)
    assert W4A16Linear.from_linear(lin, group_size=64).layout == "gptq"
    auto = W4A16Linear.from_linear(lin, group_size=64, symmetric=False, layout="auto")
    assert auto.layout == "fragment"
    assert torch.equal(auto(x), W4A16Linear.from_linear(lin, group_size=64, symmetric=False)(x))
    assert W4A16Linear.from_linear(lin, group_size=32, layout="auto").layout == "gptq"  # groups of 32 rows
    t = quantize_rtn(torch.randn(64, 128, generator=make_generator(0)), 64, False, scale_dtype=torch.float16)
    qzeros = t.qzeros.clone()
    qzeros[0, 0] |= 0xF  # a GPTQ v1 zero point of 16
    assert W4A16Linear.from_gptq(t.qweight, qzeros, t.scales, format="v1", layout="auto").layout == "gptq"
    with pytest.raises(ValueError, match="layout must be one of"):
        W4A16Linear.from_gptq(t.qweight, t.qzeros, t.scales, layout="fast")


@pytest.mark.gpu
def test_gpu_auto_layout_on_this_gpu_is_the_one_its_kernel_takes():
    """On an sm_90 GPU ``layout="auto"`` is the fragment layout for a layer of ``FRAGMENT_LAYOUT_MIN_WEIGHTS``
    weights (4096 x 8192), elsewhere the GPTQ layout, and the GPTQ layout for a smaller one (4096 x 1024) on any
    GPU; the layer's outputs are within the op's contract of its dequantized weight."""
    from exactfuse.ops.w4a16 import heuristics, w4a16_gemm_packed
    from exactfuse.utils import compute_capability

    assert heuristics.FRAGMENT_LAYOUT_MIN_WEIGHTS == 4096 * 8192
    small = torch.nn.Linear(4096, 1024, bias=True).to("cuda", torch.bfloat16)
    assert W4A16Linear.from_linear(small, layout="auto").layout == "gptq"
    lin = torch.nn.Linear(4096, 8192, bias=True).to("cuda", torch.bfloat16)
    auto = W4A16Linear.from_linear(lin, layout="auto")
    want = "fragment" if compute_capability(torch.device("cuda")) == (9, 0) else "gptq"
    assert auto.layout == want
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    ref = torch.matmul(x, auto.dense_weight()) + auto.bias
    if want == "fragment":
        args = (x, auto.words, auto.fragment_scales, auto.fragment_zeros, auto.perm, auto.bias)
        assert w4a16_gemm_packed.contract.check(auto(x), ref, args=args).passed
