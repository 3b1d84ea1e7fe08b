"""Conv parity in dtypes: Dao's fp32 weight and bias with 16-bit ``x`` (one rounding, as its reference) and
FLA's int64 ``cu_seqlens`` (``test_conv_parity.py`` holds the peers' sources and tolerances)."""

import pytest
import torch
import torch.nn.functional as F

from exactfuse.ops.conv import causal_conv1d, causal_conv1d_update
from exactfuse.testing import make_generator
from exactfuse.utils import DTYPE_NAMES
from support.conv_parity import DEVICE, DTYPES, PROVIDERS, assert_close, pool, randn, reference, run

HALF_DTYPES = [d for d in DTYPES if d != torch.float32]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("K", [2, 3, 4])
def test_dao_fp32_weight_and_bias_varlen_with_initial_states(provider, dtype, activation, K):
    """Dao's ``causal_conv1d_fn`` grid (fp32 weight and bias, 16-bit x and initial states, SiLU or
    none), as varlen ``causal_conv1d`` with a state: the reference's output at the peer's tolerance,
    final states bit for bit."""
    gen = make_generator(18 + K)
    C, lengths = 40, [1, 8, 16, 33]
    qsl = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    x = randn((sum(lengths), C), dtype, gen)
    weight, bias = randn((C, K), torch.float32, gen), randn((C,), torch.float32, gen)
    state = pool(len(lengths) + 1, C, K - 1, dtype, "wc", gen)
    before = state.clone()
    sid = torch.arange(1, len(lengths) + 1, dtype=torch.int32, device=DEVICE)
    has_init = torch.ones(len(lengths), dtype=torch.bool, device=DEVICE)
    out = run(causal_conv1d, provider, x, weight, bias, activation=activation, conv_state=state,
              query_start_loc=qsl, state_indices=sid, has_initial_state=has_init)  # fmt: skip
    for r, n in enumerate(lengths):
        rows = slice(int(qsl[r]), int(qsl[r]) + n)
        ref, full = reference(x[rows], before[r + 1], weight, bias, activation)
        assert_close(out[rows], ref, dtype)
        assert torch.equal(state[r + 1], full[:, -(K - 1) :])


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("Lq", [None, 4, 5], ids=lambda v: f"Lq{v}")
@pytest.mark.parametrize("K", [2, 3, 4])
def test_dao_fp32_weight_and_bias_update(provider, dtype, Lq, K):
    """Dao's ``causal_conv1d_update`` grid: fp32 weight and bias, 16-bit x and a state of
    ``state_len >= width - 1`` (history at the end): output at the peer's tolerance, state bit for bit."""
    gen = make_generator(19 + K)
    B, C, W = 6, 24, K + 2
    shape = (B, C) if Lq is None else (B, Lq, C)
    x = randn(shape, dtype, gen)
    weight, bias = randn((C, K), torch.float32, gen), randn((C,), torch.float32, gen)
    state = pool(B, C, W, dtype, "wc", gen)
    before = state.clone()
    out = run(causal_conv1d_update, provider, x, state, weight, bias, activation="silu", history_at="end")
    for b in range(B):
        ref, full = reference(x[b].reshape(-1, C), before[b], weight, bias, "silu")
        assert_close(out[b], ref.reshape(out[b].shape), dtype)
        assert torch.equal(state[b], full[:, -W:])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_fp32_weight_rounds_once(provider):
    """fp32 weights with fp16 x: the SiLU reads the fp32 conv (one rounding, as Dao's reference), so the
    output is ``rnd(silu(fp32 sum))`` bit for bit (the fp32 sum of two taps is exact here), not
    ``rnd(silu(rnd(sum)))``; fp16 weights of the same values keep the two roundings."""
    C = 8
    x = torch.tensor([[1.0] * C, [2.0**-11] * C], dtype=torch.float16, device=DEVICE)  # 2^-11: half an fp16 ulp of 1
    weight = torch.tensor([[1.0, 1.0]] * C, dtype=torch.float32, device=DEVICE)
    out = run(causal_conv1d, provider, x, weight, activation=None)
    acc = torch.tensor(1.0 + 2.0**-11)
    assert torch.equal(out[1].cpu(), acc.to(torch.float16).expand(C))  # no activation: one rounding either way
    out = run(causal_conv1d, provider, x, weight, activation="silu")
    one_rounding = F.silu(acc).to(torch.float16)
    two_roundings = F.silu(acc.to(torch.float16).float()).to(torch.float16)
    assert one_rounding != two_roundings  # 0.7314 and 0.7310 (the interpreter's exp gives eager's bits here)
    assert torch.equal(out[1].cpu(), one_rounding.expand(C))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_int64_query_start_loc_gives_the_int32_bits(provider):
    """FLA passes ``cu_seqlens`` as int64: the same outputs and states, bit for bit, as int32."""
    gen = make_generator(14)
    C, K = 16, 4
    x, weight = randn((20, C), torch.float32, gen), randn((C, K), torch.float32, gen)
    qsl = torch.tensor([0, 6, 6, 13, 20], dtype=torch.int64, device=DEVICE)
    results = []
    for q in (qsl, qsl.int()):
        state = torch.zeros(4, C, K - 1, device=DEVICE)
        out = run(causal_conv1d, provider, x, weight, conv_state=state, query_start_loc=q)
        results.append((out, state))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
