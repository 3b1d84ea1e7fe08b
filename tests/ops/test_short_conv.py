"""short_conv: spec against a per-request loop, the kernel bit for bit, bad input, CUDA graphs, compile."""

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import exactfuse
from exactfuse.ops.conv import KERNELS, native, short_conv
from exactfuse.testing import CompileWatch, check_call, check_on_device, clone_args, collect_outputs, make_generator
from exactfuse.testing.cases.conv import make_state, short_conv_case
from exactfuse.utils import DTYPE_NAMES
from support.conv import one_layout

INTERP_DTYPES = [torch.float16, torch.float32]
INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT_VIEW[t.dtype])


def assert_bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    differ = bits(actual) != bits(expected)
    assert not differ.any(), f"{what}: {int(differ.sum())}/{differ.numel()} elements differ"


def interpreter_silu(conv: torch.Tensor) -> torch.Tensor:
    """SiLU as the Triton interpreter evaluates the kernel's ``div_rn(c, 1 + exp(-c))``: numpy, fp32."""
    c = conv.float().numpy()
    return torch.from_numpy(c / (np.float32(1) + np.exp(-c)))


def run(provider: str, case, op=short_conv):
    args, kwargs = clone_args(case.args, case.kwargs)
    op.run_provider(provider, *args, **kwargs)
    return args, kwargs


NAMES = list(short_conv.op.signature.parameters)


def split(args: tuple) -> tuple[list, dict]:
    """A positional case as the public API takes it: five tensors, then keywords."""
    named = dict(zip(NAMES, args, strict=True))
    named["mode"] = named.pop("conv_mode")
    return [named[n] for n in NAMES[:5]], {n: v for n, v in named.items() if n not in NAMES[:5]}


# --------------------------------------------------------------- the spec
def loop_reference(x, residual, state, weight, sid, mode, D, qsl, accepted, has_init, sql, tok, outer):
    """The spec read literally, one request at a time (spec §1.4-1.7)."""
    N, C = x.shape
    K = weight.shape[1]
    SL = (K - 1) * D
    L = tok.shape[0] if tok is not None else N
    phys = tok.tolist() if tok is not None else list(range(L))
    old, res_old = state.clone(), residual.clone()
    if mode == "decode":
        requests = [(r, 1) for r in range(L)]
    else:
        q = qsl.tolist()
        requests = [(q[r], q[r + 1] - q[r]) for r in range(len(q) - 1)]
    conv_out = torch.zeros(L, C, dtype=x.dtype)
    for r, (start, qlen) in enumerate(requests):
        s = int(sid[r])
        ok = s != 0
        init = ok and (has_init is None or mode == "spec" or bool(has_init[r]))
        off = min(max(int(accepted[r]) - 1, 0), sql - 1) if mode == "spec" else 0
        history = old[s, :, off : off + SL].T if init else torch.zeros(SL, C, dtype=x.dtype)
        hist = torch.cat([history, x[[phys[start + i] for i in range(qlen)]]])
        if ok or mode == "spec":
            for jj in range(qlen):
                acc = torch.zeros(C)
                for k in range(K):
                    acc = acc + weight[:, k].float() * hist[jj + D * k].float()
                conv_out[start + jj] = native.silu(acc.to(x.dtype)).to(x.dtype)
        if ok and mode == "spec":
            state[s, :, : SL + qlen - 1] = hist[1 : SL + qlen].T
        elif ok and qlen > 0:
            state[s, :, :SL] = hist[qlen : qlen + SL].T
    for t in range(L):
        p = phys[t]
        value = (res_old[p].float() + conv_out[t].float()).to(x.dtype)
        if outer is not None:
            value = (outer[p].float() + value.float()).to(x.dtype)
        residual[p] = value


