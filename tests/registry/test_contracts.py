import pytest
import torch

from exactfuse.registry.comparison import ordered_bits, ulp_distance
from exactfuse.registry.contracts import (
    Bitwise,
    PerOutput,
    Tolerance,
    Ulp,
    ZeroMaskTolerance,
    describe,
)

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
IDS = ["fp16", "bf16", "fp32"]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_ulp_distance_of_neighbours_is_one(dtype):
    x = torch.tensor([1.0, -1.0, 3.5, 1e-3, -2.0], dtype=dtype)
    up = torch.nextafter(x, torch.full_like(x, float("inf")))
    assert ulp_distance(x, up).tolist() == [1] * 5
    assert ulp_distance(up, x).tolist() == [1] * 5


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_ulp_distance_across_zero_and_specials(dtype):
    tiny = torch.finfo(dtype).smallest_normal
    a = torch.tensor([0.0, -0.0, float("nan"), float("nan"), float("inf")], dtype=dtype)
    b = torch.tensor([-0.0, 0.0, float("nan"), 1.0, float("inf")], dtype=dtype)
    d = ulp_distance(a, b)
    assert d[:3].tolist() == [0, 0, 0]
    assert d[3] >= 2**62
    assert d[4] == 0
    # ordered bits are monotonic through zero
    seq = torch.tensor([-tiny, -0.0, 0.0, tiny], dtype=dtype)
    assert torch.all(ordered_bits(seq)[1:] >= ordered_bits(seq)[:-1])


def test_bitwise_reports_count_and_location():
    e = torch.randn(4, 8, dtype=torch.float16)
    a = e.clone()
    a[2, 5] = torch.nextafter(a[2, 5], torch.tensor(float("inf"), dtype=torch.float16))
    res = Bitwise().check(a, e)
    assert not res.passed and res.mismatches == 1 and res.max_ulp == 1 and res.worst_index == (2, 5)
    assert "1/32 differ" in res.summary()
    assert Bitwise().check(e.clone(), e).passed


def test_bitwise_nan_positions_and_signed_zero():
    e = torch.tensor([float("nan"), 0.0, 1.0])
    assert Bitwise().check(torch.tensor([float("nan"), 0.0, 1.0]), e).passed
    assert not Bitwise().check(torch.tensor([1.0, 0.0, 1.0]), e).passed
    assert not Bitwise().check(torch.tensor([float("nan"), -0.0, 1.0]), e).passed


def test_bitwise_rejects_shape_or_dtype_mismatch():
    e = torch.ones(3)
    assert not Bitwise().check(torch.ones(4), e).passed
    assert not Bitwise().check(torch.ones(3, dtype=torch.float16), e).passed


def test_ulp_contract_boundary():
    e = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    a = torch.nextafter(e, torch.full_like(e, 10.0))
    assert Ulp(1).check(a, e).passed
    a2 = torch.nextafter(a, torch.full_like(a, 10.0))
    res = Ulp(1).check(a2, e)
    assert not res.passed and res.max_ulp == 2


def test_tolerance_table_and_override():
    e = torch.ones(10, dtype=torch.float16)
    assert Tolerance().check(e + 5e-4, e).passed
    assert not Tolerance().check(e + 5e-3, e).passed
    assert Tolerance(atol=1e-2).check(e + 5e-3, e).passed
    assert not Tolerance().check(torch.full_like(e, float("nan")), e).passed


def test_a_contract_is_described_with_the_numbers_it_checks():
    """What ``exactfuse list``, ``verify`` and ``info`` print: a tolerance with its atol and rtol for the dtype."""
    assert Tolerance().describe(torch.bfloat16) == "Tolerance(atol=0.001, rtol=0.016)"
    assert Tolerance(atol=1e-4).describe(torch.float32) == "Tolerance(atol=0.0001, rtol=1.3e-06)"
    zero_mask = ZeroMaskTolerance().describe(torch.float16)
    assert zero_mask == "Tolerance(atol=0.001, rtol=0.001) + zero mask up to d=128"
    per_output = PerOutput(("d_x", Tolerance()), ("d_w", Bitwise())).describe(torch.float16)
    assert per_output == "d_x: Tolerance(atol=0.001, rtol=0.001); d_w: Bitwise"
    assert Ulp(1).describe(torch.float16) == "Ulp(1)"
    both = describe(Tolerance(), [torch.float16, torch.float32])
    assert both == "fp16: Tolerance(atol=0.001, rtol=0.001), fp32: Tolerance(atol=1e-05, rtol=1.3e-06)"
    assert describe({torch.float16: Bitwise(), torch.bfloat16: Bitwise()}, [torch.float16, torch.bfloat16]) == "Bitwise"


