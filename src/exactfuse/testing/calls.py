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
    when nothing compiled (what a warmup promises a CUDA-graph capture); else ``str(watch)`` names, for
    each new specialization, the arguments where it differs from the nearest one compiled before."""

    def __init__(self, *kernels):
        self.kernels = kernels
        self.before = [self._keys(k) for k in kernels]

    @staticmethod
    def _keys(kernel) -> set:
        return {key for entry in getattr(kernel, "device_caches", {}).values() for key in entry[0]}

    def new(self) -> list[list[str]]:
        return [sorted(map(str, self._keys(k) - seen)) for k, seen in zip(self.kernels, self.before, strict=True)]

    def __str__(self) -> str:
        lines = []
        for kernel, seen, new in zip(self.kernels, self.before, self.new(), strict=True):
            names = list(getattr(kernel, "arg_names", ()))
            for key in new:
                parts = _key_parts(key)
                nearest = min((_key_parts(str(k)) for k in seen), default=None,
                              key=lambda old: sum(a != b for a, b in zip(old, parts, strict=False)))  # fmt: skip
                if nearest is None:
                    lines.append(f"{getattr(kernel, '__name__', kernel)}: {key} (nothing compiled before)")
                    continue
                diff = [f"{names[i] if i < len(names) else i}: {a} -> {b}"
                        for i, (a, b) in enumerate(zip(nearest, parts, strict=False)) if a != b]  # fmt: skip
                lines.append(f"{getattr(kernel, '__name__', kernel)}: new specialization, {'; '.join(diff) or key}")
        return "\n".join(lines) or "nothing compiled"


def _key_parts(key: str) -> list[str]:
    """A Triton cache key's per-argument entries (``"('*bf16', 'D')"``, ...) and its options, as strings."""
    spec, _, options = key.rpartition("]")
    return [*spec.lstrip("[").split("), ("), options]