@pytest.mark.parametrize("dtype", INTERP_DTYPES, ids=DTYPE_NAMES.get)
def test_native_equals_the_per_request_loop(dtype, monkeypatch):
    monkeypatch.setattr(native, "silu", interpreter_silu)  # one SiLU for both (shape-independent)
    for case in short_conv.cases("cpu", dtype, quick=True):
        n_args, n_kwargs = clone_args(case.args, case.kwargs)
        native.short_conv(*n_args, **n_kwargs)
        (x, residual, state, weight, sid), kw = split(clone_args(case.args, {})[0])
        loop_reference(
            x, residual, state, weight, sid, kw["mode"], kw["dilation"], kw.get("query_start_loc"),
            kw.get("num_accepted_tokens"), kw.get("has_initial_state"), kw.get("spec_query_len", 1),
            kw.get("token_indices"), kw.get("outer_residual"),
        )  # fmt: skip
        assert_bitwise(n_args[1], residual, f"{case.id} residual")
        assert_bitwise(n_args[2], state, f"{case.id} conv_state")


def test_native_is_the_unfused_eager_sequence():
    """One prefill sequence: ``residual.add_(silu(conv1d(hist)))`` then ``outer + residual`` in fp16."""
    gen = make_generator(3)
    case = short_conv_case("p", "prefill", (9,), C=24, K=3, D=2, dtype=torch.float32, device="cpu", gen=gen)
    (x, residual, state, weight, sid), kw = split(clone_args(case.args, {})[0])
    x, residual, weight = x.half(), residual.half(), weight.half()
    state, outer = state.half(), kw["outer_residual"].half()
    kw["outer_residual"] = outer
    expected_res = residual.clone()
    hist = torch.cat([state[int(sid[0]), :, :4], x.T], dim=1).float()  # has_initial_state[0] is True
    conv = F.conv1d(hist[None].double(), weight.double()[:, None, :], groups=24, dilation=2)[0].T
    expected_res.add_(F.silu(conv.float().half()))  # fp16 products are exact, so fp64 conv rounds as fp32 sums do
    expected = outer + expected_res
    native.short_conv(x, residual, state, weight, sid, kw.pop("mode"), **kw)
    assert_bitwise(residual, expected, "residual")


# -------------------------------------------------- the kernel, interpreter
@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", INTERP_DTYPES, ids=DTYPE_NAMES.get)
def test_interpreter_bitwise_every_case(dtype, monkeypatch):
    """Residual and every slot bit for bit against the spec with the interpreter's exp; the states also
    against the spec itself; slot 0 unchanged; the declared contract (``verify``) holds. One NaN-poisoned
    launch a case serves all four."""
    failures = []
    contract = short_conv.op.contract_for(dtype, "cpu")
    # every case once over the two dtypes: each in one state layout here, the other in the other dtype
    for case in one_layout(short_conv.cases("cpu", dtype), turn=INTERP_DTYPES.index(dtype)):
        assert short_conv.select(*case.args, **case.kwargs).name in ("native", "triton")
        assert short_conv.providers["triton"].accepts(*case.args, **case.kwargs) is True, case.id
        e_args, e_kwargs = run("native", case)
        with monkeypatch.context() as m:
            m.setattr(native, "silu", interpreter_silu)
            i_args, _ = run("native", case)
        t_args, t_kwargs = clone_args(case.args, case.kwargs)
        launch = functools.partial(short_conv.run_provider, "triton", *t_args, **t_kwargs)
        expected = collect_outputs(short_conv.op, None, e_args, e_kwargs)
        result = check_call(short_conv.op, launch, t_args, t_kwargs, expected, contract, compare=check_on_device)
        try:
            assert_bitwise(t_args[2], e_args[2], "conv_state vs native")
            assert_bitwise(t_args[2][0], case.args[2][0], "slot 0")
            assert_bitwise(t_args[1], i_args[1], "residual vs native with the interpreter's exp")
            assert result.passed, result.summary()
        except AssertionError as error:
            failures.append(f"{case.id}: {error}")
    assert not failures, "\n".join(failures)