# ------------------------------------------------------------------ Float64Relative
def _f64_check(actual, expected, reference):
    from exactfuse.registry.contracts import Float64Relative

    return Float64Relative(lambda: reference).check(actual, expected, args=())


def test_float64_relative_compares_special_positions_exactly():
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0], dtype=torch.float64)
    native = torch.tensor([1.0, float("nan"), float("inf"), 2.0], dtype=torch.float32)
    assert _f64_check(native.clone(), native, ref).passed
    for position, value in ((1, 0.5), (2, 3.0), (2, float("-inf"))):  # a special replaced
        wrong = native.clone()
        wrong[position] = value
        result = _f64_check(wrong, native, ref)
        assert not result.passed and "NaN or infinite" in result.detail
    wrong = native.clone()
    wrong[0] = float("nan")  # NaN where the reference is finite
    assert not _f64_check(wrong, native, ref).passed


def test_float64_relative_norms_over_finite_positions():
    ref = torch.tensor([1.0, 2.0, float("nan"), 4.0], dtype=torch.float64)
    native = torch.tensor([1.001, 2.0, float("nan"), 4.0])
    assert _f64_check(torch.tensor([1.0015, 2.0, float("nan"), 4.0]), native, ref).passed  # 1.5x native's error
    assert not _f64_check(torch.tensor([1.003, 2.0, float("nan"), 4.0]), native, ref).passed  # 3x


def test_float64_relative_overflow_like_native_passes():
    """native infinite where the float64 reference is finite (fp16 overflow): the same overflow passes"""
    ref = torch.tensor([1.0, 70000.0], dtype=torch.float64)
    native = torch.tensor([1.0, float("inf")], dtype=torch.float16)
    assert _f64_check(native.clone(), native, ref).passed


@pytest.mark.parametrize("contract", [Bitwise(), Ulp(1), Ulp(3), Tolerance()], ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_a_check_in_chunks_agrees_with_one_chunk(contract, dtype):
    """The statistics merged over chunks of 7 elements: those of the whole output in one chunk."""
    gen = torch.Generator().manual_seed(1)
    expected = torch.randn((13, 17), generator=gen).to(dtype)
    actual = expected.clone()
    flat = actual.view(-1)
    flat[3] = torch.nextafter(flat[3], torch.tensor(float("inf"), dtype=dtype))
    flat[40] = torch.nextafter(torch.nextafter(flat[40], flat[40] * 2), flat[40] * 4)
    flat[50] = flat[50] * 1.5
    flat[60], expected.view(-1)[60] = float("nan"), float("nan")
    expected.view(-1)[70], flat[70] = 0.0, -0.0
    want = contract._measure(actual, expected, chunk=actual.numel())
    got = contract._measure(actual, expected, chunk=7)
    assert (got.passed, got.mismatches, got.max_ulp) == (want.passed, want.mismatches, want.max_ulp)
    assert got.max_abs_err == pytest.approx(want.max_abs_err) and got.worst_index == want.worst_index
    assert contract._measure(expected, expected.clone(), chunk=7).passed


def test_float64_relative_in_chunks_agrees_with_one_chunk(monkeypatch):
    """The norms summed over chunks of 3 elements, the specials counted and the worst element found across
    them: the result of one chunk."""
    from exactfuse.registry import comparison

    gen = torch.Generator().manual_seed(2)
    ref = torch.randn(40, dtype=torch.float64, generator=gen)
    ref[7], ref[20] = float("inf"), float("nan")
    native = ref.float()
    actual = native.clone()
    actual[11] += 1e-3
    actual[20] = 0.5  # a special the output does not reproduce
    whole = _f64_check(actual, native, ref)
    monkeypatch.setattr(comparison, "CHUNK", 3)
    chunked = _f64_check(actual, native, ref)
    assert (chunked.passed, chunked.mismatches, chunked.worst_index) == (whole.passed, whole.mismatches, (20,))
    assert chunked.worst_index == whole.worst_index and chunked.max_abs_err == whole.max_abs_err == float("inf")
    assert chunked.extra["rel_err"] == pytest.approx(whole.extra["rel_err"], rel=1e-12)
    assert chunked.extra["native_rel_err"] == pytest.approx(whole.extra["native_rel_err"], rel=1e-12)
