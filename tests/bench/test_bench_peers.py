"""Peer adapters of `exactfuse bench`: Liger-Kernel for the gated activations, the W4A16 baselines (CPU)."""

import dataclasses

import pytest
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


def test_a_peer_not_timed_is_not_imported(monkeypatch):
    """The candidates ask a peer whether its library is available (an import: FLA's takes seconds) only where
    the run times that peer: the quick grid (``peers=False``) and a ``--provider`` list without it ask none."""
    asked = []
    for adapters in PEERS.values():
        for name, adapter in list(adapters.items()):
            asks = lambda name=name: asked.append(name) or False  # noqa: E731
            monkeypatch.setitem(adapters, name, dataclasses.replace(adapter, available=asks))
    op = OPS["causal_conv1d"]
    Candidates(BenchConfig(device="cpu", compile=False, peers=False)).for_op(op)
    Candidates(BenchConfig(device="cpu", compile=False, providers=["triton", "native"])).for_op(op)
    assert asked == []
    Candidates(BenchConfig(device="cpu", compile=False, providers=["triton", "fla"])).for_op(op)
    assert asked == ["fla"]


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


def test_fla_forms_carry_the_gradient_when_built_without_grad(monkeypatch):
    """FLA's forms are built under the bench's ``no_grad`` and called (the backward peer) under ``enable_grad``:
    each form must carry the gradient to ``x``, ``weight`` and ``bias`` (a view of ``x`` taken at build time,
    in no-grad mode, would not). FLA stood in for by torch's conv (``sys.modules``), so this runs on the CPU."""
    import sys
    import types

    import torch.nn.functional as F

    from exactfuse.bench.peers import conv as conv_peers

    def causal_conv1d(x, weight, bias=None, initial_state=None, cu_seqlens=None, chunk_indices=None,
                      output_final_state=False, activation=None):  # fmt: skip
        K = weight.shape[1]
        y = F.conv1d(x.transpose(1, 2), weight[:, None], bias, padding=K - 1, groups=x.shape[2])[..., : x.shape[1]]
        return F.silu(y.transpose(1, 2)).contiguous(), None

    modules = {"fla": types.ModuleType("fla"), "fla.modules": types.ModuleType("fla.modules"),
               "fla.modules.causal_conv1d": types.SimpleNamespace(causal_conv1d=causal_conv1d),
               "fla.ops": types.ModuleType("fla.ops"), "fla.ops.utils": types.ModuleType("fla.ops.utils"),
               "fla.ops.utils.index": types.SimpleNamespace(prepare_chunk_indices=lambda cu, size: None)}  # fmt: skip
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    T, C, K = 12, 8, 4
    leaves = [torch.randn(T, C).requires_grad_(), torch.randn(C, K).requires_grad_(), torch.randn(C).requires_grad_()]
    qsl = torch.tensor([0, 4, 8, 12], dtype=torch.int32)
    with torch.no_grad():
        forms = conv_peers._fla_forms(*leaves, "silu", qsl)
    assert set(forms) == {"varlen", "batch"}
    with torch.enable_grad():
        y = forms["batch"](None)[0]
        grads = torch.autograd.grad(y, leaves, torch.ones_like(y))
    assert all(g is not None and g.shape == t.shape for g, t in zip(grads, leaves, strict=True))


def test_conv_backward_peer_returns_the_ops_four_gradients(monkeypatch):
    """The eager-autograd backward peer passes the bench's gate on the op's own cases, with and without bias
    and initial states: its gradients come back as the op's ``(d x, d weight, d bias, d initial_states)``
    (empty where an input is absent), not autograd's one per leaf. Run on the CPU, without the capture stream."""
    import contextlib

    from exactfuse.bench.gate import run_gate
    from exactfuse.bench.peers import conv as conv_peers

    monkeypatch.setattr(conv_peers, "on_capture_stream", contextlib.nullcontext)
    op = OPS["causal_conv1d_fn_backward"]
    peer = PEERS["causal_conv1d_fn_backward"]["eager-autograd"]
    cases = op.cases("cpu", torch.float32, quick=True)
    given = [op.signature.bind(*c.args, **c.kwargs).arguments for c in cases]
    kinds = {(a.get("bias") is not None, a.get("initial_states") is not None) for a in given}
    assert (True, True) in kinds and (True, False) in kinds
    for case in cases:
        expected = [t for t in op.native(*case.args, **case.kwargs)]
        result = run_gate(op, peer.prepare, case.args, case.kwargs, expected, op.contract)
        assert result.passed, (case.id, result.detail)


@pytest.mark.parametrize("Hq, Hkv", [(6, 2), (4, 4)], ids=["group3", "no-group"])
def test_flex_forms_compute_the_op(monkeypatch, Hq, Hkv):
    """Each of flex-attention's forms (enable_gqa; each K/V head's query heads folded into the query axis)
    gives the op's result on the CPU, flex_attention run eagerly: the faster of them is the row."""
    import exactfuse.ops  # noqa: F401
    from exactfuse.bench.peers import sparse_paged_attention as sparse_peers
    from exactfuse.registry import OPS
    from exactfuse.testing.cases.sparse_paged_attention import attention_case

    case = attention_case(
        "flex", 8, Hq, Hkv, 16, 8, 8, dtype=torch.float32, device="cpu", gen=torch.Generator().manual_seed(0),
        reqs=2, pages_per_req=4, short_every=0, empty_last=False, holes=0.0, overlap=0.0, distinct=True,
    )  # fmt: skip
    op = OPS["sparse_paged_attention"]
    expected = case.args[0].clone()
    op.native(expected, *case.args[1:], **case.kwargs)
    forms = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    monkeypatch.setattr(sparse_peers, "fastest", lambda calls: forms.update(calls) or next(iter(calls.values())))
    sparse_peers._flex(case.args, case.kwargs)
    assert sorted(forms) == (["enable_gqa", "group folded into the queries"] if Hq > Hkv else ["enable_gqa"])
    for name, call in forms.items():
        case.args[0].zero_()
        call()
        torch.testing.assert_close(case.args[0], expected, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("group", [1, 3])
def test_flex_block_masks_visit_the_tiles_create_block_mask_visits(group):
    """``selected_blocks`` (built from tiles, never every (query, position) pair) lists exactly the partial
    and the full tiles ``create_block_mask`` lists, for each request and query block."""
    from torch.nn.attention.flex_attention import create_block_mask

    from exactfuse.bench.peers.sparse_paged_attention import selected_blocks

    gen = torch.Generator().manual_seed(group)
    selected = torch.rand((2, 7, 30), generator=gen) < 0.08
    selected[1, 3] = False  # a row selecting nothing
    selected[0, :, 8:16] = True  # full tiles: every query of the block, every position of two tiles

    def mask_mod(b, h, q_idx, kv_idx):
        return selected[b, q_idx // group, kv_idx]

    ours = selected_blocks(selected, group, mask_mod, block=4)
    theirs = create_block_mask(mask_mod, 2, None, 7 * group, 30, device="cpu", BLOCK_SIZE=4)
    assert ours.seq_lengths == theirs.seq_lengths == (7 * group, 30)

    def listed(mask, b, qb):
        partial = mask.kv_indices[b, 0, qb, : mask.kv_num_blocks[b, 0, qb]].tolist()
        full = mask.full_kv_indices[b, 0, qb, : mask.full_kv_num_blocks[b, 0, qb]].tolist()
        return set(partial), set(full)

    for b in range(2):
        for qb in range(ours.kv_num_blocks.shape[-1]):
            assert listed(ours, b, qb) == listed(theirs, b, qb), (b, qb)
