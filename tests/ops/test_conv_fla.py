"""FLA's causal-conv tests, reproduced against ``causal_conv1d`` / ``causal_conv1d_update`` without an adapter.

From fla-org/flash-linear-attention, ``tests/modules/test_conv.py``:

- ``test_conv``: ``x [B, T, D]`` (batch first), ``weight [D, W]`` and ``bias`` in x's dtype, ``"swish"`` or no
  activation, an optional ``residual`` (a copy of x, itself a leaf); the reference convolves in fp32 for 16-bit
  inputs (``F.conv1d``, ``W - 1`` zeros in front), applies the activation, casts back, then adds the residual in
  x's dtype; one random output gradient; output and every gradient (x, weight, bias, residual) held to an
  error ratio ``rms(ref - out) / rms(ref) < 1e-3`` (``fla.utils.assert_close``). The grid: B 2, (T, D, W) =
  (64, 128, 3), (128, 128, 4), (500, 1024, 3), (1024, 1024, 4), fp32 and fp16.
- ``test_conv_varlen``: ``x [1, T, D]`` of N = 4 packed sequences at int64 ``cu_seqlens`` (cut points drawn
  from 16 .. T), T 500 / 1024, D 128 / 200 / 1024; the reference runs each sequence alone.
- ``test_conv_with_cache_prefill_fwd``: a prefill (T 2 to 1024, some shorter than the window) reading a cache
  ``[B, D, W]`` of the last ``W`` inputs (a zero pad, then each sequence's ``W - 1`` history), leaving the last
  ``W`` inputs of ``cache ‖ x``: ``causal_conv1d(..., conv_state=cache, history_at="end")``.
- ``test_conv_decoding``: token by token through ``causal_conv1d_update`` with a cache of the last **W**
  inputs ``[B, D, W]`` (zeros at first; weights zeroed there); the output and the final cache (the last
  ``min(W, T)`` inputs) against the whole-sequence reference. exactfuse reads FLA's W-wide cache as Dao's
  wide state: ``history_at="end"`` (the history is the last ``W - 1`` columns, the window shifts whole).

Under the interpreter the grid keeps the shapes the CPU runs in seconds; the GPU test runs all of it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import exactfuse
from exactfuse.ops.conv import causal_conv1d, causal_conv1d_fn_backward, causal_conv1d_update
from support.conv import FLA_DEVICE, FLA_RATIO, err_ratio

FLA_CONV = [  # (B, T, D, W, activation, has_bias, has_residual, dtype), FLA's test_conv
    (2, 64, 128, 3, "swish", True, True, torch.float32),
    (2, 128, 128, 4, "swish", False, True, torch.float32),
    (2, 64, 128, 3, "swish", True, False, torch.float32),
    (2, 128, 128, 4, "swish", False, False, torch.float32),
    (2, 500, 1024, 3, None, True, True, torch.float32),
    (2, 1024, 1024, 4, None, False, True, torch.float32),
    (2, 64, 128, 3, None, True, False, torch.float16),
    (2, 128, 128, 4, None, False, False, torch.float16),
]
FLA_VARLEN = [  # (N, T, D, W, activation, has_bias, has_residual, dtype), FLA's test_conv_varlen
    (4, 500, 128, 3, "swish", True, True, torch.float32),
    (4, 1024, 200, 4, "swish", False, True, torch.float32),
    (4, 500, 128, 3, None, True, False, torch.float16),
    (4, 1024, 1024, 4, None, False, False, torch.float16),
]


def fla_reference(x, weight, bias, activation):
    """``x [B, T, D]``: FLA's reference conv (fp32 for 16-bit inputs), activation, cast back."""
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    W = weight.shape[1]
    out = F.conv1d(x.transpose(1, 2).to(compute), weight.to(compute).unsqueeze(1),
                   bias.to(compute) if bias is not None else None, padding=W - 1, groups=x.shape[2])  # fmt: skip
    out = out[..., : x.shape[1]]
    return (out if activation is None else F.silu(out)).to(x.dtype).transpose(1, 2)


