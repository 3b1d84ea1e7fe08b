"""exactfuse.integrations.transformers on tiny random models built from transformers configs (no
downloads): every gated MLP and experts module replaced, logits unchanged bit for bit, revert exact."""

from __future__ import annotations

import contextlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactfuse.integrations.transformers import GatedExperts, GatedMLP, apply, revert  # noqa: E402

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 96, "max_position_embeddings": 64}  # fmt: skip


def _config(family: str):
    c = transformers
    if family == "llama":
        return c.LlamaConfig(**TINY)
    if family == "mistral":
        return c.MistralConfig(**TINY)
    if family == "qwen2":
        return c.Qwen2Config(**TINY)
    if family == "qwen3":
        return c.Qwen3Config(**TINY, head_dim=16)
    if family == "gemma":
        return c.GemmaConfig(**TINY, head_dim=16, hidden_activation="gelu_pytorch_tanh")
    if family == "gemma2":
        return c.Gemma2Config(**TINY, head_dim=16)
    if family == "gemma3":
        return c.Gemma3TextConfig(**TINY, head_dim=16)
    if family == "gemma3n":
        return c.Gemma3nTextConfig(**{**TINY, "intermediate_size": [128, 128]}, head_dim=16,
                                   activation_sparsity_pattern=[0.95, 0.0], laurel_rank=8,
                                   altup_num_inputs=2, hidden_size_per_layer_input=8,
                                   vocab_size_per_layer_input=96, num_kv_shared_layers=0,
                                   layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    if family == "mixtral":
        return c.MixtralConfig(**TINY, num_local_experts=4, num_experts_per_tok=2)
    if family == "qwen2_moe":
        return c.Qwen2MoeConfig(**TINY, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                shared_expert_intermediate_size=64)  # fmt: skip
    raise KeyError(family)


FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3n", "mixtral", "qwen2_moe"]
# what each family's decoder layers hold: (attribute path under the layer, exactfuse module, op)
EXPECTED = {
    "mixtral": [("mlp.experts", GatedExperts, "silu_and_mul")],
    "qwen2_moe": [("mlp.experts", GatedExperts, "silu_and_mul"), ("mlp.shared_expert", GatedMLP, "silu_mul")],
    "gemma3n": [("mlp", GatedMLP, "gelu_and_mul_sparse"), ("mlp", GatedMLP, "gelu_mul")],
}


MOE = ("mixtral", "qwen2_moe")


def _model(family: str, dtype=torch.float32):
    torch.manual_seed(0)
    config = _config(family)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).to(dtype).eval()
    if family in MOE:
        model.set_experts_implementation("eager")
    with torch.no_grad():  # from_config leaves some norms at their constant init; perturb every weight
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def _before(family: str):
    """(model, ids, its logits, a copy of its state dict) before any patch."""
    model = _model(family)
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1))
    return model, ids, _logits(model, ids), {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_apply_replaces_every_gated_mlp_and_keeps_the_logits(family):
    model, ids, before, state = _before(family)
    originals = dict(model.named_modules())
    report = apply(model)
    layers = [p.rsplit(".", 1)[0] for p in originals if p.endswith(".mlp") and ".layers." in p]
    expected = EXPECTED.get(family, [("mlp", GatedMLP, "silu_mul" if "gemma" not in family else "gelu_mul")])
    for i, layer in enumerate(layers):
        # gemma3n: layer 0 is activation-sparse, layer 1 dense (activation_sparsity_pattern)
        for sub, cls, op in [expected[i]] if family == "gemma3n" else expected:
            path = f"{layer}.{sub}"
            assert path in report.replaced, f"{path} not replaced: {report.left.get(path)}\n{report}"
            assert op in report.replaced[path] and isinstance(model.get_submodule(path), cls)
    assert torch.equal(_logits(model, ids), before)
    assert model.state_dict().keys() == state.keys()
    assert revert(model) == len(report.replaced)
    assert all(model.get_submodule(p) is m for p, m in originals.items() if p)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(_logits(model, ids), before)


def test_report_is_a_context_manager_and_apply_twice_is_an_error():
    model = _model("llama")
    mlp = model.model.layers[0].mlp
    with apply(model) as report:
        assert isinstance(model.model.layers[0].mlp, GatedMLP) and len(report.replaced) == 2
        with pytest.raises(RuntimeError, match="patched already"):
            apply(model)
    assert model.model.layers[0].mlp is mlp


def test_what_cannot_be_patched_is_left_with_a_reason():
    model = _model("llama")
    model.model.layers[0].mlp.act_fn = torch.nn.ReLU()
    report = apply(model, ops=["silu_mul"])
    assert "model.layers.0.mlp" in report.left and "ReLU" in report.left["model.layers.0.mlp"]
    assert "model.layers.1.mlp" in report.replaced
    revert(model)
    assert "gelu_mul not among the selected ops" in apply(_model("gemma"), ops=["silu_mul"]).left["model.layers.0.mlp"]
    with pytest.raises(ValueError, match="unknown op"):
        apply(model, ops=["nosuch"])
    with pytest.raises(TypeError, match="exact must be True or False"):
        apply(model, exact="fast")


@pytest.mark.parametrize("family", ["llama", "gemma3n", "qwen2_moe"])
def test_fast_mode_fuses_gate_and_up_into_one_gemm_over_the_same_parameters(family):
    model, ids, before, state = _before(family)
    params = dict(model.named_parameters())
    report = apply(model, exact=False)
    mlps = [m for m in model.modules() if isinstance(m, GatedMLP)]
    assert mlps and all(m.fused for m in mlps)
    fused = [report.replaced[p] for p, m in model.named_modules() if m in mlps]
    assert all("fused gate+up GEMM" in what and ("_and_mul" in what) for what in fused), fused
    for m in mlps:  # the projections' parameters are views of the one weight the GEMM reads
        weight = m._gate_up[0]
        assert m.gate_proj.weight.data_ptr() == weight.data_ptr() and weight.shape[0] == 2 * m.gate_proj.out_features
        assert m.up_proj.weight.data_ptr() == weight[m.gate_proj.out_features :].data_ptr()
    assert dict(model.named_parameters()) == params  # the same objects
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    # one GEMM over the concatenated weight: the same products, within the GEMM's rounding
    torch.testing.assert_close(_logits(model, ids), before, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # load_state_dict copies into the views: the fused weight follows
        model.load_state_dict({k: v * 0.5 if "gate_proj.weight" in k else v for k, v in state.items()})
    assert torch.equal(mlps[0]._gate_up[0][: mlps[0].gate_proj.out_features], mlps[0].gate_proj.weight)
    revert(model)
    assert not any(isinstance(m, GatedMLP) for m in model.modules())


def test_fast_mode_trains_through_the_two_projections():
    model = _model("llama")
    apply(model, exact=False)
    mlp = model.model.layers[0].mlp
    x = torch.randn(3, 64, requires_grad=False)
    mlp(x).sum().backward()
    assert mlp.gate_proj.weight.grad is not None and mlp.up_proj.weight.grad is not None


def test_a_changed_forward_is_caught_by_the_probe():
    """A module whose forward is not down(act(gate) * up) any more is left, not silently replaced."""
    model = _model("llama")
    mlp = model.model.layers[0].mlp
    mlp.forward = lambda x: mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x) * 2)
    report = apply(model)
    assert "differs from the module's own forward" in report.left["model.layers.0.mlp"]


