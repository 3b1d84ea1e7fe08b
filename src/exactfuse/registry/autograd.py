"""Gradients: an op either has a backward or refuses, before computing, any input that requires grad.

An :class:`~exactfuse.registry.op.Op` declares what it is differentiable with respect to
(``Op.differentiable``); every other op is inference-only. The rule is checked on every call under
grad mode (``Op.__call__``): a call whose tensors require grad goes through ``torch.ops.exactfuse.<op>``,
whose autograd formula is registered with ``torch.library.register_autograd`` (so eager, compile and
export see the same backward), or raises :class:`InferenceOnlyError` naming the op and the argument.

A backward is a function of the output's gradient and the saved inputs (a spec's ``*_backward`` beside
its native function: the gradients eager autograd computes, written out). Without one, an op's backward
is the vector-Jacobian product of its native spec, recomputed from the saved inputs: eager autograd's
own gradient of the spec, at the cost of a second forward.
Nothing here knows any particular op.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from exactfuse.registry.op import Op


class InferenceOnlyError(RuntimeError):
    """An input requires grad where the op has no backward for it."""


# Argument types that are never tensors: requires_grad skips them without isinstance, whose
# torch.Tensor metaclass check costs 0.15 µs a call (9 arguments of w4a16_gemm: 0.50 against 1.6 µs).
_NOT_TENSORS = frozenset({type(None), bool, int, float, str, torch.dtype})


def requires_grad(args: Sequence, kwargs: dict) -> bool:
    """Whether any tensor argument requires grad (a plain loop: Dynamo traces it without a break)."""
    for a in (*args, *kwargs.values()) if kwargs else args:
        t = type(a)
        if (t is torch.Tensor or (t not in _NOT_TENSORS and isinstance(a, torch.Tensor))) and a.requires_grad:
            return True
    return False


# The op whose backward formula runs on this thread (autograd runs a formula on one thread): a call it
# makes that needs a gradient is a double backward of that op (create_graph=True), and is refused as one.
_BACKWARD = threading.local()


def refusal(op: Op, args: Sequence, kwargs: dict) -> str | None:
    """Why ``op`` cannot differentiate this call (``None`` when it can): the first argument that requires
    grad and is not one the op has a gradient for."""
    bound = op.signature.bind(*args, **kwargs)
    for name, value in bound.arguments.items():
        if not (isinstance(value, torch.Tensor) and value.requires_grad) or name in op.grad_inputs:
            continue
        if (outer := getattr(_BACKWARD, "op", None)) is not None:
            return (
                f"double backward (a gradient of the gradient, create_graph=True) of {outer.name} is not "
                f"supported: its backward, {op.name}, has no gradient with respect to {name}; take the gradient "
                f"of {outer.name} without create_graph=True"
            )
        if not op.grad_inputs:
            why = f"it writes {', '.join(op.mutates_args)} in place" if op.mutates_args else "it has no backward"
            return (
                f"{op.name} is inference-only ({why}), but {name} requires grad; call it under "
                "torch.no_grad() or torch.inference_mode(), or pass a detached tensor"
            )
        return (
            f"{op.name} has a gradient only with respect to {', '.join(op.grad_inputs)}, but {name} requires "
            f"grad; pass {name} detached"
        )
    return None


def _positions(op: Op, names: Sequence[str]) -> tuple[int, ...]:
    params = list(op.signature.parameters)
    unknown = [n for n in names if n not in params]
    if unknown:
        raise ValueError(f"{op.name}: differentiable names unknown parameters {unknown}; parameters: {params}")
    return tuple(params.index(n) for n in names)


def register(op: Op, backward: Callable | None) -> None:
    """Register ``op``'s autograd formula with ``torch.library.register_autograd``: ``backward(grad,
    *inputs) -> gradient per input in op.grad_inputs`` (None: the recomputed VJP of the native spec); an
    inference-only op gets a formula that refuses instead. An op that mutates its arguments takes no
    formula (torch allows none): ``Op.__call__`` refuses for it, and torch's own autograd fallback
    rejects a direct ``torch.ops`` call."""
    if op.mutates_args:
        return
    qualname = f"exactfuse::{op.name}"
    positions = _positions(op, op.grad_inputs)

    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        if not op.grad_inputs or any(
            isinstance(t, torch.Tensor) and t.requires_grad and i not in positions for i, t in enumerate(inputs)
        ):
            raise InferenceOnlyError(refusal(op, inputs, {}) or f"{op.name} has no backward for these inputs")
        tensors = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
        ctx.save_for_backward(*(inputs[i] for i in tensors))
        ctx.tensor_positions = tensors
        ctx.inputs = tuple(None if isinstance(a, torch.Tensor) else a for a in inputs)

    def backward_formula(ctx, *grads):
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_positions, ctx.saved_tensors, strict=True):
            inputs[i] = t
        # needs_input_grad covers the arguments the dispatcher passed: trailing defaults are dropped
        needs = ctx.needs_input_grad
        wanted = [i for i in positions if i < len(needs) and needs[i]]
        if backward is None:
            computed = native_vjp(op.native, inputs, wanted, grads)
        else:
            outer, _BACKWARD.op = getattr(_BACKWARD, "op", None), op
            try:
                computed = dict(zip(positions, backward(*grads, *inputs), strict=True))
            finally:
                _BACKWARD.op = outer
        return tuple(computed.get(i) if i in wanted else None for i in range(len(inputs)))

    torch.library.register_autograd(qualname, backward_formula, setup_context=setup_context)


def native_vjp(native: Callable, inputs: list, wanted: Sequence[int], grads: Sequence[torch.Tensor]) -> dict:
    """The gradients of ``native(*inputs)`` with respect to ``inputs[i]`` for ``i in wanted``: eager
    autograd of the spec (``torch.func.vjp``, which compile and export can trace)."""
    if not wanted:
        return {}

    def spec(*differentiated):
        call = list(inputs)
        for i, t in zip(wanted, differentiated, strict=True):
            call[i] = t
        return native(*call)

    _, vjp = torch.func.vjp(spec, *(inputs[i] for i in wanted))
    return dict(zip(wanted, vjp(grads[0] if len(grads) == 1 else grads), strict=True))


def backward_op(op: Op) -> Op | None:
    """The backward op that ``op``'s backward formula calls: by the registry's naming, the op
    ``<op>_backward`` (docs/contracts.md, "Backward ops"); ``None`` for a formula written in PyTorch."""
    from exactfuse.registry.op import OPS

    return OPS.get(f"{op.name}_backward") if op.backward_fn is not None else None


def forward_op(op: Op) -> Op | None:
    """The op whose backward op ``op`` is (``None``: ``op`` is not a backward op)."""
    from exactfuse.registry.op import OPS

    forward = OPS.get(op.name.removesuffix("_backward")) if op.name.endswith("_backward") else None
    return forward if forward is not None and backward_op(forward) is op else None


def describe(op: Op) -> str:
    """One line for ``exactfuse list`` and ``info``: what ``op`` has a gradient with respect to and how it is
    computed, or ``none:`` and why not."""
    forward = forward_op(op)
    if op.mutates_args:
        written = ", ".join(op.mutates_args)
        optional = all(op.signature.parameters[n].default is None for n in op.mutates_args)
        return f"none when {written} is given (written in place)" if optional else f"none: writes {written} in place"
    if not op.grad_inputs:
        return f"none: double backward of {forward.name} is not supported" if forward else "none: inference-only"
    if op.backward_fn is None:
        how = "VJP of the spec"
    elif (backward := backward_op(op)) is not None:
        how = f"the backward op {backward.name}"
    else:
        how = "backward formula"
    second = f" (double backward of {forward.name})" if forward else ""
    return f"wrt {', '.join(op.grad_inputs)}: {how}{second}"