def leaves(B, T, D, W, has_bias, has_residual, dtype):
    gen = torch.Generator().manual_seed(42)
    x = torch.randn(B, T, D, generator=gen).to(FLA_DEVICE, dtype).requires_grad_()
    weight = torch.randn(D, W, generator=gen).to(FLA_DEVICE, dtype).requires_grad_()
    bias = torch.randn(D, generator=gen).to(FLA_DEVICE, dtype).requires_grad_() if has_bias else None
    residual = x.detach().clone().requires_grad_() if has_residual else None
    dy = torch.randn(B, T, D, generator=gen).to(FLA_DEVICE, dtype)
    return [x, weight, bias, residual], dy


def grads(out, tensors, dy):
    present = [t for t in tensors if t is not None]
    return torch.autograd.grad(out, present, dy)


def check_fla(ref, got, ref_grads, got_grads, tensors):
    assert err_ratio(ref, got) < FLA_RATIO, "y"
    names = [n for n, t in zip(("dx", "dw", "db", "dr"), tensors, strict=True) if t is not None]
    for name, r, g in zip(names, ref_grads, got_grads, strict=True):
        assert err_ratio(r, g) < FLA_RATIO, name


def run_fla_conv(B, T, D, W, activation, has_bias, has_residual, dtype, provider):
    tensors, dy = leaves(B, T, D, W, has_bias, has_residual, dtype)
    x, weight, bias, residual = tensors
    ref = fla_reference(x, weight, bias, activation)
    ref = ref + residual if has_residual else ref
    ref_grads = grads(ref, tensors, dy)
    with exactfuse.get("causal_conv1d_fn").priority([provider]), causal_conv1d_fn_backward.priority([provider]):
        got = causal_conv1d(x, weight, bias, activation=activation, residual=residual)
        check_fla(ref, got, ref_grads, grads(got, tensors, dy), tensors)


def run_fla_varlen(N, T, D, W, activation, has_bias, has_residual, dtype, provider):
    gen = torch.Generator().manual_seed(42)
    cuts = torch.arange(16, T)[torch.randperm(T - 16, generator=gen)[: N - 1]]
    cu_seqlens = torch.cat([torch.tensor([0]), cuts, torch.tensor([T])]).sort()[0].to(FLA_DEVICE)  # int64
    tensors, dy = leaves(1, T, D, W, has_bias, has_residual, dtype)
    x, weight, bias, residual = tensors
    pieces = []
    for bos, eos in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True):
        piece = fla_reference(x[:, bos:eos], weight, bias, activation)
        pieces.append(piece + residual[:, bos:eos] if has_residual else piece)
    ref = torch.cat(pieces, 1)
    ref_grads = grads(ref, tensors, dy)
    with exactfuse.get("causal_conv1d_fn").priority([provider]), causal_conv1d_fn_backward.priority([provider]):
        got = causal_conv1d(x, weight, bias, activation=activation, residual=residual, cu_seqlens=cu_seqlens)
        check_fla(ref, got, ref_grads, grads(got, tensors, dy), tensors)


def run_fla_decoding(B, T, D, W, activation, has_bias, has_residual, dtype, provider):
    gen = torch.Generator().manual_seed(42)
    x = torch.randn(B, T, D, generator=gen).to(FLA_DEVICE, dtype)
    weight = torch.randn(D, W, generator=gen).to(FLA_DEVICE, dtype) * 0
    bias = torch.randn(D, generator=gen).to(FLA_DEVICE, dtype) if has_bias else None
    residual = x.clone() if has_residual else None
    ref = fla_reference(x, weight, bias, activation)
    ref = ref + residual if has_residual else ref
    ref_cache = x.new_zeros(B, D, W)
    ref_cache[:, :, -min(W, T) :] = x[:, -min(W, T) :, :].transpose(1, 2)
    got = torch.zeros_like(x)
    cache = x.new_zeros(B, D, W)
    with exactfuse.get("causal_conv1d_update").priority([provider]):
        for i in range(T):
            got[:, i : i + 1] = causal_conv1d_update(
                x[:, i : i + 1], cache, weight, bias, activation=activation, history_at="end",
                residual=residual[:, i : i + 1] if has_residual else None,
            )  # fmt: skip
    assert err_ratio(ref, got) < FLA_RATIO
    assert err_ratio(ref_cache, cache) < FLA_RATIO


