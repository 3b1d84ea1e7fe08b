"""Gradients of the causal conv: ``causal_conv1d`` called without a state cache runs ``causal_conv1d_fn``,
whose backward op ``causal_conv1d_fn_backward`` has a Triton provider (``ops/conv/grad_kernels.py``).

Dao-AILab/causal-conv1d's ``tests/test_causal_conv1d.py`` (``test_causal_conv1d``) is reproduced without
an adapter: ``x [batch, dim, seqlen]`` channel-last, a slice of a wider tensor (batch 2, dims 64 and
4096 + 32, widths 2-4, seqlens 1 to 4096, with and without bias and SiLU, with and without initial states
``[batch, dim, width - 1]``), fp32 ``weight`` and ``bias``; the reference casts x to fp32, runs ``F.conv1d``
(padding ``width - 1``, or the initial states in front), the activation, and casts back; one random output
gradient; ``dx`` and ``dinitial_states`` held to ``(rtol, atol)`` = ``(3e-4, 1e-3)``
fp32, ``(3e-3, 5e-3)`` fp16, ``(1e-2, 5e-2)`` bf16 and ``dweight``, ``dbias`` to ``(1e-3, 1e-3)``, as
there. Under the interpreter the grid is cut to what the CPU runs in seconds.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import exactfuse
from exactfuse.ops.conv import causal_conv1d, causal_conv1d_fn_backward, heuristics, native, native_grads
from exactfuse.ops.conv.grad_kernels import _sum_rows, conv_grad_init_kernel
from exactfuse.ops.conv.launch import INIT_GRAD_BC, launch_conv_grad
from exactfuse.registry import InferenceOnlyError
from exactfuse.testing import check_provider
from exactfuse.utils import DTYPE_NAMES
from support.graph import capture

INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16}

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DAO_TOL = {torch.float32: (3e-4, 1e-3), torch.float16: (3e-3, 5e-3), torch.bfloat16: (1e-2, 5e-2)}
DAO_WEIGHT_TOL = (1e-3, 1e-3)
DAO_SEQLENS = [1, 2, 8, 16, 32, 64, 128, 129, 130, 151, 256, 372, 512, 784, 1024, 1134, 2048, 4096]


def dao_reference(x, weight, bias, activation, initial_states=None):
    """Dao's ``causal_conv1d_ref``: ``x [B, D, L]`` cast to the weight's dtype, a depthwise conv with
    ``width - 1`` zeros in front (or the initial states ``[B, D, width - 1]``), the activation, cast back."""
    width = weight.shape[1]
    if initial_states is None:
        out = F.conv1d(x.to(weight.dtype), weight.unsqueeze(1), bias, padding=width - 1, groups=x.shape[1])
    else:
        full = torch.cat([initial_states, x], dim=-1).to(weight.dtype)
        out = F.conv1d(full, weight.unsqueeze(1), bias, padding=0, groups=x.shape[1])
    out = out[..., : x.shape[-1]]
    return (out if activation is None else F.silu(out)).to(x.dtype)


def dao_case(dim, seqlen, width, has_bias, dtype, initial=False, seed=0):
    """Dao's inputs, made on the device as there: channel-last ``x`` a slice of a wider tensor (its rows
    ``4096 + dim + 64`` elements apart), fp32 weight and bias, initial states ``[batch, width - 1, dim]``
    transposed (``initial``)."""
    gen = torch.Generator(DEVICE).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=DEVICE)

    x = randn(2, seqlen, 4096 + dim + 64).to(dtype)[:, :, 4096 : 4096 + dim].transpose(1, 2)  # [B, D, L]
    weight = randn(dim, width)
    bias = randn(dim) if has_bias else None
    states = randn(2, width - 1, dim).to(dtype).transpose(1, 2) if initial else None
    return x, weight, bias, states


def run_dao(dim, seqlen, width, has_bias, activation, dtype, provider, initial=False):
    inputs = dao_case(dim, seqlen, width, has_bias, dtype, initial)
    present = [i for i, t in enumerate(inputs) if t is not None]
    leaves = [None] * 4
    refs = [None] * 4
    for i in present:
        leaves[i] = inputs[i].detach().requires_grad_()  # x keeps its strides (a clone would be contiguous)
        refs[i] = inputs[i].detach().clone().requires_grad_()
    B, D, L = inputs[0].shape
    qsl = torch.arange(B + 1, dtype=torch.int32, device=DEVICE) * L
    rows = leaves[0].transpose(1, 2).reshape(B * L, D)  # [B L, D]: a view, rows 4096 + dim + 64 apart
    assert rows.stride(0) == 4096 + D + 64
    with exactfuse.get("causal_conv1d_fn").priority([provider]), causal_conv1d_fn_backward.priority([provider]):
        out = causal_conv1d(rows, leaves[1], leaves[2], activation=activation, query_start_loc=qsl,
                            initial_states=leaves[3])  # fmt: skip
    out = out.reshape(B, L, D).transpose(1, 2)
    out_ref = dao_reference(refs[0], refs[1], refs[2], activation, refs[3])
    rtol, atol = DAO_TOL[dtype]
    assert torch.allclose(out, out_ref, rtol=rtol, atol=atol)
    g = torch.randn(out.shape, generator=torch.Generator(DEVICE).manual_seed(1), device=DEVICE).to(dtype)
    out.backward(g)
    out_ref.backward(g)
    assert torch.allclose(leaves[0].grad, refs[0].grad.to(dtype), rtol=rtol, atol=atol), "dx"
    for name, i in (("dweight", 1), ("dbias", 2)):
        if i in present:
            assert torch.allclose(leaves[i].grad, refs[i].grad, rtol=DAO_WEIGHT_TOL[0], atol=DAO_WEIGHT_TOL[1]), name
    if initial:
        assert torch.allclose(leaves[3].grad, refs[3].grad.to(dtype), rtol=rtol, atol=atol), "dinitial_states"


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("seqlen", [1, 2, 129])
@pytest.mark.parametrize(("has_bias", "activation"), [(True, "silu"), (False, None)], ids=["bias-silu", "plain"])
def test_interpreter_dao_causal_conv1d_grid(dtype, width, seqlen, has_bias, activation):
    run_dao(64, seqlen, width, has_bias, activation, dtype, "triton")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("seqlen", [1, 8])
def test_interpreter_dao_initial_states(dtype, width, seqlen):
    """Dao's ``has_initial_states`` cases (channel-last x): outputs and every gradient, the initial
    states' included."""
    run_dao(64, seqlen, width, True, "silu", dtype, "triton", initial=True)


