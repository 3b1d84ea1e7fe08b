"""FLA's causal-conv tests with an initial state that takes gradients, reproduced against ``causal_conv1d``.

From fla-org/flash-linear-attention, ``tests/modules/test_conv.py``. FLA's ``initial_state`` is ``[N, D, W]``
(``W`` the kernel width): column 0 is padding, the history of each sequence is its last ``W - 1`` columns. Its
final state holds the last ``W`` inputs, of which the tests compare the last ``W - 1``; ``d initial_state`` is
the gradient of the whole ``[N, D, W]`` tensor, zero in the unused column 0. exactfuse takes the history alone:
``causal_conv1d(x [T, D], weight [D, W], bias, query_start_loc=..., initial_states=h0[..., 1:],
return_final_states=True)``; the slice carries the gradient back into ``h0`` (column 0 untouched, so zero) and
the final states are FLA's ``[..., 1:]``. A batch of ``B`` sequences of ``T`` rows is ``x.reshape(B * T, D)``
with ``query_start_loc = arange(B + 1) * T``. Every output and gradient is held to FLA's error ratio
``rms(ref - got) / rms(ref) < 1e-3``.

- ``test_conv_cache_backward``: fp32, swish, bias, a residual, a cache (each sequence's ``W - 1`` history,
  ``h0 = zeros ‖ cache``) that requires grad; the loss also reads the final state: gradients of x, weight, bias,
  residual and cache.
- ``test_conv_cache_backward_no_final_state``: the same without the final state, over bias, residual,
  activation and fp16.
- ``test_conv_varlen_initial_state_backward_random``: packed sequences, ``h0 [N, D, W]`` itself the leaf
  (column 0 zeros): two sequences cut at a random row, and 128 sequences of 32 rows then one of 8192.
- ``test_conv_dense_initial_state_backward_large_nt``: one sequence of 8192 rows with ``h0 [1, D, W]``.

The reference runs each sequence alone: its history then its rows, a depthwise ``F.conv1d`` without padding,
the SiLU, a cast to x's dtype, in float64 for fp32 inputs and fp32 for 16-bit ones (FLA's). The interpreter
tests run the cases the CPU takes in seconds through the Triton providers of the forward and the backward; the
GPU tests run the large ones, and the small ones again on the card.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import exactfuse
from exactfuse.ops.conv import causal_conv1d, causal_conv1d_fn_backward
from support.conv import FLA_DEVICE, FLA_RATIO, err_ratio

F32, F16 = torch.float32, torch.float16
CACHE_BACKWARD = [  # (B, T, D, W), FLA's test_conv_cache_backward: fp32, swish, bias, residual, final state
    (2, 64, 100, 3),
    (2, 128, 128, 4),
    (3, 128, 128, 4),
    (3, 128, 256, 4),
    (3, 128, 512, 4),
    (2, 128, 1024, 4),
    (2, 128, 2048, 3),
    (2, 128, 4096, 4),
    (2, 128, 8192, 4),
    (1, 1, 128, 4),
    (2, 2, 128, 4),
    (1, 1, 64, 3),
]
NO_FINAL_STATE = [  # (B, T, D, W, bias, residual, activation, dtype), FLA's test_conv_cache_backward_no_final_state
    (2, 64, 100, 3, True, False, "swish", F32),
    (2, 128, 128, 4, True, False, "swish", F32),
    (3, 128, 128, 4, False, False, "swish", F32),
    (2, 64, 256, 4, True, True, "swish", F32),
    (2, 128, 512, 4, True, False, None, F32),
    (2, 64, 128, 3, True, False, "swish", F16),
]
VARLEN = [  # (lengths, D), FLA's test_conv_varlen_initial_state_backward_random: W 4, fp32, swish, bias
    ("random-cut-256", 128),
    ("32x128+8192", 4096),
    ("32x128+8192", 8192),
]
DENSE = [(8192, 4096), (8192, 8192)]  # (T, D), FLA's test_conv_dense_initial_state_backward_large_nt: B 1, W 4


def reference(x, weight, bias, activation, history, starts):
    """``x [T, D]`` rows of the sequences at ``starts``, ``history [N, D, W - 1]``: each sequence's conv over its
    history then its rows (float64 for fp32, fp32 for 16-bit), the activation, x's dtype; and its final state,
    the last ``W - 1`` entries of ``history ‖ rows``. Returns ``(out [T, D], final [N, D, W - 1])``."""
    compute = torch.float64 if x.dtype == torch.float32 else torch.float32
    D, W = weight.shape
    w = weight.to(compute).unsqueeze(1)
    b = None if bias is None else bias.to(compute)
    outs, finals = [], []
    for n, (bos, eos) in enumerate(itertools.pairwise(starts.tolist())):
        full = torch.cat([history[n].to(compute), x[bos:eos].to(compute).T], dim=1)  # [D, W - 1 + L]
        y = F.conv1d(full[None], w, b, groups=D)[0]
        y = y if activation is None else F.silu(y)
        outs.append(y.to(x.dtype).T)
        finals.append(full[:, full.shape[1] - (W - 1) :].to(x.dtype))
    return torch.cat(outs), torch.stack(finals)


def cut_lengths(name: str, gen: torch.Generator, W: int) -> list[int]:
    if name == "random-cut-256":  # two sequences, cut at a random row in [W, T - W)
        T = 256
        cut = int(torch.randint(W, T - W, (1,), generator=gen))
        return [cut, T - cut]
    assert name == "32x128+8192"
    return [32] * 128 + [8192]


def run_initial_state_backward(
    lengths, D, W, *, bias=True, residual=False, activation="swish", dtype=F32, final=False, leaf="cache", gen=None
):
    """One FLA case. ``leaf="cache"``: the leaf is each sequence's history ``[N, D, W - 1]`` and ``h0 = zeros ‖
    cache``; ``leaf="h0"``: ``h0 [N, D, W]`` itself (column 0 zeros). ``final``: the final state is returned, held
    to the reference's and in the loss. The Triton providers of the forward and the backward, strictly."""
    gen = torch.Generator().manual_seed(42) if gen is None else gen
    N, T = len(lengths), sum(lengths)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(FLA_DEVICE, dtype)

    x = rand(T, D).requires_grad_()
    weight = rand(D, W).requires_grad_()
    b = rand(D).requires_grad_() if bias else None
    res = rand(T, D).requires_grad_() if residual else None
    history = rand(N, D, W - 1)
    if leaf == "cache":
        state = history.requires_grad_()
        h0 = torch.cat([history.new_zeros(N, D, 1), state], dim=2)
    else:
        state = h0 = torch.cat([history.new_zeros(N, D, 1), history], dim=2).requires_grad_()
    dy, d_final = rand(T, D), rand(N, D, W - 1)
    starts = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=FLA_DEVICE)
    tensors = zip(("dx", "dw", "db", "dr", f"d{leaf}"), (x, weight, b, res, state), strict=True)
    named = [(n, t) for n, t in tensors if t is not None]
    leaves = [t for _, t in named]

    ref_y, ref_final = reference(x, weight, b, activation, h0[..., 1:], starts)
    ref_y = ref_y + res if residual else ref_y
    ref_outs = (ref_y, ref_final) if final else (ref_y,)
    cotangents = (dy, d_final) if final else (dy,)
    ref_grads = torch.autograd.grad(ref_outs, leaves, cotangents)

    with exactfuse.get("causal_conv1d_fn").priority(["triton"]), causal_conv1d_fn_backward.priority(["triton"]):
        got = causal_conv1d(
            x, weight, b, activation=activation, query_start_loc=starts, initial_states=h0[..., 1:],
            return_final_states=final, residual=res,
        )  # fmt: skip
        got_outs = got if final else (got,)
        got_grads = torch.autograd.grad(got_outs, leaves, cotangents, allow_unused=True, materialize_grads=True)

    for name, r, g in zip(("y", "final_state")[: len(ref_outs)], ref_outs, got_outs, strict=True):
        assert r.shape == g.shape and r.dtype == g.dtype, name
        ratio = err_ratio(r, g)
        assert ratio < FLA_RATIO, f"{name}: error ratio {ratio:.3g}"
    for (name, _), r, g in zip(named, ref_grads, got_grads, strict=True):
        assert r.shape == g.shape, name
        ratio = err_ratio(r, g)
        assert ratio < FLA_RATIO, f"{name}: error ratio {ratio:.3g}"
    if leaf == "h0":
        d_h0 = got_grads[-1]
        assert torch.count_nonzero(d_h0[..., 0]) == 0, "d h0: column 0 is padding, its gradient zero"
        assert torch.count_nonzero(d_h0[..., 1:]) > 0


