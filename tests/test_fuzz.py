"""Property tests under the Triton interpreter: random shapes (0, 1, primes, wide rows), layouts (column
slices, transposed and expanded views), dtypes and special values. Each call through the registry with
the Triton provider first either meets the op's contract against its native spec, or runs native
because the provider declined, or raises a named error; never a crash, never a silent wrong result.
Bounded (few examples each) so CI stays quick.
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exactfuse
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER
from exactfuse.registry import NoProviderError

pytestmark = [
    pytest.mark.interpreter,
    # the native spec's std of an empty batch (rows = 0) warns; the result is still compared
    pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning"),
]

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
ROWS = st.sampled_from([0, 1, 2, 3, 7, 13, 64])
WIDTHS = st.sampled_from([1, 2, 3, 31, 37, 64, 257, 1000])
DTYPES = st.sampled_from([torch.float16, torch.float32])
LAYOUTS = st.sampled_from(["contiguous", "column-slice", "transposed", "expanded"])
SPECIALS = st.sampled_from(["none", "nan", "inf", "subnormal"])


def _tensor(rows: int, cols: int, dtype: torch.dtype, layout: str, special: str, seed: int) -> torch.Tensor:
    """``[rows, cols]`` in the given layout, with one special value when there is room for it."""
    gen = torch.Generator().manual_seed(seed)
    if layout == "column-slice":
        x = torch.randn(rows, cols + 5, generator=gen).to(dtype)[:, 2 : 2 + cols]
    elif layout == "transposed":
        x = torch.randn(cols, rows, generator=gen).to(dtype).t()
    elif layout == "expanded":
        x = torch.randn(1, cols, generator=gen).to(dtype).expand(rows, cols)
    else:
        x = torch.randn(rows, cols, generator=gen).to(dtype)
    if x.numel() and special != "none" and layout != "expanded":
        value = {"nan": float("nan"), "inf": float("inf"), "subnormal": torch.finfo(dtype).tiny / 4}[special]
        x[rows // 2, cols // 3] = value
    return x


def _check(name: str, args: tuple, dtype: torch.dtype) -> None:
    """Registry call with triton first: contract met against native, or a named error from both."""
    op = exactfuse.get(name)
    try:
        expected = op.native(*args)
    except (ValueError, TypeError, RuntimeError, IndexError) as native_error:
        errors = (ValueError, TypeError, RuntimeError, IndexError, NoProviderError)
        with pytest.raises(errors), op.priority(["triton", "native"]):
            op(*args)
        assert str(native_error)
        return
    with op.priority(["triton", "native"]), exactfuse.poison_outputs():
        provider = op.select(*args)
        out = op(*args)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    if provider.name == "native":
        assert op.providers["triton"].accepts(*args) is not True  # declined, with a reason
        return
    result = op.contract_for(dtype, "cpu").check(out, expected, args=args)
    assert result.passed, f"{name} {[tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]}: {result.summary()}"


@SETTINGS
@given(rows=ROWS, d=WIDTHS, dtype=DTYPES, layout=LAYOUTS, special=SPECIALS, seed=st.integers(0, 2**16))
def test_gated_activations(rows, d, dtype, layout, special, seed):
    x = _tensor(rows, 2 * d, dtype, layout, special, seed)
    _check("silu_and_mul", (x,), dtype)
    _check("gelu_and_mul", (x, "tanh"), dtype)


@SETTINGS
@given(
    rows=ROWS,
    n=WIDTHS,
    dtype=DTYPES,
    layout=LAYOUTS,
    special=SPECIALS,
    interleaved=st.booleans(),
    weights=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_moe_silu_and_mul(rows, n, dtype, layout, special, interleaved, weights, seed):
    gateup = _tensor(rows, 2 * n, dtype, layout, special, seed)
    w = torch.rand(rows, generator=torch.Generator().manual_seed(seed)) if weights else None
    _check("moe_silu_and_mul", (gateup, w, interleaved), dtype)


@SETTINGS
@given(rows=ROWS, d=WIDTHS, dtype=DTYPES, layout=LAYOUTS, special=SPECIALS, seed=st.integers(0, 2**16))
def test_gelu_and_mul_sparse(rows, d, dtype, layout, special, seed):
    x = _tensor(rows, 2 * d, dtype, layout, special, seed)
    _check("gelu_and_mul_sparse", (x, STD_MULTIPLIER, "tanh"), dtype)


@SETTINGS
@given(
    bad=st.sampled_from(["odd-width", "int-dtype", "0-d", "float-weights-shape"]),
    seed=st.integers(0, 2**16),
)
def test_bad_inputs_raise_named_errors(bad, seed):
    """Invalid arguments raise an error naming the argument before any kernel runs."""
    gen = torch.Generator().manual_seed(seed)
    if bad == "odd-width":
        call, arg = (lambda: exactfuse.silu_and_mul(torch.randn(3, 7, generator=gen))), "x"
    elif bad == "int-dtype":
        call, arg = (lambda: exactfuse.gelu_and_mul(torch.ones(3, 8, dtype=torch.int32))), "x"
    elif bad == "0-d":
        call, arg = (lambda: exactfuse.gelu_and_mul_sparse(torch.tensor(1.0), STD_MULTIPLIER, "tanh")), "x"
    else:
        call, arg = (lambda: exactfuse.moe_silu_and_mul(torch.randn(4, 8, generator=gen), torch.rand(3))), "row_weights"
    with pytest.raises((ValueError, TypeError), match=arg):
        call()


@SETTINGS
@given(
    M=st.sampled_from([0, 1, 2, 3, 5, 17]),
    K=st.sampled_from([64, 256]),
    N=st.sampled_from([8, 24, 64]),
    group_size=st.sampled_from([32, 64, -1]),
    symmetric=st.booleans(),
    act_order=st.booleans(),
    bias=st.booleans(),
    layout=st.sampled_from(["contiguous", "column-slice", "transposed"]),
    seed=st.integers(0, 2**16),
)
def test_w4a16_gemm(M, K, N, group_size, symmetric, act_order, bias, layout, seed):
    from exactfuse.ops.w4a16 import random_weights

    gen = torch.Generator().manual_seed(seed)
    w = random_weights(K, N, torch.float16, "cpu", gen, group_size=group_size, symmetric=symmetric, act_order=act_order)
    a = _tensor(M, K, torch.float16, layout, "none", seed)
    b = torch.randn(N, generator=gen).to(torch.float16) if bias else None
    _check("w4a16_gemm", (a, w.qweight, w.scales, w.zeros, w.perm, b, w.group_size), torch.float16)


@SETTINGS
@given(
    M=st.sampled_from([0, 1, 3, 17, 130]),
    K=st.sampled_from([8, 64, 256]),
    N=st.sampled_from([8, 24]),
    groups=st.sampled_from([1, 3, 40]),
    symmetric=st.booleans(),
    layout=st.sampled_from(["contiguous", "column-slice", "transposed"]),
    seed=st.integers(0, 2**16),
)
def test_w4a16_gemm_with_a_group_per_row(M, K, N, groups, symmetric, layout, seed):
    from exactfuse.testing.cases.w4a16 import row_group_case

    case = row_group_case("fuzz", M, K, N, groups, torch.float16, "cpu", torch.Generator().manual_seed(seed),
                          symmetric=symmetric)  # fmt: skip
    a = _tensor(M, K, torch.float16, layout, "none", seed)
    _check("w4a16_gemm", (a, *case.args[1:]), torch.float16)


# ------------------------------------------------------------------------ the conv family
def _check_case(name: str, case, special: str, where: str) -> None:
    """As :func:`_check` for an op that may mutate its arguments: every output (the result and the
    mutated state or residual) meets the contract against native's on a copy of the arguments.
    ``special`` goes into the middle element of argument ``where`` (``"state"``: the conv state)."""
    from exactfuse.testing.calls import clone_args, collect_outputs

    op = exactfuse.get(name)
    bound = op.signature.bind(*case.args, **case.kwargs)
    target = bound.arguments["conv_state" if where == "state" else where]
    if target is not None and target.numel() and special != "none":
        value = {"nan": float("nan"), "inf": float("inf"), "subnormal": torch.finfo(target.dtype).tiny / 4}[special]
        target[tuple(n // 2 for n in target.shape)] = value
    try:  # arguments the op's check rejects (the spec may be laxer): the call raises that error
        op.check(*case.args, **case.kwargs)
    except (ValueError, TypeError) as check_error:
        with pytest.raises(type(check_error), match=re.escape(str(check_error))), op.priority(["triton", "native"]):
            op(*case.args, **case.kwargs)
        return
    n_args, n_kwargs = clone_args(case.args, case.kwargs)
    try:
        expected = collect_outputs(op, op.native(*n_args, **n_kwargs), n_args, n_kwargs)
    except (ValueError, TypeError, RuntimeError, IndexError) as native_error:
        errors = (ValueError, TypeError, RuntimeError, IndexError, NoProviderError)
        with pytest.raises(errors), op.priority(["triton", "native"]):
            op(*case.args, **case.kwargs)
        assert str(native_error)
        return
    p_args, p_kwargs = clone_args(case.args, case.kwargs)
    with op.priority(["triton", "native"]), exactfuse.poison_outputs():
        provider = op.select(*p_args, **p_kwargs)
        actual = collect_outputs(op, op(*p_args, **p_kwargs), p_args, p_kwargs)
    if provider.name == "native":
        assert op.providers["triton"].accepts(*case.args, **case.kwargs) is not True
        return
    assert len(actual) == len(expected)
    contract = op.contract_for(actual[0].dtype, "cpu")
    for a, e in zip(actual, expected, strict=True):
        result = contract.check(a, e, args=p_args, kwargs=p_kwargs, op=op)
        assert result.passed, f"{name} {case.id}: {result.summary()}"


CONV_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
CHANNELS = st.sampled_from([1, 3, 31, 64, 130])
TAPS = st.sampled_from([(2, 1), (3, 2), (4, 1), (4, 3), (5, 2)])  # (K, dilation)
LENGTHS = st.lists(st.sampled_from([0, 1, 2, 5, 13]), min_size=0, max_size=4)
STATE_LAYOUTS = st.sampled_from(["cw", "wc"])
WHERE = st.sampled_from(["x", "state"])


@CONV_SETTINGS
@given(lengths=LENGTHS, C=CHANNELS, taps=TAPS, dtype=DTYPES, layout=STATE_LAYOUTS, bias=st.booleans(),
       silu=st.booleans(), state=st.booleans(), init=st.booleans(), pad=st.booleans(), special=SPECIALS,
       where=WHERE, seed=st.integers(0, 2**16))  # fmt: skip
def test_causal_conv1d(lengths, C, taps, dtype, layout, bias, silu, state, init, pad, special, where, seed):
    from exactfuse.testing.cases.conv import causal_case

    K, D = taps
    case = causal_case("fuzz", tuple(lengths), C=C, K=K, D=D, dtype=dtype, device=torch.device("cpu"),
                       gen=torch.Generator().manual_seed(seed), bias=bias, activation="silu" if silu else None,
                       state=state, layout=layout, pad=(0,) if pad and lengths and state else (),
                       init=init)  # fmt: skip
    _check_case("causal_conv1d", case, special, where)


@CONV_SETTINGS
@given(B=st.sampled_from([0, 1, 3, 7]), Lq=st.sampled_from([None, 1, 3]), spec=st.booleans(), C=CHANNELS,
       taps=TAPS, dtype=DTYPES, layout=STATE_LAYOUTS, bias=st.booleans(), pad=st.booleans(), special=SPECIALS,
       where=WHERE, seed=st.integers(0, 2**16))  # fmt: skip
def test_causal_conv1d_update(B, Lq, spec, C, taps, dtype, layout, bias, pad, special, where, seed):
    from exactfuse.testing.cases.conv import update_case

    K, D = taps
    case = update_case("fuzz", B, Lq, C=C, K=K, D=D, dtype=dtype, device=torch.device("cpu"),
                       gen=torch.Generator().manual_seed(seed), spec=spec and Lq is not None, layout=layout,
                       pad=(0,) if pad and B else (), bias=bias)  # fmt: skip
    _check_case("causal_conv1d_update", case, special, where)


@CONV_SETTINGS
@given(mode=st.sampled_from(["decode", "spec", "prefill"]), lengths=LENGTHS, rows=st.sampled_from([0, 1, 5]),
       C=CHANNELS, taps=TAPS, dtype=DTYPES, layout=STATE_LAYOUTS, outer=st.booleans(), init=st.booleans(),
       extra_rows=st.sampled_from([0, 3]), padding=st.sampled_from([0, 2]), special=SPECIALS, where=WHERE,
       seed=st.integers(0, 2**16))  # fmt: skip
def test_short_conv(mode, lengths, rows, C, taps, dtype, layout, outer, init, extra_rows, padding, special, where,
                    seed):  # fmt: skip
    from exactfuse.testing.cases.conv import short_conv_case

    K, D = taps
    sql = 3
    if mode == "spec":
        lengths = [min(n, sql) for n in lengths]
    gen = torch.Generator().manual_seed(seed)
    accepted = [int(torch.randint(1, sql + 1, (), generator=gen)) for _ in lengths] if mode == "spec" else None
    case = short_conv_case("fuzz", mode, tuple(lengths), C=C, K=K, D=D, dtype=dtype, device=torch.device("cpu"),
                           gen=gen, decodes=rows if mode == "decode" else 0, accepted=accepted, sql=sql,
                           padding=padding if mode != "decode" else 0, layout=layout, slots=12, outer=outer,
                           init=init, extra_rows=extra_rows)  # fmt: skip
    _check_case("short_conv", case, special, where)


# ------------------------------------------------------------------------ sparse paged attention
@CONV_SETTINGS
@given(rows=st.sampled_from([0, 1, 3, 9]), heads=st.sampled_from([(1, 1), (4, 1), (6, 2), (8, 8), (34, 2)]),
       D=st.sampled_from([16, 32, 24]), page=st.sampled_from([1, 3, 7, 16]), W=st.sampled_from([1, 5, 33]),
       dtype=st.sampled_from([torch.float16, torch.float32]), gate=st.sampled_from([None, "fused", "eager"]),
       counts=st.booleans(), padding=st.sampled_from([0, 2]), kv_halves=st.booleans(), special=SPECIALS,
       where=st.sampled_from(["q", "k_cache", "v_cache", "output_gate"]), seed=st.integers(0, 2**16))  # fmt: skip
def test_sparse_paged_attention(rows, heads, D, page, W, dtype, gate, counts, padding, kv_halves, special, where,
                                seed):  # fmt: skip
    from exactfuse.testing.cases.sparse_paged_attention import attention_case

    Hq, Hkv = heads
    gen = torch.Generator().manual_seed(seed)
    case = attention_case("fuzz", rows, Hq, Hkv, D, page, W, dtype=dtype, device=torch.device("cpu"), gen=gen,
                          reqs=max(1, rows // 2), pages_per_req=2, gate=gate, counts=counts, padding=padding,
                          kv_halves=kv_halves)  # fmt: skip
    if where == "output_gate" and gate is None:
        where = "q"
    _check_case("sparse_paged_attention", case, special, where)