DAO_GPU_GRID = list(itertools.product([64, 4096 + 32], DAO_SEQLENS, [2, 3, 4], [(True, "silu"), (False, None)]))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=DTYPE_NAMES.get)
def test_gpu_dao_causal_conv1d_grid(dtype):
    for dim, seqlen, width, (has_bias, activation) in DAO_GPU_GRID:
        run_dao(dim, seqlen, width, has_bias, activation, dtype, "triton")
        run_dao(dim, seqlen, width, has_bias, activation, dtype, "triton", initial=True)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=DTYPE_NAMES.get)
def test_interpreter_backward_cases_meet_the_contract(dtype):
    """Every declared case of the forward and of the backward op (varlen with an empty sequence, K and
    dilation, packed ``seq_idx`` rows, fp32 weights, no rows) against their contracts."""
    for o in (exactfuse.get("causal_conv1d_fn"), causal_conv1d_fn_backward):
        failures = [c.id for c in o.cases("cpu", dtype) if not check_provider(o, "triton", c).passed]
        assert not failures, (o.name, failures)


@pytest.mark.parametrize(
    "device", [pytest.param("cpu", marks=pytest.mark.interpreter), pytest.param("cuda", marks=pytest.mark.gpu)]
)
@pytest.mark.parametrize("K, D", [(1, 1), (2, 1), (4, 1), (4, 2), (3, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=DTYPE_NAMES.get)
def test_initial_state_gradient_kernel_is_the_spec_bit_for_bit(device, K, D, dtype):
    """The kernel of ``d initial_states`` against ``native_grads.initial_state_grads`` (torch's separate multiply
    and add, each rounded): sequences shorter than the history, an empty one, channels past a tile."""
    gen = torch.Generator().manual_seed(10 * K + D)
    lengths = [5, 0, 1, 9, 3]
    qsl = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    T, C, R, SL = sum(lengths), 300, len(lengths), (K - 1) * D
    dconv = torch.randn(T, C, generator=gen).to(device, dtype)
    weight = torch.randn(C, K, generator=gen).to(device, dtype)
    got = torch.full((R, SL, C), float("nan"), dtype=dtype, device=device)
    conv_grad_init_kernel[(R, triton.cdiv(C, INIT_GRAD_BC))](
        dconv, weight, qsl, got, C, dconv.stride(0), weight.stride(0), weight.stride(1), K=K, D=D, BC=INIT_GRAD_BC
    )
    want = native_grads.initial_state_grads(dconv.float(), weight.float(), qsl, D).to(dtype)
    assert torch.equal(got.transpose(1, 2).view(INT_VIEW[dtype]), want.view(INT_VIEW[dtype]))


@pytest.mark.interpreter
@pytest.mark.parametrize("case_id", ["seq-idx-fp32", "initial-states-K4-D1-fp32"])
@pytest.mark.parametrize("BT, steps", [(2, 1), (2, 3), (8, 2)])
def test_interpreter_row_tiles_sum_in_a_fixed_order(BT, steps, case_id):
    """Several row tiles a sequence and a program (and sequences across tiles and programs): the weight
    and bias gradients are the programs' partial sums, the same bits every run, and meet the contract at
    every tile height and step count."""
    o = causal_conv1d_fn_backward
    case = next(c for c in o.cases("cpu", torch.float32) if c.id == case_id)
    config = heuristics.GradConfig(BT=BT, BC=64, steps=steps, num_warps=4, DX_BT=BT, DX_BC=32, dx_warps=4)
    first = launch_conv_grad(*case.args, config=config)
    again = launch_conv_grad(*case.args, config=config)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    contracts = o.contract_for(torch.float32, "cpu").for_outputs(4)
    for contract, got, want in zip(contracts, first, o.native(*case.args), strict=True):
        result = contract.check(got, want, args=case.args, kwargs={})
        assert result.passed, result.summary()


@triton.jit
def rows_kernel(p_in, p_out, BT: tl.constexpr, BC: tl.constexpr):
    o = tl.arange(0, BT)[:, None] * BC + tl.arange(0, BC)[None, :]
    tl.store(p_out + tl.arange(0, BC), _sum_rows(tl.load(p_in + o)))


@pytest.mark.interpreter
def test_interpreter_row_sums_pair_adjacent_rows_first():
    """The weight and bias gradients' row sums are one pairwise tree (``grad_kernels._sum_rows``), rows ``2i``
    and ``2i + 1`` first, so their bits do not depend on the register layout a launch gets: rows 2^24, 1,
    -2^24, 1 sum to 1 that way (2^24 + 1 rounds to 2^24) and to 2 pairing the halves' rows (0 + 2)."""
    big = 2.0**24
    t = torch.tensor([big, 1.0, -big, 1.0])[:, None].repeat(1, 16)
    out = torch.empty(16)
    rows_kernel[(1,)](t, out, BT=4, BC=16)
    assert torch.equal(out, torch.ones(16))
    t8 = torch.cat([t, -t])  # two more levels of the tree: (1) + (-1)
    rows_kernel[(1,)](t8, out, BT=8, BC=16)
    assert torch.equal(out, torch.zeros(16))


def final_states_reference(x, weight, bias, dilation, qsl, initial_states):
    """Per sequence, as Dao's reference builds its final states: ``history ‖ x[start:end]ᵀ`` (the initial
    states, or zeros), the conv with the history in front (fp64, SiLU) and the last ``SL`` columns."""
    SL = (weight.shape[1] - 1) * dilation
    outs, finals = [], []
    for r in range(qsl.shape[0] - 1):
        xs = x[qsl[r] : qsl[r + 1]].t()
        history = initial_states[r] if initial_states is not None else xs.new_zeros((x.shape[1], SL))
        full = torch.cat([history, xs], dim=1)
        if xs.shape[1]:  # an empty sequence has no output (F.conv1d refuses an input narrower than its span)
            conv = F.conv1d(full[None], weight.unsqueeze(1), bias, dilation=dilation, groups=x.shape[1])[0]
            outs.append(F.silu(conv).t())
        finals.append(full[:, full.shape[1] - SL :])
    return torch.cat(outs), torch.stack(finals)


@pytest.mark.parametrize("initial", [False, True], ids=["zeros", "initial-states"])
@pytest.mark.parametrize(("K", "D"), [(4, 1), (3, 2)])
def test_final_states_and_their_gradients(K, D, initial):
    """``return_final_states``: each sequence's last ``(K-1)·D`` inputs (from the initial states where the
    sequence is shorter, an empty one included), bit for bit; the gradients of a loss on the output and
    the final states (x, weight, bias, initial states) as autograd of the reference's, fp64."""
    gen = torch.Generator().manual_seed(5)
    lengths, C, SL = (5, 0, 1, 12), 8, (K - 1) * D
    qsl = torch.tensor([0, 5, 5, 6, 18], dtype=torch.int32)
    inputs = [torch.randn(sum(lengths), C, generator=gen), torch.randn(C, K, generator=gen) * 0.5,
              torch.randn(C, generator=gen), torch.randn(4, C, SL, generator=gen) if initial else None]  # fmt: skip
    ours = [t.clone().requires_grad_() if t is not None else None for t in inputs]
    refs = [t.double().requires_grad_() if t is not None else None for t in inputs]
    out, final = causal_conv1d(*ours[:3], query_start_loc=qsl, dilation=D, initial_states=ours[3],
                               return_final_states=True)  # fmt: skip
    out_ref, final_ref = final_states_reference(*refs[:3], D, qsl, refs[3])
    assert torch.equal(final, final_ref.float())
    torch.testing.assert_close(out, out_ref.float(), rtol=1e-5, atol=1e-5)
    g, h = torch.randn(out.shape, generator=gen), torch.randn(final.shape, generator=gen)
    leaves = [t for t in ours if t is not None]
    got = torch.autograd.grad((out * g).sum() + (final * h).sum(), leaves)
    want = torch.autograd.grad((out_ref * g).sum() + (final_ref * h).sum(), [t for t in refs if t is not None])
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e.float(), rtol=1e-5, atol=1e-5)


def test_final_states_out_is_written_and_checked():
    x, w = torch.randn(6, 8), torch.randn(8, 4)
    qsl = torch.tensor([0, 2, 6], dtype=torch.int32)
    buffer = torch.empty(2, 8, 3)
    _, final = causal_conv1d(x, w, query_start_loc=qsl, return_final_states=True, final_states_out=buffer)
    assert final is buffer and torch.equal(buffer[1], x[3:].t()) and torch.equal(buffer[0, :, 1:], x[:2].t())
    with pytest.raises(ValueError, match=r"final_states_out must be \[2, 8, 3\]"):
        causal_conv1d(x, w, query_start_loc=qsl, return_final_states=True, final_states_out=torch.empty(2, 8, 4))
    with pytest.raises(ValueError, match="final_states_out is written only with return_final_states=True"):
        causal_conv1d(x, w, query_start_loc=qsl, final_states_out=buffer)
    with pytest.raises(ValueError, match="return_final_states is not taken with seq_idx"):
        causal_conv1d(x, w, seq_idx=torch.zeros(6, dtype=torch.int32), return_final_states=True)
    with pytest.raises(ValueError, match="return_final_states: a conv_state"):
        causal_conv1d(x, w, conv_state=torch.zeros(2, 8, 3), state_indices=torch.tensor([0, 1], dtype=torch.int32),
                      query_start_loc=qsl, return_final_states=True)  # fmt: skip


def test_the_public_call_routes_gradients_to_the_stateless_op():
    x = torch.randn(12, 8, requires_grad=True)
    w = torch.randn(8, 4)
    y = causal_conv1d(x, w, None, query_start_loc=torch.tensor([0, 5, 12], dtype=torch.int32))
    assert y.requires_grad and y.grad_fn is not None
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    x2 = x.detach().requires_grad_()
    want = native.causal_conv1d(x2, w, None, "silu", 1, None, torch.tensor([0, 5, 12], dtype=torch.int32))
    (ref,) = torch.autograd.grad(want, x2, torch.ones_like(want))
    assert torch.allclose(dx, ref, rtol=1e-6, atol=1e-6)


def test_a_state_cache_keeps_the_call_inference_only():
    x = torch.randn(6, 8, requires_grad=True)
    w = torch.randn(8, 4)
    state = torch.zeros(2, 8, 3)
    with pytest.raises(InferenceOnlyError, match="causal_conv1d"):
        causal_conv1d(x, w, conv_state=state, state_indices=torch.tensor([1], dtype=torch.int32),
                      query_start_loc=torch.tensor([0, 6], dtype=torch.int32))  # fmt: skip
    with pytest.raises(ValueError, match="state_indices and has_initial_state need a conv_state"):
        causal_conv1d(x, w, state_indices=torch.tensor([1], dtype=torch.int32))
    assert torch.count_nonzero(state) == 0


def test_backward_checks_name_the_argument():
    x, w = torch.randn(6, 8), torch.randn(8, 4)
    with pytest.raises(ValueError, match="causal_conv1d_fn_backward: grad must have x's shape"):
        causal_conv1d_fn_backward(torch.randn(5, 8), x, w)
    with pytest.raises(TypeError, match="causal_conv1d_fn_backward: grad must be float32"):
        causal_conv1d_fn_backward(torch.randn(6, 8, dtype=torch.float16), x, w)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=DTYPE_NAMES.get)
