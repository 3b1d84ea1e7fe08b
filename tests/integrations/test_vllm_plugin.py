"""exactfuse's vLLM plugin (exactfuse.integrations.vllm) against a small stand-in of the vLLM module surface
it touches (monkeypatched into sys.modules), so the registration logic runs without vLLM installed. The
engine itself runs on a CUDA machine (scripts/gpu/vllm_e2e.py)."""

from __future__ import annotations

import subprocess
import sys
import types
import typing

import pytest
import torch
import torch.nn.functional as F

import exactfuse
from exactfuse.integrations import vllm as plugin


# ------------------------------------------------------------------------------------ stub vLLM
class StubCustomOp(torch.nn.Module):
    """The parts of vLLM's CustomOp the plugin relies on: class-name lookup of out-of-tree replacements in
    ``__new__`` and ``register_oot`` (which names the class after the replaced one)."""

    registry: typing.ClassVar[dict] = {}

    def __new__(cls, *args, **kwargs):
        return super().__new__(StubCustomOp.registry.get(cls.__name__, cls))

    def __init__(self, *, enforce_enable: bool = False, compile_native: bool = False):
        super().__init__()
        self.compile_native = compile_native

    def forward(self, x):
        return self.forward_cuda(x)

    @classmethod
    def register_oot(cls, op_cls=None, name=None):
        assert name not in StubCustomOp.registry, f"Duplicate op name: {name}"
        op_cls.name = name
        StubCustomOp.registry[name] = op_cls
        return op_cls


class SiluAndMul(StubCustomOp):
    name = "silu_and_mul"

    def __init__(self, *, compile_native: bool = True):
        raise AssertionError("vLLM's __init__ binds its compiled op; the replacement must not run it")

    @staticmethod
    def forward_native(x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class GeluAndMul(StubCustomOp):
    name = "gelu_and_mul"

    def __init__(self, approximate: str = "none"):
        raise AssertionError("vLLM's __init__ binds its compiled op; the replacement must not run it")

    def forward_native(self, x):
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=self.approximate) * x[..., d:]


class MPLinearKernel:
    def __init__(self, c, w_q_param_name, w_s_param_name, w_zp_param_name=None, w_gidx_param_name=None):
        self.config, self.w_q_name, self.w_s_name, self.w_gidx_name = (
            c,
            w_q_param_name,
            w_s_param_name,
            w_gidx_param_name,
        )


def _original_conv(*args, **kwargs):
    return ("vllm", args, kwargs)


@pytest.fixture
def vllm_stub(monkeypatch):
    """Install the stub modules; yields a namespace with the pieces tests inspect."""
    StubCustomOp.registry = {}
    cuda = types.SimpleNamespace(is_cuda=lambda: True)
    enum = types.SimpleNamespace(CUDA="cuda")
    kernels = {"cuda": [type("MarlinLinearKernel", (), {})]}
    mods = {
        "vllm": {},
        "vllm.platforms": {"current_platform": cuda, "PlatformEnum": enum},
        "vllm.model_executor": {},
        "vllm.model_executor.custom_op": {"CustomOp": StubCustomOp, "op_registry_oot": StubCustomOp.registry},
        "vllm.model_executor.layers": {},
        "vllm.model_executor.layers.activation": {"SiluAndMul": SiluAndMul, "GeluAndMul": GeluAndMul},
        "vllm.model_executor.kernels": {},
        "vllm.model_executor.kernels.linear": {"_POSSIBLE_KERNELS": kernels},
        "vllm.model_executor.kernels.linear.mixed_precision": {},
        "vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel": {"MPLinearKernel": MPLinearKernel},
        "vllm.model_executor.layers.quantization": {},
        "vllm.model_executor.layers.quantization.utils": {"replace_parameter": lambda m, n, p: setattr(m, n, p)},
        "vllm.model_executor.parameter": {"permute_param_layout_": lambda p, **kw: p},
        "vllm.model_executor.layers.mamba": {},
    }
    for name in plugin.CONV_MODULES:
        mods[name] = {"causal_conv1d_fn": _original_conv, "causal_conv1d_update": _original_conv}
    for name, attrs in mods.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    # the stub's op registry is the module's dict object, so register_oot and the plugin see one registry
    sys.modules["vllm.model_executor.custom_op"].op_registry_oot = StubCustomOp.registry
    monkeypatch.setattr(plugin.importlib.metadata, "version", lambda name: "0.26.0")
    monkeypatch.delenv(plugin.ENV, raising=False)
    return types.SimpleNamespace(platform=cuda, kernels=kernels["cuda"], modules=sys.modules)