def run_cache_backward(B, T, D, W):
    run_initial_state_backward([T] * B, D, W, bias=True, residual=True, final=True)


def run_no_final_state(B, T, D, W, bias, residual, activation, dtype):
    run_initial_state_backward([T] * B, D, W, bias=bias, residual=residual, activation=activation, dtype=dtype)


def run_varlen(name, D):
    gen = torch.Generator().manual_seed(42)
    run_initial_state_backward(cut_lengths(name, gen, 4), D, 4, leaf="h0", gen=gen)


def run_dense(T, D):
    run_initial_state_backward([T], D, 4, leaf="h0")


def is_large(T, D) -> bool:  # what the interpreter does not run in seconds: GPU only
    return D >= 1024 or T >= 1024


SMALL_CACHE = [c for c in CACHE_BACKWARD if not is_large(c[1], c[2])]
LARGE_CACHE = [c for c in CACHE_BACKWARD if is_large(c[1], c[2])]
SMALL_VARLEN = [c for c in VARLEN if c[0] == "random-cut-256"]
LARGE_VARLEN = [c for c in VARLEN if c[0] != "random-cut-256"]


def big(rows, D):  # from 2^25 elements the float64 reference and both sets of gradients pass a worker's share
    return [pytest.mark.big_memory] if rows * D >= 2**25 else []


