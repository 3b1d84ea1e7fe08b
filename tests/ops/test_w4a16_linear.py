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