# ----------------------------------------------------------------------------------------- tests
def test_import_exactfuse_imports_no_vllm():
    code = "import sys, exactfuse.integrations.vllm; print([m for m in sys.modules if m.split('.')[0] == 'vllm'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_vllm_extra_takes_the_tested_minor_and_the_docs_install_from_source():
    """The ``vllm`` extra stops before the next minor (a newer vLLM moves the names the plugin replaces), and
    docs/vllm.md installs it from a clone: the package is on no index."""
    import pathlib

    root = pathlib.Path(__file__).parents[2]
    extra = next(line for line in (root / "pyproject.toml").read_text().splitlines() if line.startswith("vllm = "))
    major, minor = plugin.version_tuple(plugin.TESTED[-1])
    assert (major, minor) == plugin.MIN_VERSION
    assert extra.split("#")[0].strip() == f'vllm = ["vllm>={major}.{minor},<{major}.{minor + 1}"]'
    for doc in ("docs/vllm.md", "docs/index.md"):
        text = (root / doc).read_text()
        assert "pip install 'exactfuse[vllm]'" not in text and "pip install -e '.[vllm]'" in text, doc
    assert "docs/vllm.md" in (root / "README.md").read_text()


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, plugin.OPS),
        ("all", plugin.OPS),
        ("", ()),
        ("none", ()),
        ("w4a16, silu_and_mul", ("silu_and_mul", "w4a16")),
    ],
)
def test_selected_ops(monkeypatch, value, expected):
    monkeypatch.delenv(plugin.ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(plugin.ENV, value)
    assert plugin.selected_ops() == expected


def test_selected_ops_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown op.*'rms_norm'.*silu_and_mul, gelu_and_mul, w4a16, causal_conv1d"):
        plugin.selected_ops("silu_and_mul,rms_norm")


def test_register_replaces_all_once(vllm_stub, caplog):
    with caplog.at_level("INFO", logger="vllm.plugins.exactfuse"):
        first = plugin.register()
    assert first[:2] == ["SiluAndMul", "GeluAndMul"] and len(first) == 5
    assert "replaced in vllm 0.26.0: SiluAndMul, GeluAndMul, MPLinearKernel[0]" in caplog.text
    assert plugin.register() == first  # vLLM may load plugins twice: nothing registered twice
    assert [k.__name__ for k in vllm_stub.kernels] == ["ExactfuseW4A16LinearKernel", "MarlinLinearKernel"]
    for name in plugin.CONV_MODULES:
        module = vllm_stub.modules[name]
        assert module.causal_conv1d_fn.__wrapped__ is _original_conv
        assert module.causal_conv1d_update.__wrapped__ is _original_conv


def test_activation_replacements_compute_the_native_op(vllm_stub):
    plugin.register()
    silu, gelu = SiluAndMul(), GeluAndMul("tanh")
    assert type(silu).__name__ == "ExactfuseSiluAndMul" and isinstance(silu, SiluAndMul)
    assert (silu.name, gelu.name) == ("silu_and_mul", "gelu_and_mul")  # vLLM's names: custom_ops still match
    x = torch.randn(3, 5, 64)
    assert torch.equal(silu(x), silu.forward_native(x))
    assert torch.equal(gelu(x), gelu.forward_native(x))
    with pytest.raises(ValueError, match="approximate must be"):
        GeluAndMul("fast")


@pytest.mark.parametrize("value, expected", [("silu_and_mul", ["SiluAndMul"]), ("none", [])])
def test_register_takes_only_the_selected_ops(vllm_stub, monkeypatch, value, expected):
    monkeypatch.setenv(plugin.ENV, value)
    assert plugin.register() == expected
    assert [k.__name__ for k in vllm_stub.kernels] == ["MarlinLinearKernel"]


def test_register_refuses_old_vllm_and_other_platforms(vllm_stub, monkeypatch, caplog):
    monkeypatch.setattr(plugin.importlib.metadata, "version", lambda name: "0.25.1")
    with caplog.at_level("WARNING", logger="vllm.plugins.exactfuse"):
        assert plugin.register() == []
    assert "needs vllm >= 0.26 (tested: 0.26.0), found 0.25.1" in caplog.text
    monkeypatch.setattr(plugin.importlib.metadata, "version", lambda name: "0.26.0")
    vllm_stub.platform.is_cuda = lambda: False
    assert plugin.register() == []
    assert not StubCustomOp.registry


@pytest.mark.parametrize(
    "args, reason",
    [
        (("uint4b8", False, torch.bfloat16, 128, (4096, 4096), False), None),
        (("uint4b8", False, torch.float16, -1, (4096, 1024), False), None),
        (("uint4b8", False, torch.float16, 128, (1004, 4096), True), "multiples of 8"),
        (("uint8b128", False, torch.float16, 128, (4096, 4096), False), "4-bit symmetric"),
        (("uint4", True, torch.float16, 128, (4096, 4096), False), "4-bit symmetric"),
        (("uint4b8", True, torch.float16, 128, (4096, 4096), False), "zero points"),
        (("uint4b8", False, torch.float32, 128, (4096, 4096), False), "float16 or bfloat16"),
        (("uint4b8", False, torch.float16, 96, (4096, 4096), False), "power of two >= 16"),
        (("uint4b8", False, torch.float16, 128, (4160, 4096), False), "does not divide"),
    ],
)
def test_w4a16_refusal(args, reason):
    got = plugin.w4a16_refusal(*args)
    assert got is None if reason is None else reason in got


def _conv_reference(rows, state, weight, activation):
    """Causal conv of ``rows [L, C]`` after history ``state [C, K-1]``; returns (out [L, C], new state)."""
    window = torch.cat([state, rows.T], dim=1)
    K = weight.shape[1]
    out = torch.stack([(window[:, t : t + K] * weight).sum(1) for t in range(rows.shape[0])])
    return (F.silu(out) if activation else out), window[:, -(K - 1) :]


def test_conv_update_adapter_maps_decode_and_falls_back(vllm_stub):
    plugin.register()
    update = vllm_stub.modules[plugin.CONV_MODULES[1]].causal_conv1d_update
    C, K = 16, 4
    weight, state = torch.randn(C, K, dtype=torch.float32), torch.randn(6, C, K - 1, dtype=torch.float32)
    x, idx = torch.randn(3, C, dtype=torch.float32), torch.tensor([2, 0, 5], dtype=torch.int32)  # 0: padding
    new = state.clone()
    out = update(x, new, weight, None, "silu", conv_state_indices=idx)
    for r, slot in ((0, 2), (2, 5)):
        ref, ref_state = _conv_reference(x[r : r + 1], state[slot], weight, True)
        torch.testing.assert_close(out[r], ref[0])
        torch.testing.assert_close(new[slot], ref_state)
    assert torch.equal(new[0], state[0])  # the null block is never written
    spec = update(x, state, weight, None, "silu", idx, torch.ones(3, dtype=torch.int32))
    assert spec[0] == "vllm"  # speculative decoding: vLLM's own function
    # [B, blocks] indices (vLLM's mamba metadata): column 0 holds each request's state
    blocks = torch.stack([idx, torch.tensor([1, 1, 1], dtype=torch.int32)], dim=1)
    again = state.clone()
    assert torch.equal(update(x, again, weight, None, "silu", conv_state_indices=blocks), out)
    assert torch.equal(again, new)


def test_conv_fn_adapter_maps_prefill_and_falls_back(vllm_stub):
    plugin.register()
    conv_fn = vllm_stub.modules[plugin.CONV_MODULES[0]].causal_conv1d_fn
    C, K = 8, 3
    weight, state = torch.randn(C, K, dtype=torch.float32), torch.randn(4, C, K - 1, dtype=torch.float32)
    tokens = torch.randn(7, C, dtype=torch.float32)  # two sequences, 4 and 3 tokens, channel-last
    qsl, idx = torch.tensor([0, 4, 7], dtype=torch.int32), torch.tensor([1, 3], dtype=torch.int32)
    initial = torch.tensor([True, False])
    new = state.clone()
    out = conv_fn(tokens.T, weight, None, new, qsl, idx, initial, activation=None)
    assert out.shape == (C, 7)
    ref0, st0 = _conv_reference(tokens[:4], state[1], weight, False)
    ref1, st1 = _conv_reference(tokens[4:], torch.zeros_like(state[3]), weight, False)
    torch.testing.assert_close(out.T, torch.cat([ref0, ref1]))
    torch.testing.assert_close(new[1], st0)
    torch.testing.assert_close(new[3], st1)
    blocks, again = torch.stack([idx, idx.flip(0)], dim=1), state.clone()  # [B, blocks]: column 0 is the state
    assert torch.equal(conv_fn(tokens.T, weight, None, again, qsl, blocks, initial, activation=None), out)
    assert torch.equal(again, new)
    cached = conv_fn(tokens.T, weight, None, state, qsl, idx, initial, block_idx_first_scheduled_token=idx)
    assert cached[0] == "vllm"  # prefix-caching block tables: vLLM's own function


def test_exactfuse_is_looked_up_at_call_time(vllm_stub, monkeypatch):
    """The plugin calls ``exactfuse.<op>`` at call time, so a wrapper (scripts/gpu/vllm_e2e.py's call counter)
    sees every call."""
    plugin.register()
    seen = []
    original = exactfuse.silu_and_mul
    monkeypatch.setattr(exactfuse, "silu_and_mul", lambda x: seen.append(x.shape) or original(x))
    SiluAndMul()(torch.randn(2, 8))
    assert seen == [torch.Size([2, 8])]