FLA_PREFILL = [  # FLA_CONV, then test_conv_with_cache_prefill_fwd's rows of prefills shorter than the window
    *FLA_CONV,
    (2, 2, 128, 4, "swish", True, True, torch.float32),
    (2, 3, 128, 4, "swish", True, True, torch.float32),
    (2, 4, 128, 4, "swish", True, True, torch.float32),
    (2, 2, 128, 3, "swish", True, True, torch.float32),
]


def run_fla_prefill_with_cache(B, T, D, W, activation, has_bias, has_residual, dtype, provider):
    """FLA's ``test_conv_with_cache_prefill_fwd``: a cache ``[B, D, W]`` whose last ``W - 1`` columns are each
    sequence's history (the first a zero pad); the output against the reference with those initial states,
    and the cache left as the last ``W`` inputs of ``cache ‖ x``."""
    gen = torch.Generator().manual_seed(42)
    x = torch.randn(B, T, D, generator=gen).to(FLA_DEVICE, dtype)
    residual = torch.randn(B, T, D, generator=gen).to(FLA_DEVICE, dtype) if has_residual else None
    weight = torch.randn(D, W, generator=gen).to(FLA_DEVICE, dtype)
    bias = torch.randn(D, generator=gen).to(FLA_DEVICE, dtype) if has_bias else None
    history = torch.randn(B, D, W - 1, generator=gen).to(FLA_DEVICE, dtype)
    compute = torch.float32
    full = torch.cat([history, x.transpose(1, 2)], dim=2).to(compute)
    ref = F.conv1d(full, weight.to(compute).unsqueeze(1), None if bias is None else bias.to(compute), groups=D)
    ref = (ref if activation is None else F.silu(ref)).to(dtype).transpose(1, 2)
    ref = ref + residual if has_residual else ref
    cache = torch.cat([torch.zeros(B, D, 1, device=FLA_DEVICE, dtype=dtype), history], dim=2)
    want_cache = torch.cat([cache, x.transpose(1, 2)], dim=2)[:, :, -W:]
    every = torch.ones(B, dtype=torch.bool, device=FLA_DEVICE)
    with exactfuse.get("causal_conv1d").priority([provider]):
        got = causal_conv1d(x, weight, bias, activation=activation, residual=residual, conv_state=cache,
                            has_initial_state=every, history_at="end")  # fmt: skip
    assert err_ratio(ref, got) < FLA_RATIO
    assert torch.equal(cache, want_cache)


SMALL = [c for c in FLA_CONV if c[1] * c[2] <= 128 * 128]


@pytest.mark.interpreter
@pytest.mark.parametrize("case", SMALL, ids=lambda c: f"T{c[1]}-W{c[3]}-{c[4]}-b{int(c[5])}-r{int(c[6])}-{c[7]}")
def test_interpreter_fla_conv(case):
    run_fla_conv(*case, "triton")


@pytest.mark.interpreter
def test_interpreter_fla_varlen_int64_cu_seqlens():
    run_fla_varlen(4, 200, 64, 3, "swish", True, True, torch.float32, "triton")
    run_fla_varlen(4, 200, 64, 4, None, False, False, torch.float16, "triton")


@pytest.mark.interpreter
@pytest.mark.parametrize("case", SMALL[:4] + SMALL[-2:], ids=lambda c: f"T{c[1]}-W{c[3]}-{c[4]}-r{int(c[6])}-{c[7]}")
def test_interpreter_fla_decoding_with_a_w_wide_cache(case):
    B, T, D, W, *rest = case
    run_fla_decoding(B, min(T, 12), D, W, *rest, "triton")


@pytest.mark.interpreter
@pytest.mark.parametrize("case", SMALL[:4] + FLA_PREFILL[-4:], ids=lambda c: f"T{c[1]}-W{c[3]}-{c[4]}-r{int(c[6])}")
def test_interpreter_fla_prefill_with_a_w_wide_cache(case):
    run_fla_prefill_with_cache(*case, "triton")