@pytest.mark.interpreter
def test_interpreter_mixed_batch_through_token_maps(monkeypatch):
    """Spec, decode and prefill parts of one batch in sequence on shared tensors, rows interleaved."""
    monkeypatch.setattr(native, "silu", interpreter_silu)
    gen = make_generator(5)
    C, K, D, N = 80, 3, 2, 14
    kw = {"C": C, "K": K, "D": D, "dtype": torch.float16, "device": "cpu", "gen": gen}
    x = torch.randn(N, C).half()
    residual, outer = torch.randn(N, C).half(), torch.randn(N, C).half()
    state = make_state(16, C, (K - 1) * D + 2, "wc", torch.float16, "cpu", gen)
    weight = torch.randn(C, K).half()
    order = torch.randperm(N, generator=gen)
    parts = [("spec", (1, 2), {"accepted": (0, 1), "sql": 3}), ("decode", (), {"decodes": 2, "null": (1,)}),
             ("prefill", (0, 8, 1), {"null": (1,)})]  # fmt: skip
    calls, used, base = [], 0, 1
    for mode, lengths, extra in parts:
        case = short_conv_case("m", mode, lengths, extra_rows=0, **kw, **extra)
        L, R = case.args[0].shape[0], case.args[4].shape[0]
        kwargs = {**split(case.args)[1], "token_indices": order[used : used + L], "outer_residual": outer}
        kwargs["conv_mode"] = kwargs.pop("mode")  # run_provider takes the registered schema's names
        calls.append((torch.where(case.args[4] == 0, 0, torch.arange(base, base + R)).int(), kwargs))
        used, base = used + L, base + R
    assert used == N
    results = {}
    for provider in ("triton", "native"):
        res, st = residual.clone(), state.clone()
        for sid, kwargs in calls:
            short_conv.run_provider(provider, x, res, st, weight, sid, **kwargs)
        results[provider] = (res, st)
    assert_bitwise(results["triton"][0], results["native"][0], "residual")
    assert_bitwise(results["triton"][1], results["native"][1], "conv_state")


# ----------------------------------------------------------------- bad input
def _base(mode="prefill", **kw):
    gen = make_generator(1)
    extra = {"accepted": (1, 2), "sql": 3} if mode == "spec" else {}
    lengths = (2, 3) if mode != "decode" else ()
    return short_conv_case("e", mode, lengths, decodes=3, C=40, K=3, D=2, dtype=torch.float32, device="cpu",
                           gen=gen, slots=8, **extra, **kw)  # fmt: skip


def _edit(case, index=None, value=None, **kwargs):
    args, kw = split(clone_args(case.args, {})[0])
    if index is not None:
        args[index] = value
    kw.update(kwargs)
    return args, kw


def _bad_cases():
    p, s, d = _base(), _base("spec"), _base("decode")
    x = p.args[0]
    yield "x-1d", _edit(p, 0, x[:, 0]), "x must be 2-D"
    yield "residual-shape", _edit(p, 1, p.args[1][:-1]), "residual must have x's shape"
    yield "weight-shape", _edit(p, 3, p.args[3][:-1]), r"weight must be \[C, K\]"
    yield (
        "window-narrow",
        _edit(s, 2, s.args[2][:, :, :-1]),
        r"conv_state must be .*W >= \(K-1\)\*dilation \+ SQL-1 = 6",
    )
    yield "indices-int64", _edit(p, 4, p.args[4].long()), "state_indices must be int32, got torch.int64"
    yield "indices-float", _edit(p, 4, p.args[4].float()), "state_indices must be int32, got torch.float32"
    yield "dtype-mismatch", _edit(p, 1, p.args[1].half()), "residual must be float32, got torch.float16"
    yield "state-dtype", _edit(p, 2, p.args[2].half()), "conv_state must be float32"
    yield "prefill-no-qsl", _edit(p, query_start_loc=None), "query_start_loc is required"
    yield "prefill-no-init", _edit(p, has_initial_state=None), "has_initial_state is required"
    yield "spec-no-accepted", _edit(s, num_accepted_tokens=None), "num_accepted_tokens is required"
    yield (
        "index-ge-slots",
        _edit(p, 4, torch.tensor([1, 8], dtype=torch.int32)),
        r"state_indices must lie in \[0, slots = 8\)",
    )
    yield "decode-indices-count", _edit(d, 4, d.args[4][:2]), r"state_indices must be \[R\] = \[3\]"
    yield "token-index-ge-n", _edit(d, token_indices=torch.tensor([0, 1, 3])), r"token_indices must lie in \[0, N = 3\)"
    yield (
        "qsl-past-rows",
        _edit(p, query_start_loc=torch.tensor([0, 2, 9], dtype=torch.int32)),
        "query_start_loc must be",
    )
    yield (
        "spec-too-long",
        _edit(s, query_start_loc=torch.tensor([0, 1, 5], dtype=torch.int32)),
        "at most spec_query_len",
    )
    yield "mode", _edit(p, mode="chunked"), "mode must be one of"
    yield "dilation", _edit(p, dilation=0), "dilation must be an int >= 1"