def test_gpu_backward_cases_meet_the_contract_and_repeat(dtype):
    for o in (exactfuse.get("causal_conv1d_fn"), causal_conv1d_fn_backward):
        for case in o.cases(DEVICE, dtype):
            assert check_provider(o, "triton", case).passed, (o.name, case.id)
    for case in causal_conv1d_fn_backward.cases(DEVICE, dtype):
        with causal_conv1d_fn_backward.priority(["triton"]):
            first, again = causal_conv1d_fn_backward(*case.args), causal_conv1d_fn_backward(*case.args)
        assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True)), case.id


@pytest.mark.gpu
def test_gpu_backward_compiles_and_replays_in_a_graph():
    """torch.compile(fullgraph=True) of the forward: the compiled backward graph calls the backward op and
    keeps eager autograd's bits; a CUDA graph of a forward and backward step replays them too."""
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, 4, device="cuda", requires_grad=True)
    qsl = torch.tensor([0, 20, 64], dtype=torch.int32, device="cuda")
    g = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)

    def forward(x, w):
        return causal_conv1d(x, w, None, query_start_loc=qsl)

    def step():
        return torch.autograd.grad(forward(x, w), (x, w), g)

    eager = step()
    torch._dynamo.reset()
    compiled = torch.autograd.grad(torch.compile(forward, fullgraph=True)(x, w), (x, w), g)
    assert all(torch.equal(a, b) for a, b in zip(compiled, eager, strict=True))
    graph, replayed = capture(step)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(replayed, eager, strict=True))


