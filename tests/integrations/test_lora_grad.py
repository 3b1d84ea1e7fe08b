"""A LoRA-style fine-tune step through a model patched by ``integrations.transformers.apply``: the loss
and every adapter gradient equal the unpatched model's (bit for bit where the forward is; under the
interpreter, whose CPU math is not native's, within fp32 rounding)."""

from __future__ import annotations

import contextlib

import pytest
import torch

pytest.importorskip("transformers")

import exactfuse
from exactfuse.integrations.transformers import apply

from .test_transformers import _model

ACT_OPS = ("silu_mul", "gelu_mul", "silu_and_mul", "gelu_and_mul", "gelu_and_mul_sparse", "moe_silu_and_mul")
RANK = 4


def _adapters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Frozen base, a rank-4 adapter ``x @ A @ B`` added to every projection's output by a forward hook
    (the modules stay as they are, so the patch recognizes them); returns the adapter parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(2)
    params = {}
    for name, module in model.named_modules():
        if not (isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1].endswith("_proj")):
            continue
        w = module.weight
        a = (torch.randn(module.in_features, RANK, generator=gen) * 0.1).to(w.device, w.dtype).requires_grad_()
        b = (torch.randn(RANK, module.out_features, generator=gen) * 0.1).to(w.device, w.dtype).requires_grad_()
        params[f"{name}.A"], params[f"{name}.B"] = a, b
        module.register_forward_hook(lambda m, args, out, a=a, b=b: out + (args[0] @ a) @ b)
    return params


def _exactfuse_nodes(loss: torch.Tensor) -> set[str]:
    """The exactfuse ops the loss's autograd graph goes through."""
    seen, names, todo = set(), set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if "exactfuse" in type(node).__name__:
            names.add(type(node).__name__.split("exactfuse_", 1)[1].rsplit("_default", 1)[0])
        todo.extend(n for n, _ in node.next_functions)
    return names


EXPECTED_NODES = {"llama": {"silu_mul"}, "gemma3n": {"gelu_mul", "gelu_and_mul_sparse"}, "mixtral": {"silu_and_mul"}}


def _step(family: str, device: str, dtype: torch.dtype, patch: bool, providers: tuple[str, ...] | None):
    """(loss, {adapter: gradient}) of one next-token loss, with or without the patch; with it, the graph
    must go through the patched ops."""
    model = _model(family).to(device, dtype).train()
    if family in ("mixtral", "qwen2_moe"):
        model.set_experts_implementation("eager")
    params = _adapters(model)
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1)).to(device)
    with contextlib.ExitStack() as stack:
        if patch:
            report = apply(model)
            assert report.replaced, str(report)
            for name in ACT_OPS if providers else ():
                stack.enter_context(exactfuse.get(name).priority(providers))
        loss = model(input_ids=ids, labels=ids).loss
        assert _exactfuse_nodes(loss) == (EXPECTED_NODES[family] if patch else set())
        grads = torch.autograd.grad(loss, list(params.values()))
    return loss.detach(), dict(zip(params, grads, strict=True))


FAMILIES = ["llama", "gemma3n", "mixtral"]


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_step_through_the_patched_model_is_the_unpatched_one(family):
    """Native providers (the CPU's default): the patch changes nothing, gradients included."""
    loss, grads = _step(family, "cpu", torch.float32, patch=False, providers=None)
    patched_loss, patched_grads = _step(family, "cpu", torch.float32, patch=True, providers=("native",))
    assert torch.equal(patched_loss, loss)
    for name, g in grads.items():
        assert torch.equal(patched_grads[name], g), name


@pytest.mark.interpreter
@pytest.mark.parametrize("family", FAMILIES)
def test_lora_step_with_the_triton_forward(family):
    loss, grads = _step(family, "cpu", torch.float32, patch=False, providers=None)
    patched_loss, patched_grads = _step(family, "cpu", torch.float32, patch=True, providers=("triton", "native"))
    torch.testing.assert_close(patched_loss, loss, rtol=1e-5, atol=1e-5)
    for name, g in grads.items():
        torch.testing.assert_close(patched_grads[name], g, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_lora_step_bf16_is_bitwise(family):
    """bf16 on the GPU: the Triton forwards are bitwise native's and the backward formulas eager's."""
    loss, grads = _step(family, "cuda", torch.bfloat16, patch=False, providers=None)
    patched_loss, patched_grads = _step(family, "cuda", torch.bfloat16, patch=True, providers=("triton", "native"))
    assert torch.equal(patched_loss, loss)
    for name, g in grads.items():
        assert torch.equal(patched_grads[name], g), name
