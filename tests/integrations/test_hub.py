"""exactfuse.integrations.hub: the conv layers Hugging Face's ``kernels`` maps transformers'
``causal_conv1d_fn`` / ``causal_conv1d_update`` to, loaded from the local repository inside the package."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels")

from kernels.layer.layer import _validate_layer  # noqa: E402

from exactfuse.integrations.hub import LAYERS, CausalConv1dFn, CausalConv1dUpdate, kernel_mapping  # noqa: E402

# conv mixers of the installed transformers that wrap both functions for the hub (same names, one interface)
MODELS = ["mamba", "mamba2", "falcon_mamba", "jamba", "bamba", "lfm2", "qwen3_next", "granitemoehybrid"]


def _module(name: str):
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _projection_chunk(B, C, L, dtype, seed=0):
    """``[B, C, L]`` as a mixer sees it: half of a ``[B, L, 2C]`` projection, transposed (channels unit stride)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, L, 2 * C, generator=gen).to(dtype).transpose(1, 2).chunk(2, dim=1)[0]


def _weights(C, K, dtype, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(C, K, generator=gen).to(dtype), torch.randn(C, generator=gen).to(dtype)


def test_mapping_loads_the_packaged_layers():
    mapping = kernel_mapping()
    assert set(mapping) == set(LAYERS)
    assert mapping["causal_conv1d_fn"]["cuda"].load() is CausalConv1dFn
    assert mapping["causal_conv1d_update"]["cuda"].load() is CausalConv1dUpdate


def test_a_kernels_release_transformers_does_not_take_is_a_clear_error(monkeypatch):
    from transformers.utils import import_utils

    monkeypatch.setattr(import_utils, "is_kernels_available", lambda *a, **k: False)
    with pytest.raises(RuntimeError, match=r"takes kernels >= .*; kernels .* is installed"):
        kernel_mapping()
    monkeypatch.setenv("USE_HUB_KERNELS", "0")
    with pytest.raises(RuntimeError, match="USE_HUB_KERNELS"):
        kernel_mapping()


@pytest.mark.parametrize("model", MODELS)
def test_kernels_accepts_the_layers_in_place_of_each_mixers_functions(model):
    """``kernelize`` validates a layer against the function it replaces (stateless, same forward arguments)."""
    mod = _module(model)
    mapping = kernel_mapping()
    for name in LAYERS:
        wrapped = getattr(mod, name)
        assert type(wrapped).kernel_layer_name == name
        repo = mapping[name]["cuda"]
        _validate_layer(check_cls=type(wrapped), cls=repo.load(), repo=repo)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_fn_layer_has_the_gradients_of_transformers_torch_path(dtype):
    """The layer declares a backward: its gradients (x, weight, bias) against autograd of transformers'
    PyTorch ``causal_conv1d_fn``, within Dao's gradient tolerances."""
    h = _projection_chunk(3, 40, 9, dtype)
    w, b = _weights(40, 4, dtype)
    ours = [t.detach().clone().requires_grad_() for t in (h, w, b)]
    ref = [t.detach().clone().requires_grad_() for t in (h, w, b)]
    g = torch.randn(3, 40, 9).to(dtype)
    got = torch.autograd.grad(CausalConv1dFn()(*ours, activation="silu"), ours, g)
    want = torch.autograd.grad(_module("mamba").causal_conv1d_fn(*ref, activation="silu"), ref, g)
    rtol, atol = (3e-4, 1e-3) if dtype == torch.float32 else (3e-3, 5e-3)
    assert CausalConv1dFn.has_backward
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("B", [1, 3])
def test_fn_takes_initial_states_as_daos_function_does(B):
    """``initial_states [B, C, K - 1]`` are each row's history, as in Dao's ``causal_conv1d_fn`` (transformers'
    PyTorch fallback takes none: its mixers pass none)."""
    h = _projection_chunk(B, 40, 7, torch.float32)
    w, b = _weights(40, 4, torch.float32)
    states = torch.randn(B, 40, 3)
    ref = F.silu(F.conv1d(torch.cat([states, h], dim=2), w.unsqueeze(1), b, groups=40))
    torch.testing.assert_close(CausalConv1dFn()(h, w, b, initial_states=states, activation="silu"), ref)


@pytest.mark.parametrize("L", [2, 7])
def test_fn_returns_final_states_as_daos_function_does(L):
    """``return_final_states``: ``(out, final_states [B, C, K - 1])``, the last ``K - 1`` columns of
    ``initial_states ‖ x`` (zeros in front without them), into ``final_states_out`` when given."""
    h = _projection_chunk(2, 40, L, torch.float32)
    w, b = _weights(40, 4, torch.float32)
    states = torch.randn(2, 40, 3)
    buffer = torch.empty(2, 40, 3)
    out, final = CausalConv1dFn()(h, w, b, initial_states=states, activation="silu", return_final_states=True,
                                  final_states_out=buffer)  # fmt: skip
    torch.testing.assert_close(out, F.silu(F.conv1d(torch.cat([states, h], dim=2), w.unsqueeze(1), b, groups=40)))
    assert final.data_ptr() == buffer.data_ptr()
    assert torch.equal(final, torch.cat([states, h], dim=2)[..., -3:])
    _, final = CausalConv1dFn()(h, w, b, activation="silu", return_final_states=True)
    assert torch.equal(final, F.pad(h, (3, 0))[..., -3:])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("B", [1, 3])
def test_fn_equals_transformers_torch_path(dtype, activation, B):
    h = _projection_chunk(B, 40, 7, dtype)
    w, b = _weights(40, 4, dtype)
    ref = _module("mamba").causal_conv1d_fn(h, w, b, activation=activation)
    assert torch.equal(CausalConv1dFn()(h, w, b, activation=activation), ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_fn_maps_seq_idx_to_one_call_per_packed_sequence(dtype):
    """``seq_idx [B, L]`` (packed sequences, padding -1): each run equals transformers' PyTorch path on
    that run alone, padding rows are 0."""
    h = _projection_chunk(2, 40, 9, dtype, seed=4)
    w, b = _weights(40, 4, dtype)
    runs = [[(0, 4), (1, 5)], [(0, 2), (1, 1), (2, 3), (-1, 3)]]
    seq_idx = torch.tensor([[i for i, n in row for _ in range(n)] for row in runs], dtype=torch.int32)
    got = CausalConv1dFn()(h, w, b, activation="silu", seq_idx=seq_idx)
    for row, row_runs in enumerate(runs):
        start = 0
        for i, n in row_runs:
            part = got[row : row + 1, :, start : start + n]
            if i < 0:
                assert torch.equal(part, torch.zeros_like(part))
            else:
                chunk = h[row : row + 1, :, start : start + n]
                assert torch.equal(part, _module("mamba").causal_conv1d_fn(chunk, w, b, activation="silu"))
            start += n


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("width", [3, 4, 6])
@pytest.mark.parametrize("L", [1, 3])
def test_update_equals_transformers_torch_path_state_included(dtype, width, L):
    """Outputs and every state column as the PyTorch function leaves them (transformers keeps W = K)."""
    h = _projection_chunk(3, 40, L, dtype, seed=2)
    w, b = _weights(40, 4, dtype)
    state = torch.randn(3, 40, width, generator=torch.Generator().manual_seed(3)).to(dtype)
    ref_state, got_state = state.clone(), state.clone()
    ref = _module("mamba").causal_conv1d_update(h, ref_state, w, b, activation="silu")
    got = CausalConv1dUpdate()(h, got_state, w, b, activation="silu")
    assert torch.equal(got, ref)
    assert torch.equal(got_state, ref_state)


def test_bad_arguments_name_them():
    h = _projection_chunk(1, 8, 2, torch.float16)
    w, b = _weights(8, 4, torch.float16)
    with pytest.raises(ValueError, match="activation"):
        CausalConv1dFn()(h, w, b, activation="gelu")
    with pytest.raises(ValueError, match=r"seq_idx must be \[B, L\] = \[1, 2\]"):
        CausalConv1dFn()(h, w, b, activation="silu", seq_idx=torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="final_states_out is written only with return_final_states=True"):
        CausalConv1dFn()(h, w, b, activation="silu", final_states_out=torch.zeros(1, 8, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match="initial_states must be"):
        CausalConv1dFn()(h, w, b, activation="silu", initial_states=torch.zeros(1, 8, 2, dtype=torch.float16))
    with pytest.raises(ValueError, match="conv_state"):
        CausalConv1dUpdate()(h[..., :1], torch.zeros(1, 8, 2, dtype=torch.float16), w, b)


@pytest.mark.gpu
@torch.no_grad()
def test_gpu_kernelized_mamba_keeps_logits_and_greedy_tokens():
    """A small Mamba model (hidden 1024, 2 layers, bf16): kernelized with the mapping, its logits over a
    prompt and 16 greedy tokens equal the unpatched model's (cuDNN's conv equals the ascending tap sum)."""
    config = transformers.MambaConfig(hidden_size=1024, state_size=16, num_hidden_layers=2, vocab_size=4096)
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (2, 24), device="cuda")
    ref_logits = model(ids).logits
    ref_tokens = model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)  # no padding
    try:
        with kernels.use_kernel_mapping(kernel_mapping()):
            patched = kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cuda")
        assert torch.equal(patched(ids).logits, ref_logits)
        assert torch.equal(patched.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False), ref_tokens)
    finally:
        with kernels.use_kernel_mapping({}, inherit_mapping=False):
            kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cuda")


