"""w4a16_gemm's compiler boundary: one opaque node in traced graphs, and the tile chosen per call at run
time (a graph compiled at a prefill M still runs the decode tile at M = 1)."""

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.testing import CompileCounterWithBackend
from torch.fx.experimental.proxy_tensor import make_fx

from exactfuse.layers import W4A16Linear
from exactfuse.ops.w4a16 import staged, w4a16_gemm
from exactfuse.testing import make_generator
from exactfuse.testing.cases.w4a16 import make_case
from support.w4a16 import record_configs


def _exactfuse_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "exactfuse.w4a16_gemm" in str(n.target)]


def test_make_fx_holds_one_opaque_node():
    args = make_case("M4", 4, 256, 64, torch.float16, "cpu", make_generator(2), bias=True).args
    gm = make_fx(lambda *a: w4a16_gemm.torch_op(*a), tracing_mode="fake")(*args)
    nodes = _exactfuse_nodes(gm)
    assert len(nodes) == 1 and nodes[0].target is torch.ops.exactfuse.w4a16_gemm.default, gm.code
    assert "triton" not in gm.code and "matmul" not in gm.code


def _layer(K=256, N=64, **kw):
    lin = torch.nn.Linear(K, N, bias=True).half()
    return W4A16Linear.from_linear(lin, **kw)


def test_compiled_layer_graph_keeps_the_op_opaque():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    layer = _layer()
    compiled = torch.compile(layer, fullgraph=True, backend=aot_autograd(fw_compiler=capture))
    with torch.no_grad():
        compiled(torch.randn(8, 256, dtype=torch.float16))
    assert graphs and sum(len(_exactfuse_nodes(g)) for g in graphs) == 1, graphs[0].code


def _decode_after_prefill(device, backend):
    """Compile at a prefill M (the dense path) with dynamic shapes, then run decode M's: the decode tile
    and, at M = 1, the GEMV must run."""
    torch._dynamo.reset()
    layer = _layer(group_size=64).to(device)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(layer, dynamic=True, backend=counter)
    with torch.no_grad(), w4a16_gemm.priority(["triton", "native"]):
        x = torch.randn(600, 256, dtype=torch.float16, device=device)
        with record_configs() as seen:
            torch.testing.assert_close(compiled(x), layer(x), rtol=0, atol=0)
        assert seen[0].name == "dense"
        frames = counter.frame_count
        # the same dynamic graph (no recompile), the tile chosen at run time
        wgmma = not staged.wgmma_unavailable(x.device)  # the rule's staged tile serves M = 2 and 12 here
        for M, name in ((12, "staged" if wgmma else "decode"), (2, "staged" if wgmma else "gemv")):
            with record_configs() as seen:
                y = compiled(x[:M])
            assert counter.frame_count == frames
            assert [c.name for c in seen] == [name]
            torch.testing.assert_close(y, layer(x[:M]), rtol=0, atol=0)
        with record_configs() as seen:
            compiled(x[:1])  # M = 1 (dynamo specializes 0/1, so this may recompile: the op still picks gemv1)
        assert [c.name for c in seen] == ["gemv1"]


@pytest.mark.interpreter
def test_compiled_prefill_then_decode_selects_decode_config_interpreter():
    _decode_after_prefill("cpu", "aot_eager")


@pytest.mark.gpu
def test_gpu_compiled_prefill_then_decode_selects_decode_config():
    _decode_after_prefill("cuda", "inductor")