BAD = {name: (args, message) for name, args, message in _bad_cases()}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_a_named_error_before_any_write(name):
    (args, kwargs), message = BAD[name]
    before = [a.clone() for a in args[1:3]]
    with pytest.raises((ValueError, TypeError), match="short_conv: .*" + message):
        short_conv(*args, **kwargs)
    assert_bitwise(args[1], before[0], "residual")
    assert_bitwise(args[2], before[1], "conv_state")


def test_keyword_only_api():
    args, kwargs = _edit(_base())
    with pytest.raises(TypeError):
        short_conv(*args, kwargs.pop("mode"), **kwargs)


def test_cost_counts_rows_and_windows():
    case = short_conv_case("c", "decode", decodes=4, C=8, K=4, D=3, dtype=torch.float16, device="meta",
                           gen=make_generator(0), slots=5)  # fmt: skip
    # 4 rows x 8 channels x 2 bytes x (x, residual twice, outer) + 4 windows x 8 x (9 read + 9 written) x 2 + weights
    assert short_conv.bytes_fn(*case.args, **case.kwargs) == 4 * 16 * 4 + 4 * 8 * 18 * 2 + 8 * 4 * 2


@pytest.mark.interpreter
def test_interpreter_warmup_runs_the_launcher():
    from exactfuse.ops.conv import warmup

    warmup.short_conv(torch.device("cpu"), torch.float16, channels=(24,), spec_query_lens=(2,))


# ------------------------------------------------------------------------ GPU
GPU_DTYPES = [torch.bfloat16, torch.float16]


MODE_GROUPS = ("decode", "spec", "prefill", "other")


def _mode_group(case_id: str) -> str:
    head = case_id.split("-", 1)[0]
    return head if head in MODE_GROUPS else "other"


@pytest.mark.gpu
@pytest.mark.parametrize("group", MODE_GROUPS)
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=DTYPE_NAMES.get)
def test_gpu_bitwise_every_case(dtype, group):
    """Every declared case at real sizes (C up to 10240): residual and all slots bit for bit, slot 0 kept.
    Split by mode so that the kernels' compiles spread over the test workers."""
    failures = []
    cases = [case for case in short_conv.iter_cases("cuda", dtype) if _mode_group(case.id) == group]
    assert cases, group
    for case in cases:
        assert short_conv.select(*case.args, **case.kwargs).name == "triton", case.id
        t_args, _ = run("triton", case)
        e_args, _ = run("native", case)
        for what, a, b in (("residual", t_args[1], e_args[1]), ("state", t_args[2], e_args[2]),
                           ("slot 0", t_args[2][0], case.args[2][0])):  # fmt: skip
            if not torch.equal(bits(a), bits(b)):
                failures.append(f"{case.id}: {what} differs in {int((bits(a) != bits(b)).sum())} elements")
    assert not failures, "\n".join(failures)


def _ple_batch(device, dtype, R=24, C=2048, seed=0):
    gen = make_generator(seed)
    kw = {"C": C, "K": 4, "D": 3, "dtype": dtype, "device": device, "gen": gen}
    return [
        short_conv_case("d", "decode", decodes=R, null=(R - 1,), **kw),
        short_conv_case("dw", "decode", decodes=R, layout="wc", **kw),  # a [slot, W, C] state: its own block
        short_conv_case("s", "spec", (1, 4, 4, 0), accepted=(1, 2, 4, 1), sql=4, padding=4, null=(1,), **kw),
        short_conv_case("p", "prefill", (37, 0, 5, 128), null=(1,), **kw),
    ]