def _mamba_lora_steps(family: str, device: str, dtype: torch.dtype, monkeypatch):
    """One LoRA-style step (adapters on every projection, base frozen) through a tiny Mamba / Mamba2 model,
    unpatched and kernelized in training mode with the mapping: ``(loss, grads, patched loss, patched
    grads)``; the patched step must run the conv in exactfuse once a layer."""
    import kernels.layer.repos

    import exactfuse

    from .test_lora_grad import _adapters

    monkeypatch.setattr(kernels.layer.repos, "_find_capability", lambda: 90)
    calls = []
    original = exactfuse.causal_conv1d
    monkeypatch.setattr(exactfuse, "causal_conv1d", lambda *a, **k: calls.append(1) or original(*a, **k))
    if family == "mamba":
        cls, config = (
            transformers.MambaForCausalLM,
            transformers.MambaConfig(hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=96),
        )
    else:
        cls, config = transformers.Mamba2ForCausalLM, transformers.Mamba2Config(
            hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=96, num_heads=8, head_dim=16, n_groups=1,
            chunk_size=16,
        )  # fmt: skip
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1)).to(device)

    def step(patch: bool):
        torch.manual_seed(0)
        model = cls(config).to(device, dtype).train()
        params = _adapters(model)
        if patch:
            with kernels.use_kernel_mapping(kernel_mapping()):
                kernels.kernelize(model, mode=kernels.Mode.TRAINING, device="cuda")
        try:
            loss = model(input_ids=ids, labels=ids).loss
            grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        finally:  # transformers' function objects are shared by every model of the family in the process
            with kernels.use_kernel_mapping({}, inherit_mapping=False):
                kernels.kernelize(model, mode=kernels.Mode.TRAINING, device="cuda")
        return loss.detach(), dict(zip(params, grads, strict=True))

    loss, grads = step(False)
    assert not calls
    patched_loss, patched_grads = step(True)
    assert len(calls) == config.num_hidden_layers
    assert any(g is not None for g in grads.values())
    for name, g in grads.items():  # an adapter off the loss's path is off it in both
        assert (g is None) == (patched_grads[name] is None), name
    return loss, grads, patched_loss, patched_grads


