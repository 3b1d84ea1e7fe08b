"""causal_conv1d / causal_conv1d_update: the spec against Dao's definition, the kernel bit for bit, layers, the
warmups."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from exactfuse.layers.conv import CausalConv1d, ShortConv, allocate_conv_state
from exactfuse.ops import fastmath
from exactfuse.ops.conv import causal_conv1d, causal_conv1d_fn, causal_conv1d_update, native
from exactfuse.testing import check_provider, clone_args, make_generator
from exactfuse.utils import DTYPE_NAMES

INTERP_DTYPES = [torch.float16, torch.float32]
INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
OPS = {"causal_conv1d": causal_conv1d, "causal_conv1d_update": causal_conv1d_update}


def bits(t):
    return t.contiguous().view(INT_VIEW[t.dtype])


def interpreter_silu(conv):
    c = conv.float().numpy()
    return torch.from_numpy(c / (np.float32(1) + np.exp(-c)))


def test_native_one_sequence_is_conv1d_then_silu():
    """Without a state: eager ``silu(conv1d(x, padding=K-1)[:T] + bias)`` (fp64 conv of fp16 operands:
    exact products, one rounding, as the fp32 ascending sum is for K <= 4 taps of this size)."""
    gen = make_generator(0)
    T, C, K = 17, 12, 4
    x, w, b = (torch.randn(s, generator=gen).half() for s in ((T, C), (C, K), (C,)))
    ref = F.conv1d(x.T[None].double(), w.double()[:, None], b.double(), padding=K - 1, groups=C)[0, :, :T]
    expected = F.silu(ref.T.float().half())
    out = native.causal_conv1d(x, w, b)
    assert torch.equal(bits(out), bits(expected))


def test_native_update_shifts_like_dao():
    gen = make_generator(1)
    B, C, K = 3, 8, 4
    x, w = torch.randn(B, C, generator=gen), torch.randn(C, K, generator=gen)
    state = torch.randn(B, C, K - 1, generator=gen)
    new = torch.cat([state, x[:, :, None]], dim=2)
    out = native.causal_conv1d_update(x, state, w, None, "silu", 1, None, None, -1)
    assert torch.equal(state, new[:, :, 1:])
    acc = torch.zeros(B, C)
    for k in range(K):
        acc = acc + w[:, k] * new[:, :, k]
    assert torch.equal(out, F.silu(acc))


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", INTERP_DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("name", list(OPS))
def test_interpreter_bitwise_every_case(name, dtype, monkeypatch):
    op = OPS[name]
    failures = []
    for case in op.cases("cpu", dtype):
        t_args, t_kw = clone_args(case.args, case.kwargs)
        out = op.run_provider("triton", *t_args, **t_kw)
        with monkeypatch.context() as m:
            m.setattr(native, "silu", interpreter_silu)
            e_args, e_kw = clone_args(case.args, case.kwargs)
            expected = op.run_provider("native", *e_args, **e_kw)
        names = list(op.op.signature.parameters)
        state = dict(zip(names, t_args, strict=True))["conv_state"]
        e_state = dict(zip(names, e_args, strict=True))["conv_state"]
        ok = torch.equal(bits(out), bits(expected))
        ok &= state is None or torch.equal(bits(state), bits(e_state))
        if not ok or not check_provider(op.op, "triton", case).passed:
            failures.append(case.id)
    assert not failures, failures


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", INTERP_DTYPES, ids=DTYPE_NAMES.get)
def test_interpreter_stateless_prefill_is_one_launch_bit_for_bit_at_every_boundary(dtype, monkeypatch):
    """Without a state the lean kernel takes every tile of its 8-row runs (``launch.lean_takes_every_tile``):
    requests of 1 to 19 rows and an empty one, so boundaries fall inside tiles, at their ends and two in one
    tile; rows past the last request; L not a multiple of 8. One launch, and every output the spec's bits."""
    import itertools

    from exactfuse.ops.conv import launch

    gen = make_generator(5)
    lengths = [1, 2, 0, 3, 5, 9, 17, 8, 19, 4]
    qsl = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    N, C, K = int(qsl[-1]) + 3, 48, 4
    x, w, b = (torch.randn(s, generator=gen).to(dtype) for s in ((N, C), (C, K), (C,)))
    launched = []
    real = torch.library.wrap_triton

    def recording(kernel):
        launched.append(kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__)
        return real(kernel)

    with monkeypatch.context() as m:
        m.setattr(torch.library, "wrap_triton", recording)
        out = causal_conv1d.run_provider("triton", x, w, b, "silu", 1, None, qsl)
    assert launch.lean_takes_every_tile(False, launch.heuristics.conv_config(C, K - 1, "prefill"))
    assert launched == ["conv_lean_kernel"], launched
    with monkeypatch.context() as m:
        m.setattr(native, "silu", interpreter_silu)
        expected = causal_conv1d.run_provider("native", x, w, b, "silu", 1, None, qsl)
    assert torch.equal(bits(out), bits(expected))
    assert not out[-3:].any()  # rows past the last request: zero