@pytest.mark.gpu
@torch.no_grad()
def test_gpu_warmup_then_one_graph_of_all_modes_replays_as_eager():
    dtype = torch.bfloat16
    # the public warmup: it launches as an eager call does (the hook alone, through wrap_triton's higher-order
    # op, compiles other specializations than the ones a call looks up)
    exactfuse.warmup("short_conv", dtypes=(dtype,), channels=(2048,), kernel_sizes=(4,), dilations=(3,))
    watch = CompileWatch(*KERNELS)
    static = [split(clone_args(c.args, {})[0]) for c in _ple_batch("cuda", dtype)]
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args, kwargs in static:
            short_conv(*args, **kwargs)
    assert watch.new() == [[] for _ in KERNELS], f"compiled during capture:\n{watch}"
    for seed in (1, 2):
        fresh = _ple_batch("cuda", dtype, seed=seed)
        for (args, kwargs), case in zip(static, fresh, strict=True):
            ordered = [*args, *(kwargs["mode" if n == "conv_mode" else n] for n in NAMES[5:])]  # case.args' order
            for a, b in zip(ordered, case.args, strict=True):
                if isinstance(a, torch.Tensor):
                    a.copy_(b)
        graph.replay()
        for (args, _), case in zip(static, fresh, strict=True):
            e_args, _ = run("triton", case)
            assert torch.equal(bits(args[1]), bits(e_args[1])) and torch.equal(bits(args[2]), bits(e_args[2]))


@pytest.mark.gpu
def test_gpu_compile_dynamic_no_recompiles():
    """One dynamic trace serves every row count (decode) and request/row count (prefill), bit for bit."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")

    def step(x, residual, state, weight, sid, outer):
        short_conv(x, residual, state, weight, sid, mode="decode", dilation=3, outer_residual=outer)
        return residual

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend=counter)
    gen = make_generator(0)
    for R in (8, 7, 64, 333, 2, 1024):
        case = short_conv_case("d", "decode", decodes=R, null=(0,), C=2048, dtype=torch.bfloat16, device="cuda",
                               gen=gen, slots=1100, init=False)  # fmt: skip
        c_args, c_kw = split(clone_args(case.args, {})[0])
        compiled(*c_args, c_kw["outer_residual"])
        e_args, _ = run("native", case)
        assert torch.equal(bits(c_args[1]), bits(e_args[1])) and torch.equal(bits(c_args[2]), bits(e_args[2]))
    assert counter.frame_count == 1, f"{counter.frame_count} compiles"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=DTYPE_NAMES.get)
def test_gpu_probe_cudnn_conv1d_against_the_ascending_tap_sum(dtype, record_property):
    """Probe (reported, not a contract): does eager ``F.conv1d`` (cuDNN) equal the spec's fp32
    ascending-tap sum rounded once? The count of differing outputs is recorded as a test property."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    C, T, K, D = 10240, 4096, 4, 3
    x = torch.randn(1, C, T, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(C, 1, K, device="cuda", dtype=dtype, generator=gen)
    cudnn = F.conv1d(x, w, groups=C, dilation=D)
    acc = torch.zeros(1, C, T - (K - 1) * D, device="cuda")
    for k in range(K):
        acc = acc + w[:, 0, k].float()[None, :, None] * x[:, :, k * D : k * D + acc.shape[2]].float()
    differ = int((bits(cudnn) != bits(acc.to(dtype))).sum())
    record_property("cudnn_conv1d_differ", f"{differ}/{acc.numel()}")
    print(f"cuDNN conv1d vs ascending fp32 taps ({DTYPE_NAMES[dtype]}): {differ}/{acc.numel()} outputs differ")
    assert torch.isfinite(cudnn).all() and cudnn.shape == acc.shape
