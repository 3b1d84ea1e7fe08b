"""Running an op on a copy of its arguments and collecting what it produced."""

from __future__ import annotations

import torch

from exactfuse.registry.op import Op


def clone_value(value):
    """A copy of a tensor with the same sizes and strides (other values as they are).

    ``Tensor.clone`` makes non-dense views (row-strided slices) contiguous, which
    would silently test a provider on another layout than the case declares.
    """
    if not isinstance(value, torch.Tensor):
        return value
    try:
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=value.device).copy_(value)
    except RuntimeError:  # overlapping strides (expand): a dense copy
        return value.clone()


def clone_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return tuple(clone_value(a) for a in args), {k: clone_value(v) for k, v in kwargs.items()}


def collect_outputs(op: Op, result, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors a call produced: its result, and for mutating ops the mutated args."""
    outs = [] if result is None else list(result) if isinstance(result, (tuple, list)) else [result]
    if op.mutates_args:
        bound = op.signature.bind(*args, **kwargs)
        outs += [bound.arguments[n] for n in op.mutates_args if bound.arguments.get(n) is not None]
    return outs


class CompileWatch:
    """The Triton specializations compiled since it was made, per kernel: ``watch.new()`` is ``[[], ...]``
    when nothing compiled (what a warmup promises a CUDA-graph capture), else each kernel's new cache keys,
    which name the argument that was specialized differently."""

    def __init__(self, *kernels):
        self.kernels = kernels
        self.before = [self._keys(k) for k in kernels]

    @staticmethod
    def _keys(kernel) -> set:
        return {key for entry in getattr(kernel, "device_caches", {}).values() for key in entry[0]}

    def new(self) -> list[list[str]]:
        return [sorted(map(str, self._keys(k) - seen)) for k, seen in zip(self.kernels, self.before, strict=True)]