def test_pad_slot_rows_are_zero_and_their_state_untouched():
    gen = make_generator(2)
    C, K = 16, 3
    x, w = torch.randn(6, C, generator=gen), torch.randn(C, K, generator=gen)
    state = torch.randn(4, C, K - 1, generator=gen)
    before = state.clone()
    qsl = torch.tensor([0, 2, 6], dtype=torch.int32)
    sid = torch.tensor([-1, 3], dtype=torch.int32)
    out = causal_conv1d(x, w, conv_state=state, query_start_loc=qsl, state_indices=sid)
    assert torch.equal(out[:2], torch.zeros(2, C)) and torch.equal(state[:3], before[:3])
    assert torch.equal(state[3], x[4:].T)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x, w, s: causal_conv1d(x, w, state_indices=torch.zeros(1, dtype=torch.int32)), "needs a conv_state"),
        (lambda x, w, s: causal_conv1d(x, w, activation="gelu"), "activation must be None or 'silu'"),
        (lambda x, w, s: causal_conv1d_update(x, s[:, :, :1], w, dilation=2), r"W >= \(K-1\)\*dilation"),
        (
            lambda x, w, s: causal_conv1d_update(x, s, w, state_indices=torch.tensor([0, 9], dtype=torch.int32)[:2]),
            "state_indices must lie in",
        ),
    ],
)
def test_bad_input_is_a_named_error(call, message):
    x, w, s = torch.randn(2, 8), torch.randn(8, 3), torch.randn(3, 8, 2)
    before = s.clone()
    with pytest.raises((ValueError, TypeError), match=message):
        call(x, w, s)
    assert torch.equal(s, before)