def cache_id(c):
    return f"B{c[0]}-T{c[1]}-D{c[2]}-W{c[3]}"


@pytest.mark.interpreter
@pytest.mark.parametrize("case", SMALL_CACHE, ids=cache_id)
def test_interpreter_fla_cache_backward(case):
    run_cache_backward(*case)


@pytest.mark.interpreter
@pytest.mark.parametrize("case", NO_FINAL_STATE, ids=lambda c: f"{cache_id(c)}-b{int(c[4])}-r{int(c[5])}-{c[6]}-{c[7]}")
def test_interpreter_fla_cache_backward_no_final_state(case):
    run_no_final_state(*case)


@pytest.mark.interpreter
@pytest.mark.parametrize("case", SMALL_VARLEN, ids=lambda c: f"{c[0]}-D{c[1]}")
def test_interpreter_fla_varlen_initial_state_backward_random(case):
    run_varlen(*case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", LARGE_CACHE, ids=cache_id)
def test_gpu_fla_cache_backward_large(case):
    run_cache_backward(*case)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=big(32 * 128 + 8192, c[1])) for c in LARGE_VARLEN], ids=lambda c: f"{c[0]}-D{c[1]}"
)
def test_gpu_fla_varlen_initial_state_backward_large(case):
    run_varlen(*case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [pytest.param(c, marks=big(*c)) for c in DENSE], ids=lambda c: f"T{c[0]}-D{c[1]}")
def test_gpu_fla_dense_initial_state_backward_large_nt(case):
    run_dense(*case)


@pytest.mark.gpu
def test_gpu_fla_initial_state_small_cases():
    """The interpreter's cases on the card (without the interpreter, those tests are skipped there)."""
    for case in SMALL_CACHE:
        run_cache_backward(*case)
    for case in NO_FINAL_STATE:
        run_no_final_state(*case)
    for case in SMALL_VARLEN:
        run_varlen(*case)