@pytest.mark.parametrize(
    "device", [pytest.param("cpu", marks=pytest.mark.interpreter), pytest.param("cuda", marks=pytest.mark.gpu)]
)
def test_an_expanded_output_gradient_takes_the_triton_backward(device):
    """``y.sum().backward()`` hands the backward a gradient of strides (0, 0) (FLA's
    ``test_conv_non_contiguous_dy``): the Triton provider takes it (made dense), and gives the gradients of a
    dense gradient of ones, bit for bit."""
    dtype = torch.float16
    x = torch.randn(24, 64, dtype=dtype, device=device)
    w = torch.randn(64, 4, dtype=dtype, device=device)
    b = torch.randn(64, dtype=dtype, device=device)
    qsl = torch.tensor([0, 7, 24], dtype=torch.int32, device=device)
    expanded = torch.ones((), dtype=dtype, device=device).expand(24, 64)
    assert expanded.stride() == (0, 0)
    args = (x, w, b, "silu", 1, qsl)
    with causal_conv1d_fn_backward.priority(["triton"]):  # strict: an error if the provider declined
        assert causal_conv1d_fn_backward.select(expanded, *args).name == "triton"
        got = causal_conv1d_fn_backward.run_provider("triton", expanded, *args)
        want = causal_conv1d_fn_backward.run_provider("triton", expanded.contiguous(), *args)
        for g, r in zip(got, want, strict=True):
            assert torch.equal(g, r)
        xg = x.clone().requires_grad_()
        causal_conv1d(xg, w, b, query_start_loc=qsl).sum().backward()
    assert torch.equal(xg.grad, want[0])