def test_layers_call_the_ops():
    torch.manual_seed(0)
    layer = ShortConv(16, 4, dilation=2)
    state = allocate_conv_state(3, 16, layer.state_len, torch.float32, "wc", "cpu")
    assert state.shape == (3, 16, 6) and state.stride(2) == 16
    x, res, outer = torch.randn(2, 16), torch.randn(2, 16), torch.randn(2, 16)
    sid = torch.tensor([1, 2], dtype=torch.int32)
    expected_res, expected_state = res.clone(), state.clone()
    native.short_conv(x, expected_res, expected_state, layer.weight.detach(), sid, "decode", 2, outer_residual=outer)
    with torch.no_grad():
        got = layer(x, res, state, sid, mode="decode", outer_residual=outer)
    assert got is res and torch.equal(res, expected_res) and torch.equal(state, expected_state)
    conv = CausalConv1d(16, 4)
    with torch.no_grad():
        y = conv(torch.randn(5, 16))
        z = conv.step(torch.randn(2, 16), allocate_conv_state(2, 16, 3, torch.float32, "cw", "cpu"))
    assert y.shape == (5, 16) and z.shape == (2, 16)
    with pytest.raises(ValueError, match="layout must be"):
        allocate_conv_state(1, 2, 3, torch.float32, "sd", "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("name", list(OPS))
def test_gpu_bitwise_every_case(name, dtype):
    op = OPS[name]
    failures = [c.id for c in op.iter_cases("cuda", dtype) if not check_provider(op.op, "triton", c).passed]
    assert not failures, failures


def assert_rows_of_a_long_call(case, margin: int) -> None:
    """A two-request ``causal_conv1d`` call (``causal_case``: slot cache, the second request reading its
    history) checked against native on slices, so that the check costs little whatever the call's size: the
    first request's first ``margin`` rows (native on them), its last ``margin`` rows and its slot's new window
    (native on those rows and the ``SL`` before them, with the slot's history unread), all of the second
    request and its slot (native on it alone), the other slots untouched; outputs and states bit for bit."""
    kw = causal_conv1d.op.signature.bind(*case.args, **case.kwargs).arguments
    x, weight, bias = kw["x"], kw["weight"], kw["bias"]
    SL = (weight.shape[1] - 1) * kw.get("dilation", 1)
    (L1, T), sid, hinit = kw["query_start_loc"][1:].tolist(), kw["state_indices"], kw["has_initial_state"]
    args, kwargs = clone_args(case.args, case.kwargs)
    out = causal_conv1d.run_provider("triton", *args, **kwargs)
    state = causal_conv1d.op.signature.bind(*args, **kwargs).arguments["conv_state"]  # written in place
    common = {"activation": kw.get("activation", "silu"), "dilation": kw.get("dilation", 1)}

    def native_rows(rows, slot, init, history_read):
        starts = torch.tensor([0, rows.stop - rows.start], dtype=torch.int32, device=x.device)
        flags = torch.tensor([history_read], device=x.device) if init else None
        spec_state = kw["conv_state"].clone()
        y = causal_conv1d.native(x[rows], weight, bias, conv_state=spec_state, query_start_loc=starts,
                                 state_indices=sid[slot : slot + 1], has_initial_state=flags, **common)  # fmt: skip
        return y, spec_state

    checks = []
    head, _ = native_rows(slice(0, margin), 0, True, bool(hinit[0]))
    checks.append(("first request, first rows", out[:margin], head))
    tail, tail_state = native_rows(slice(L1 - margin - SL, L1), 0, True, False)
    checks.append(("first request, last rows", out[L1 - margin : L1], tail[SL:]))
    checks.append(("first request's slot", state[sid[0]], tail_state[sid[0]]))
    second, second_state = native_rows(slice(L1, T), 1, True, bool(hinit[1]))
    checks.append(("second request", out[L1:], second))
    checks.append(("second request's slot", state[sid[1]], second_state[sid[1]]))
    others = [s for s in range(state.shape[0]) if s not in sid.tolist()]
    checks.append(("other slots", state[others], kw["conv_state"][others]))
    failed = [what for what, got, want in checks if not torch.equal(bits(got), bits(want))]
    assert not failed, failed


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", INTERP_DTYPES, ids=DTYPE_NAMES.get)
@torch.no_grad()
def test_interpreter_rows_of_a_long_call_are_checked_by_slices(dtype, monkeypatch):
    """The slice check the int64-offset test runs at 2^31 elements, on a call the interpreter runs whole
    (without the SiLU, whose CPU exp is not the interpreter's): it passes on the kernel's result, the kernel's
    result is native's on the whole call, and a wrong row of either request or a wrong slot fails it."""
    from exactfuse.testing.cases.conv import causal_case

    case = causal_case("long", (150, 40), C=16, K=4, D=2, dtype=dtype, device=torch.device("cpu"),
                       gen=make_generator(3), activation=None)  # fmt: skip
    assert_rows_of_a_long_call(case, margin=8)
    whole_args, whole_kwargs = clone_args(case.args, case.kwargs)
    whole = causal_conv1d.native(*whole_args, **whole_kwargs)
    out = causal_conv1d.run_provider("triton", *clone_args(case.args, case.kwargs)[0], **case.kwargs)
    assert torch.equal(bits(out), bits(whole))
    kernel = causal_conv1d.run_provider
    for where, spoil in (("second request", lambda out, args: out[-1, 3].add_(1)),
                         ("first request, last rows", lambda out, args: out[149, 0].add_(1)),
                         ("first request's slot", lambda out, args: args[5][args[7][0]].add_(1))):  # fmt: skip

        def spoiled(name, *args, spoil=spoil, **kwargs):
            out = kernel(name, *args, **kwargs)
            spoil(out, args)
            return out

        monkeypatch.setattr(causal_conv1d, "run_provider", spoiled)
        with pytest.raises(AssertionError, match=where):
            assert_rows_of_a_long_call(case, margin=8)


@pytest.mark.gpu
@pytest.mark.big_memory
@torch.no_grad()
def test_gpu_int64_offsets():
    """More than 2^31 elements in x and the output (two sequences, the second ending past the int32 range;
    a state read and written): bit for bit against native where the call reads and writes past 2^31
    elements and at its start (native on slices: ``assert_rows_of_a_long_call``)."""
    from exactfuse.testing.cases.conv import causal_case

    C = 4096
    T = 2**31 // C + 37
    case = causal_case("int64", (T - 5000, 5000), C=C, K=4, D=1, dtype=torch.bfloat16, device=torch.device("cuda"),
                       gen=make_generator(3))  # fmt: skip
    assert case.args[0].numel() >= 2**31
    assert_rows_of_a_long_call(case, margin=64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@torch.no_grad()
def test_gpu_silu_bitwise_on_every_conv_value(dtype):
    """Every 16-bit value as the conv's output, through the kernels' SiLU (the formula fastmath proved for
    the dtype) against the spec, bit for bit with NaN payloads aside: prefill with one tap of weight 1 (the
    sum is the input) over one sequence (the lean tiles) and over 16 one-row requests (the fixup launch),
    and the decode step with taps (0, 1) over a zero state."""
    x = fastmath.all_inputs(dtype, "cuda").view(16, 4096)
    ones = torch.ones(4096, 1, dtype=dtype, device="cuda")
    failures = []
    for what, qsl in (("one sequence", None), ("16 requests", torch.arange(17, dtype=torch.int32, device="cuda"))):
        out = causal_conv1d_fn.run_provider("triton", x, ones, None, "silu", 1, qsl)
        if (n := int(fastmath.differing(out, causal_conv1d_fn.native(x, ones, None, "silu", 1, qsl)).sum())) > 0:
            failures.append(f"prefill, {what}: {n} of 65536 differ")
    taps = torch.tensor([0.0, 1.0], dtype=dtype, device="cuda").repeat(4096, 1)
    state = torch.zeros(16, 4096, 1, dtype=dtype, device="cuda")
    out = causal_conv1d_update.run_provider("triton", x, state.clone(), taps, None, "silu")
    if (n := int(fastmath.differing(out, causal_conv1d_update.native(x, state.clone(), taps, None, "silu")).sum())) > 0:
        failures.append(f"decode: {n} of 65536 differ")
    assert fastmath.chosen_formula("silu", dtype, x.device) == fastmath.CANDIDATES["silu", dtype][0]
    assert not failures, failures


def test_causal_conv1d_warmup_compiles_seq_idx_only_when_asked(monkeypatch):
    """The default warmup launches stay as they are; ``packed=(False, True)`` adds the stateless
    ``seq_idx`` launch per (C, K, D, bias, activation)."""
    from exactfuse.ops.conv import warmup

    calls = []
    names = list(causal_conv1d.op.signature.parameters)
    record = lambda *a: calls.append(dict(zip(names, a, strict=True)))  # noqa: E731
    monkeypatch.setattr(warmup.launch, "causal_conv1d_triton", record)

    def launches(**options):
        calls.clear()
        warmup.causal_conv1d(torch.device("meta"), torch.float16, channels=(8,), **options)
        return [(c["conv_state"] is not None, c["has_initial_state"] is not None, c["seq_idx"] is not None,
                 c["bias"] is not None, c["activation"]) for c in calls]  # fmt: skip

    default = launches()
    assert not any(seq for _, _, seq, _, _ in default) and len(default) == 2 * 2 * 2 * 3
    packed = launches(packed=(False, True))
    assert [c for c in packed if not c[2]] == default
    assert {c for c in packed if c[2]} == {(False, False, True, b, a) for b in (True, False) for a in ("silu", None)}


def test_causal_warmups_compile_fp32_weights_only_when_asked(monkeypatch):
    """``fp32_weights=(False, True)`` repeats each default launch with fp32 weight and bias; the default
    launches are unchanged, and fp32 x adds nothing."""
    from exactfuse.ops.conv import warmup

    for op, hook, launcher in (
        (causal_conv1d, warmup.causal_conv1d, "causal_conv1d_triton"),
        (causal_conv1d_update, warmup.causal_conv1d_update, "causal_conv1d_update_triton"),
    ):
        calls = []
        names = list(op.op.signature.parameters)
        record = lambda *a, names=names, calls=calls: calls.append(dict(zip(names, a, strict=True)))  # noqa: E731
        monkeypatch.setattr(warmup.launch, launcher, record)

        def weights(dtype, hook=hook, calls=calls, **options):
            calls.clear()
            hook(torch.device("meta"), dtype, channels=(8,), **options)
            return [c["weight"].dtype for c in calls]

        default = weights(torch.float16)
        assert set(default) == {torch.float16}
        both = weights(torch.float16, fp32_weights=(False, True))
        assert both == default + [torch.float32] * len(default)
        assert weights(torch.float32, fp32_weights=(False, True)) == weights(torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=DTYPE_NAMES.get)
def test_gpu_seq_idx_bitwise(dtype):
    """The declared ``seq_idx`` cases (packed sequences, padding, K 3 and 4, dilation 2, one row of three
    sequences): the Triton output bit for bit the native spec's. (The fp32-weight ``seq_idx`` case is
    :func:`test_gpu_fp32_weight_bitwise`'s.)"""
    from exactfuse.testing import check_provider

    cases = [c for c in causal_conv1d.iter_cases("cuda", dtype) if c.id.startswith("seq-idx")]
    assert len(cases) == 3
    failures = [c.id for c in cases if not check_provider(causal_conv1d.op, "triton", c).passed]
    assert not failures, failures


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("name", ["causal_conv1d", "causal_conv1d_update"])
def test_gpu_fp32_weight_bitwise(name, dtype):
    """The declared fp32-weight cases (varlen with states, packed, decode, speculative): the Triton output
    and state bit for bit the native spec's."""
    from exactfuse.testing import check_provider

    op = {"causal_conv1d": causal_conv1d, "causal_conv1d_update": causal_conv1d_update}[name]
    cases = [c for c in op.iter_cases("cuda", dtype) if "fp32-weight" in c.id]
    assert cases
    failures = [c.id for c in cases if not check_provider(op.op, "triton", c).passed]
    assert not failures, failures