@pytest.mark.parametrize("family", ["mamba", "mamba2"])
def test_lora_step_through_a_kernelized_model_matches_the_unpatched_one(family, monkeypatch):
    """fp32 on the CPU: the conv and its backward in exactfuse give the unpatched model's loss and adapter
    gradients within fp32 rounding (the unpatched conv is ``nn.Conv1d``, whose sum order is not the
    ascending tap sum)."""
    loss, grads, patched_loss, patched_grads = _mamba_lora_steps(family, "cpu", torch.float32, monkeypatch)
    torch.testing.assert_close(patched_loss, loss, rtol=1e-6, atol=1e-6)
    for name, g in grads.items():
        if g is not None:
            torch.testing.assert_close(patched_grads[name], g, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["mamba", "mamba2"])
def test_gpu_lora_step_through_a_kernelized_model_bf16_is_bitwise(family, monkeypatch):
    """bf16 on the GPU: the loss and every adapter gradient equal the unpatched model's bit for bit."""
    loss, grads, patched_loss, patched_grads = _mamba_lora_steps(family, "cuda", torch.bfloat16, monkeypatch)
    assert torch.equal(patched_loss, loss)
    for name, g in grads.items():
        assert g is None or torch.equal(patched_grads[name], g), name


@pytest.mark.interpreter
def test_interpreter_layers_run_the_triton_kernels():
    """With Triton first (the interpreter here) the layers launch exactfuse's kernels on the mixer's
    strided views: the states bit for bit as transformers leaves them, outputs within the interpreter's
    fp16 SiLU (numpy's exp, not the CPU's)."""
    from exactfuse.ops.conv import _causal_conv1d, _causal_conv1d_update

    h = _projection_chunk(2, 24, 5, torch.float16)
    w, b = _weights(24, 4, torch.float16)
    state = torch.randn(2, 24, 4, generator=torch.Generator().manual_seed(4)).to(torch.float16)
    ref_state, got_state = state.clone(), state.clone()
    mod = _module("mamba")
    with _causal_conv1d.priority(["triton"]), _causal_conv1d_update.priority(["triton"]):
        out = CausalConv1dFn()(h, w, b, activation="silu")
        step = CausalConv1dUpdate()(h[..., :1], got_state, w, b, activation="silu")
    torch.testing.assert_close(out, mod.causal_conv1d_fn(h, w, b, activation="silu"), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(step, mod.causal_conv1d_update(h[..., :1], ref_state, w, b, activation="silu"),
                               rtol=2e-3, atol=2e-3)  # fmt: skip
    assert torch.equal(got_state, ref_state)


@torch.no_grad()
def test_kernelize_on_a_mamba_model_keeps_logits_and_greedy_tokens(monkeypatch):
    """kernelize with the mapping (the device capability it asks CUDA for is given, so the flow runs on
    the CPU): the layers serve the model's prefill and decode steps, logits and 6 greedy tokens (bf16)
    equal the unpatched model's, and kernelize under an empty mapping gives the PyTorch path back."""
    import kernels.layer.repos

    import exactfuse

    monkeypatch.setattr(kernels.layer.repos, "_find_capability", lambda: 90)
    calls = {"causal_conv1d": 0, "causal_conv1d_update": 0}
    for name in calls:
        original = getattr(exactfuse, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(exactfuse, name, counted)
    config = transformers.MambaConfig(hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=96)
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (2, 12))
    mask = torch.ones_like(ids)
    ref_logits = model(ids).logits
    ref_tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    try:
        with kernels.use_kernel_mapping(kernel_mapping()):
            kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cuda")
        assert torch.equal(model(ids).logits, ref_logits)
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        assert torch.equal(tokens, ref_tokens)
        assert calls["causal_conv1d"] >= 2 and calls["causal_conv1d_update"] >= 2 * 5, calls
    finally:  # transformers' function objects are shared by every Mamba model in the process
        with kernels.use_kernel_mapping({}, inherit_mapping=False):
            kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cuda")
    before = dict(calls)
    model(ids)
    assert calls == before, "an empty mapping left exactfuse's layers in place"