def test_experts_under_another_backend_are_left():
    model = _model("mixtral")
    model.set_experts_implementation("grouped_mm")
    report = apply(model)
    assert not report.replaced and "experts backend 'grouped_mm'" in report.left["model.layers.0.mlp.experts"]


@pytest.mark.interpreter
@pytest.mark.parametrize("family", ["llama", "gemma3n", "mixtral"])
def test_the_triton_providers_run_in_the_patched_model(family, monkeypatch):
    """With Triton first (the interpreter here), the patched model runs exactfuse's kernels; the CPU's
    libm is not CUDA's, so the logits agree to fp32 rounding rather than bit for bit."""
    import exactfuse

    model = _model(family)
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1))
    before = _logits(model, ids)
    calls = []
    with contextlib.ExitStack() as stack:
        for name in ("silu_mul", "gelu_mul", "silu_and_mul", "gelu_and_mul", "gelu_and_mul_sparse"):
            op = exactfuse.get(name)
            provider = op.providers["triton"]
            monkeypatch.setattr(
                provider, "fn", lambda *a, _fn=provider.fn, _n=name, **k: calls.append(_n) or _fn(*a, **k)
            )
            stack.enter_context(op.priority(["triton", "native"]))
        report = apply(model)
        after = _logits(model, ids)
    assert report.replaced and calls
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
