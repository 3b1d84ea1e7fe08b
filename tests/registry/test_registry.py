"""The registry on throwaway ops: dispatch order, overrides, errors, signatures."""

import itertools

import pytest
import torch

from exactfuse.registry import OPS, Bitwise, NoProviderError, op
from exactfuse.registry.library import registers_opaque
from exactfuse.registry.platform import parse_priority_env

_names = itertools.count()


@pytest.fixture(autouse=True)
def _throwaway_ops_leave_the_registry():
    """Each test's ops leave ``OPS`` afterwards: other tests in the process list the declared ops."""
    before = set(OPS)
    yield
    for name in set(OPS) - before:
        OPS.pop(name)


def _declare(check=None):
    name = f"test_scale_{next(_names)}"

    def native(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
        return x * factor

    native.__name__ = name
    return op(native, contract=Bitwise(), check=check)


def _fast(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return x * factor + 0.0


def test_cpu_default_is_native_and_override_scopes():
    o = _declare()
    o.provider("fast", supported=True)(_fast)
    x = torch.ones(3)
    assert o.select(x).name == "native"
    with o.priority(["fast", "native"]):
        assert o.select(x).name == "fast"
    assert o.select(x).name == "native"


def test_supports_args_falls_through_to_next_provider():
    o = _declare()
    o.provider("fast", supports_args=lambda x, factor=2.0: x.numel() < 4)(_fast)
    with o.priority(["fast", "native"]):
        assert o.select(torch.ones(3)).name == "fast"
        assert o.select(torch.ones(8)).name == "native"


def test_unavailable_provider_is_skipped_and_error_names_arguments():
    o = _declare()
    o.provider("triton", supported=False)(_fast)
    with o.priority(["triton"]), pytest.raises(NoProviderError) as err:
        o(torch.ones(2, 5, dtype=torch.float16))
    msg = str(err.value)
    assert o.name in msg and "x=Tensor[2, 5] float16 cpu" in msg and "not available" in msg


def test_an_unavailable_provider_says_why():
    """A platform check returns the reason it fails, or False; either way a refusal says why (a False check
    by its name)."""

    def gpu_found() -> bool:
        return False

    o = _declare()
    o.provider("triton", supported=lambda: "it needs an sm_90 GPU")(_fast)
    o.provider("other", supported=gpu_found)(_fast)
    assert not o.providers["triton"].available and o.providers["triton"].unavailable_reason == "it needs an sm_90 GPU"
    assert o.providers["other"].accepts(torch.ones(3)) == "not available on this platform: gpu_found() is False"
    with o.priority(["triton", "other"]), pytest.raises(NoProviderError, match="triton: .*it needs an sm_90 GPU"):
        o(torch.ones(3))


def test_provider_signature_must_match_native():
    o = _declare()

    def wrong(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x

    with pytest.raises(TypeError, match="differs from the native spec"):
        o.provider("wrong")(wrong)


def test_unknown_provider_in_priority_is_an_error():
    o = _declare()
    with pytest.raises(ValueError, match="unknown providers"), o.priority(["nope"]):
        pass


def test_check_runs_before_dispatch():
    def check(x, factor=2.0):
        if x.dim() != 1:
            raise ValueError("x must be 1-D")

    o = _declare(check=check)
    with pytest.raises(ValueError, match="x must be 1-D"):
        o(torch.ones(2, 2))


def test_torch_op_is_registered_and_dispatches():
    o = _declare()
    out = o.torch_op(torch.ones(3), 3.0)
    assert torch.equal(out, torch.full((3,), 3.0))
    assert getattr(torch.ops.exactfuse, o.name) is o.torch_op


def test_duplicate_op_name_is_rejected():
    o = _declare()
    with pytest.raises(Exception, match="already"):
        op(o.native, contract=Bitwise())


def test_parse_priority_env():
    assert parse_priority_env("a=triton,native; b=native") == {"a": ("triton", "native"), "b": ("native",)}
    assert parse_priority_env("") == {}
    with pytest.raises(ValueError, match="EXACTFUSE_PRIORITY"):
        parse_priority_env("a")


def test_env_priority_applies(monkeypatch):
    from exactfuse.registry import platform

    o = _declare()
    o.provider("fast")(_fast)
    monkeypatch.setattr(platform, "env_priority", lambda: {o.name: ("fast",)})
    assert o.select(torch.ones(1)).name == "fast"


def _declare_mutating(compiler):
    """An op shaped like the later state-cache ops: optional tensor, in-place output."""
    name = f"test_accumulate_{next(_names)}"

    def native(x: torch.Tensor, acc: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        acc.add_(x if weight is None else x * weight)

    native.__name__ = name
    return op(native, contract=Bitwise(), mutates_args=("acc",), compiler=compiler)


@pytest.mark.parametrize("compiler", ["visible", "opaque"])
def test_mutating_op_with_optional_tensor(compiler):
    from torch.fx.experimental.proxy_tensor import make_fx

    o = _declare_mutating(compiler)
    x, acc, w = torch.randn(4), torch.zeros(4), torch.randn(4)
    torch.library.opcheck(o.torch_op, (x, acc.clone(), w))
    torch.library.opcheck(o.torch_op, (x, acc.clone(), None))
    o(x, acc, w)
    assert torch.equal(acc, x * w)

    def f(x, acc):
        o(x, acc)
        return acc

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    acc2 = torch.zeros(4)
    compiled(x, acc2)
    assert torch.equal(acc2, x)
    gm = make_fx(f, tracing_mode="fake")(x, torch.zeros(4))
    assert any(o.name in str(n.target) for n in gm.graph.nodes)


def test_traced_call_of_a_mutating_op_passes_every_argument_in_schema_order():
    """A mutating op's schema has no defaults up to its last mutated argument, and traced calls fill
    them in (registry/library.schema_signature says why)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    name = f"test_optional_state_{next(_names)}"

    def native(x: torch.Tensor, steps: int = 2, state: torch.Tensor | None = None) -> torch.Tensor:
        if state is not None:
            state.copy_(x)
        return x * steps

    native.__name__ = name
    o = op(native, contract=Bitwise(), mutates_args=("state",))
    assert "Tensor x, SymInt steps, Tensor(a2!)? state)" in str(o.torch_op.default._schema)  # no defaults up to `state`
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.ones(3)
    assert torch.equal(torch.compile(lambda x: o(x), backend=backend, dynamic=True, fullgraph=True)(x), 2 * x)
    (call,) = [n for n in graphs[0].graph.nodes if n.op == "call_function" and name in str(n.target)]
    # the filled default is the constant 2, not a SymInt, though o is a local of the compiled function
    assert call.args[1:] == (2, None)
    seen = []
    o.torch_op = lambda *args, **kwargs: seen.append((args, kwargs))
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.ones(3))
        o(x)
        o(x, state=x)
    assert seen == [((x, 2, None), {}), ((x, 2, x), {})]


@pytest.mark.parametrize("compiler", ["visible", "opaque"])
def test_eager_calls_launch_triton_kernels_directly(compiler):
    """On plain tensors, providers run with wrap_triton's higher-order-op dispatch off (a direct launch);
    under a trace (make_fx on fake tensors, through the visible op's triton_op body) it stays on, so
    kernels can become graph nodes."""
    from torch._library.triton import is_wrap_triton_enabled
    from torch.fx.experimental.proxy_tensor import make_fx

    seen = []
    name = f"test_direct_{next(_names)}"

    def native(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    native.__name__ = name
    o = op(native, contract=Bitwise(), compiler=compiler)

    @o.provider("probe", supported=True)
    def probe(x: torch.Tensor) -> torch.Tensor:
        seen.append(is_wrap_triton_enabled())
        return x + 1

    x = torch.ones(3)
    with o.priority(["probe"]):
        o(x)
        o.run_provider("probe", x)
        o.torch_op(x)
        assert seen == [False, False, False]
        seen.clear()
        make_fx(lambda t: o.torch_op(t), tracing_mode="fake")(x)
    # the visible op's body is traced with the higher-order op on; the opaque op's body is not traced
    # (under the Triton interpreter every op registers opaque: registry/library.py)
    assert seen == ([] if registers_opaque(o) else [True])
    assert is_wrap_triton_enabled()


def _declare_recording():
    """An op with a ``fast`` provider; ``calls`` lists the provider each eager call ran."""
    calls = []
    name = f"test_record_{next(_names)}"

    def native(x: torch.Tensor) -> torch.Tensor:
        calls.append("native")
        return x

    native.__name__ = name
    o = op(native, contract=Bitwise())

    @o.provider("fast")
    def fast(x: torch.Tensor) -> torch.Tensor:
        calls.append("fast")
        return x

    return o, calls


def test_priority_changes_the_provider_of_eager_calls_after_a_first_call():
    o, calls = _declare_recording()
    x = torch.ones(2)
    o(x)  # fills the per-device order cache
    with o.priority(["fast"]):
        o(x)
        with o.priority(["native", "fast"]):
            o(x)
        o(x)
    o(x)
    assert calls == ["native", "fast", "native", "fast", "native"]


def test_env_priority_holds_again_after_a_scoped_override(monkeypatch):
    from exactfuse.registry import platform

    o, calls = _declare_recording()
    monkeypatch.setattr(platform, "env_priority", lambda: {o.name: ("fast", "native")})
    x = torch.ones(2)
    o(x)
    with o.priority(["native"]):
        o(x)
    o(x)  # the EXACTFUSE_PRIORITY order, not the platform default
    assert calls == ["fast", "native", "fast"]


def test_eager_call_restores_the_wrap_triton_flag_when_check_or_provider_raises():
    from torch._library.triton import is_wrap_triton_enabled

    def check(x):
        if x.dim() != 1:
            raise ValueError("x must be 1-D")

    name = f"test_raise_{next(_names)}"

    def native(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("provider failed")

    native.__name__ = name
    o = op(native, contract=Bitwise(), check=check)
    with pytest.raises(ValueError, match="x must be 1-D"):
        o(torch.ones(2, 2))
    assert is_wrap_triton_enabled()
    with pytest.raises(RuntimeError, match="provider failed"):
        o(torch.ones(2))
    assert is_wrap_triton_enabled()


def test_tensor_subclass_and_device_type_of_arguments():
    from exactfuse.registry.op import _first_device_type, _has_tensor_subclass

    t = torch.ones(2)
    assert not _has_tensor_subclass((t, None, 3, 2.0, True, "tanh", torch.float16, [t]))
    assert _has_tensor_subclass((t, None, torch.nn.Parameter(t)))
    assert _first_device_type((None, 3, t), {}) == "cpu"
    assert _first_device_type((torch.ones(2, device="meta"), t), {}) == "meta"
    assert _first_device_type((None,), {"x": torch.ones(2, device="meta")}) == "meta"
    assert _first_device_type((None,), {}) == "cpu"


def test_a_contract_matrix_and_verify_hold_one_case_at_a_time():
    """``assert_contract_matrix`` and ``verify`` walk ``iter_cases``: each case is built when reached and
    dropped before the next is built, so a case set's memory is one case's, not the whole set's."""
    import gc
    import weakref

    from exactfuse.registry import Case
    from exactfuse.testing import assert_contract_matrix
    from exactfuse_cli.verify import verify_op

    o = _declare()
    o.provider("triton", supported=True)(_fast)
    refs, alive = [], []

    def tracked(i):
        x = torch.full((4,), float(i))
        refs.append(weakref.ref(x))
        return x

    @o.inputs
    def inputs(device, dtype, *, quick=False, seed=0):
        for i in range(3):
            gc.collect()
            alive.append(sum(r() is not None for r in refs))
            yield Case(f"c{i}", (tracked(i),))

    assert_contract_matrix(o, "cpu", torch.float32)
    assert alive == [0, 0, 0]
    alive.clear()
    assert verify_op(o, "triton", torch.float32, torch.device("cpu"), quick=True)["cases"] == 3
    assert alive == [0, 0, 0]
    assert [c.id for c in o.cases("cpu", torch.float32)] == ["c0", "c1", "c2"]