@pytest.mark.gpu
def test_gpu_fla_grids():
    for case in FLA_CONV:
        run_fla_conv(*case, "triton")
    for case in FLA_VARLEN:
        run_fla_varlen(*case, "triton")
    for case in FLA_CONV:
        run_fla_decoding(*case, "triton")
    for case in FLA_PREFILL:
        run_fla_prefill_with_cache(*case, "triton")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    # causal_conv1d's grid reaches T·C = 2^29 (1 GiB a bf16 tensor): two clones, two outputs and the native
    # spec's fp32 work take more than a 7.5 GiB share
    [pytest.param("causal_conv1d", marks=pytest.mark.big_memory), "causal_conv1d_update"],
)
def test_gpu_fla_peers_give_the_ops_outputs(name):
    """The bench's FLA peers on the grid cases they accept give the op's outputs (the result, and the cache
    updated in place) within FLA's rounding of the spec's: what the bench's gate compares before timing."""
    from exactfuse.bench.peers import peers_for
    from exactfuse.registry import OPS
    from exactfuse.testing import clone_args
    from exactfuse.testing.calls import collect_outputs
    from exactfuse.testing.cases import conv_grids as grids

    op = OPS[name]
    (peer,) = [p for p in peers_for(name) if p.name == "fla"]
    grid = {"causal_conv1d": grids._causal_grid, "causal_conv1d_update": grids._update_grid}[name]
    checked = 0
    for lazy in grid(torch.device("cuda"), torch.bfloat16):
        case = lazy.materialize()
        if peer.accepts(*case.args, **case.kwargs) is not True:
            continue
        (a, k), (sa, sk) = clone_args(case.args, case.kwargs), clone_args(case.args, case.kwargs)
        got = collect_outputs(op, peer.prepare(a, k)(), a, k)
        want = collect_outputs(op, op.run_provider("native", *sa, **sk), sa, sk)
        assert len(got) == len(want), f"{case.id}: {len(got)} outputs, the op has {len(want)}"
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2, msg=lambda m, c=case.id: f"{c}: {m}")
        checked += 1
    assert checked >= 5


def test_residual_and_batch_layout_are_checked_by_name():
    x, w = torch.randn(2, 5, 8), torch.randn(8, 4)
    with pytest.raises(ValueError, match="causal_conv1d: residual must be a tensor of x's shape"):
        causal_conv1d(x, w, residual=torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="must have B = 1"):
        causal_conv1d(x, w, cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="history_at='end' describes a conv_state"):
        causal_conv1d(x.requires_grad_(), w, history_at="end")
    with pytest.raises(ValueError, match="query_start_loc and cu_seqlens name the same argument"):
        causal_conv1d(x[:1], w, cu_seqlens=torch.tensor([0, 5]), query_start_loc=torch.tensor([0, 5]))


def test_fla_update_peer_runs_the_fastest_configuration_timed_alone(monkeypatch):
    """The ``fla`` update peer times each configuration of FLA's autotuner alone (the autotuner left with that
    one, so it times nothing itself) with the bench's CUDA-graph timer, keeps the fastest for the call's shape,
    and leaves the autotuner's set and the call's cache as they were; a second call of that shape reuses the
    choice."""
    import types

    from exactfuse.bench import timing
    from exactfuse.bench.peers import conv as peers

    tuner, speed, runs = types.SimpleNamespace(configs=["a", "b", "c"]), {"a": 3.0, "b": 1.0, "c": 2.0}, []
    monkeypatch.setattr(peers, "_fla_update_tuner", lambda: tuner)
    monkeypatch.setattr(peers, "_FLA_UPDATE_CONFIGS", {})
    state = torch.randn(2, 8, 4)
    before = state.clone()

    def run():  # what FLA's update would do: shift the cache in place, with the tuner's one configuration
        runs.append(tuple(tuner.configs))
        state.copy_(state.roll(-1, 2))

    monkeypatch.setattr(timing, "cudagraph_timer", lambda **_: lambda fn: (fn(), speed[tuner.configs[0]])[1])
    a = {"x": torch.randn(2, 8), "conv_state": state, "weight": torch.randn(8, 4), "bias": None, "activation": "silu"}
    assert peers._fla_update_config(a, run) == "b"
    assert runs == [("a",), ("b",), ("c",)], "each configuration timed alone"
    assert tuner.configs == ["a", "b", "c"] and torch.equal(state, before)
    assert peers._fla_update_config(a, run) == "b" and len(runs) == 3, "the choice is kept for the shape"
