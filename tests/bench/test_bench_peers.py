"""Peer adapters of `exactfuse bench`: Liger-Kernel for the gated activations, the W4A16 baselines (CPU)."""

import torch

from exactfuse.bench.peers import PEERS, load_peers
from exactfuse.bench.runner import BenchConfig, Candidates
from exactfuse.ops.w4a16 import native
from exactfuse.registry import OPS
from exactfuse.testing.cases.w4a16 import make_case

load_peers()  # the peers modules (imported on first use)


def test_liger_peers_registered_and_tanh_only():
    assert "liger" in PEERS["silu_and_mul"] and "liger" in PEERS["gelu_and_mul"]
    geglu = PEERS["gelu_and_mul"]["liger"]
    x = torch.ones(2, 8)
    assert geglu.accepts(x, approximate="tanh") and not geglu.accepts(x) and not geglu.accepts(x, "none")
    if not torch.cuda.is_available():
        assert (
            not geglu.available()
            and Candidates(BenchConfig(device="cpu", compile=False)).for_op(OPS["gelu_and_mul"])[-1].name != "liger"
        )


def test_w4a16_baseline_peers_prepare_outside_timing_and_decline_what_they_cannot_run():
    case = make_case("M3", 3, 1024, 64, torch.float16, "cpu", torch.Generator().manual_seed(0), bias=True)
    dense = PEERS["w4a16_gemm"]["cublas-dense"].prepare(case.args, {})
    torch.testing.assert_close(dense(), native.w4a16_gemm(*case.args), rtol=1e-2, atol=1e-2)
    int4 = PEERS["w4a16_gemm"]["torch-int4"]
    a, qweight, scales, *_, g = case.args
    assert not int4.accepts(*case.args)  # fp16: tinygemm takes bf16 only
    bf16 = (a.bfloat16(), qweight, scales.bfloat16(), None, None, None, g)
    assert int4.accepts(*bf16) == hasattr(torch, "_weight_int4pack_mm")
    assert not int4.accepts(bf16[0][:, :512], qweight[:64], scales[:4].bfloat16(), None, None, None, g)  # K % 1024
