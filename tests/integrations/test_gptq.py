"""GPTQ checkpoints: save_gptq (round-to-nearest) -> load_gptq round trip on a tiny Llama, and the
errors of configs exactfuse cannot read."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from exactfuse.integrations.gptq import CONFIG, PROJECTIONS, load_gptq, save_gptq  # noqa: E402
from exactfuse.layers import W4A16Linear  # noqa: E402
from exactfuse.ops.w4a16.packing import quantize_rtn  # noqa: E402

CONFIG_KW = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 96, "max_position_embeddings": 64}  # fmt: skip


def _llama(seed: int):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**CONFIG_KW)
    config._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(config).to(torch.float16).eval()


@pytest.mark.parametrize("sym", [True, False])
def test_save_then_load_gives_the_layers_quantized_directly(tmp_path, sym):
    model = _llama(0)
    saved = save_gptq(model, tmp_path, group_size=32, sym=sym)
    assert len(saved) == 2 * len(PROJECTIONS) and all(
        isinstance(model.get_submodule(p), torch.nn.Linear) for p in saved
    )
    assert json.loads((tmp_path / CONFIG).read_text())["sym"] is sym

    loaded = _llama(1)  # other random weights: everything must come from the checkpoint
    assert load_gptq(loaded, tmp_path) == sorted(saved)
    for p in saved:
        t = quantize_rtn(model.get_submodule(p).weight.detach(), 32, sym, format="v1", scale_dtype=torch.float16)
        direct = W4A16Linear.from_gptq(t.qweight, t.qzeros, t.scales, None, format="v1", sym=sym, dtype=torch.float16)
        layer = loaded.get_submodule(p)
        assert isinstance(layer, W4A16Linear)
        for name, value in direct.state_dict().items():
            assert torch.equal(layer.state_dict()[name], value), f"{p}.{name}"
        parent, _, attr = p.rpartition(".")
        setattr(model.get_submodule(parent), attr, direct)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    ids = torch.randint(0, 96, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_load_in_the_fragment_layout_gives_the_same_logits(tmp_path, caplog):
    model = _llama(0)
    saved = save_gptq(model, tmp_path, group_size=64, sym=False)
    gptq, frag = _llama(1), _llama(2)
    load_gptq(gptq, tmp_path)
    assert load_gptq(frag, tmp_path, layout="fragment") == sorted(saved)
    assert all(frag.get_submodule(p).layout == "fragment" for p in saved)
    ids = torch.randint(0, 96, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(frag(input_ids=ids).logits, gptq(input_ids=ids).logits)
    # groups of 32 rows have no fragment layout: those layers keep the GPTQ layout, named in a warning
    save_gptq(_llama(0), tmp_path / "g32", group_size=32)
    small = _llama(3)
    with caplog.at_level("WARNING", logger="exactfuse.integrations.gptq"):
        load_gptq(small, tmp_path / "g32", layout="fragment")
    assert all(small.get_submodule(p).layout == "gptq" for p in saved)
    assert "keeps the GPTQ layout" in caplog.text and saved[0] in caplog.text
    # "auto": each layer's preferred_layout(), without a warning (here, no sm_90 GPU: the GPTQ layout)
    caplog.clear()
    auto = _llama(5)
    with caplog.at_level("WARNING", logger="exactfuse.integrations.gptq"):
        load_gptq(auto, tmp_path / "g32", layout="auto")
    assert all(auto.get_submodule(p).layout == auto.get_submodule(p).preferred_layout() for p in saved)
    assert "keeps the GPTQ layout" not in caplog.text
    with pytest.raises(ValueError, match="layout must be one of"):
        load_gptq(_llama(4), tmp_path, layout="marlin")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("bits", 8, "'bits' is 8"),
        ("checkpoint_format", "marlin", "'checkpoint_format' is 'marlin'"),
        ("group_size", 0, "'group_size' must be a positive int or -1"),
        ("sym", "yes", "'sym' must be true or false"),
    ],
)
def test_unreadable_configs_name_the_key(tmp_path, key, value, message):
    model = _llama(0)
    save_gptq(model, tmp_path, group_size=32)
    config = json.loads((tmp_path / CONFIG).read_text())
    config[key] = value
    (tmp_path / CONFIG).write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        load_gptq(_llama(1), tmp_path)


def test_a_checkpoint_for_another_model_is_refused(tmp_path):
    save_gptq(_llama(0), tmp_path, group_size=32)
    config = transformers.LlamaConfig(**{**CONFIG_KW, "intermediate_size": 256})
    other = transformers.AutoModelForCausalLM.from_config(config).to(torch.float16)
    with pytest.raises(ValueError, match="down_proj.qweight is \\[16, 64\\], the model's Linear needs \\[32, 64\\]"):
        load_gptq(other, tmp_path)
    with pytest.raises(FileNotFoundError, match="no quantize_config.json"):
        load_gptq(other, tmp_path / "nowhere")


@pytest.mark.parametrize("exact", [True, False])
def test_apply_feeds_the_w4a16_projections_to_one_activation_op(tmp_path, exact):
    """A GPTQ-loaded model's MLPs (W4A16Linear projections) are patched too: the two projections' outputs
    go to silu_mul, never fused, and the logits stay the loaded model's."""
    from exactfuse.integrations.transformers import GatedMLP, apply, revert

    save_gptq(_llama(0), tmp_path, group_size=32)
    model = _llama(1)
    load_gptq(model, tmp_path)
    ids = torch.randint(0, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        report = apply(model, exact=exact)
        after = model(input_ids=ids).logits
    mlps = [p for p in report.replaced if p.endswith(".mlp")]
    assert len(mlps) == CONFIG_KW["num_hidden_layers"], str(report)
    for p in mlps:
        assert "GatedMLP (silu_mul)" in report.replaced[p] and isinstance(model.get_submodule(p), GatedMLP)
        assert exact or "W4A16 projections not fused" in report.replaced[p]
        assert isinstance(model.get_submodule(p).gate_proj, W4A16Linear) and not model.get_submodule(p).fused
    assert torch.equal(after, before)
    revert(model)
