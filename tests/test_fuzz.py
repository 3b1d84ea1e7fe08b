"""Property tests under the Triton interpreter: random shapes (0, 1, primes, wide rows), layouts (column
slices, transposed and expanded views), dtypes and special values. Each call through the registry with
the Triton provider first either meets the op's contract against its native spec, or runs native
because the provider declined, or raises a named error; never a crash, never a silent wrong result.
Bounded (few examples each) so CI stays quick.
"""

from __future__ import annotations

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

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
