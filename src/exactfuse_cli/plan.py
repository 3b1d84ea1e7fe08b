"""Which cases of a verify row each of its parts checks (``verify --jobs``): cases that launch the same kernel
specializations go to the same part where the parts stay even, so that a specialization compiles in one
worker, not in several at once.

The cases' launches are found dry: every Triton launch of the provider on each case is recorded as the
specialization it would compile (:func:`compile_key`) and not run, so nothing compiles and nothing launches
(but the fast-math proofs, whose results the host reads at once: :func:`launches_recorded`).
Every part of a row finds the same launches (the cases come from one seeded stream, and the launchers of a
compiler-visible op choose from shapes and constants, never from a tensor's values) and so the same plan;
``verify.merge_parts`` checks that the parts checked each case once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator

import torch


def _kernel_classes() -> list[type]:
    """The classes whose ``run`` launches a Triton kernel: compiled (``JITFunction``, Gluon's too) and, under
    ``TRITON_INTERPRET=1``, interpreted."""
    from triton.runtime.jit import JITFunction

    classes = [JITFunction]
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    return classes


@functools.cache
def _signature(fn: Callable) -> tuple[tuple[str, bool], ...]:
    """``(name, constexpr)`` of each parameter of a kernel's Python function."""
    return tuple((p.name, "constexpr" in str(p.annotation)) for p in inspect.signature(fn).parameters.values())


def _not_specialized(kernel) -> set:
    names = getattr(kernel, "do_not_specialize", None)
    if names is None:  # an interpreted kernel keeps its decorator's arguments
        names = getattr(kernel, "kwargs", {}).get("do_not_specialize")
    return set(names or ())


def _arg_key(value, constexpr: bool, specialized: bool):
    """What of an argument selects the compiled specialization: a constexpr's value; a tensor's dtype and
    16-byte alignment; an integer's being 1 or a multiple of 16 (unless it is not specialized)."""
    if constexpr:
        return repr(value)
    if isinstance(value, torch.Tensor):
        return str(value.dtype), value.data_ptr() % 16 == 0
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return (value == 1, value % 16 == 0) if specialized else "int"
    return type(value).__name__


def compile_key(kernel, args: tuple, kwargs: dict) -> tuple:
    """The specialization a launch of ``kernel`` with these arguments compiles: its name, each argument's
    :func:`_arg_key` and the launch options (``num_warps`` and the like). A stand-in for Triton's own cache
    key, close enough to tell launches that share a compile from ones that do not."""
    params = _signature(kernel.fn)
    unspecialized = _not_specialized(kernel)
    bound = dict(zip((name for name, _ in params), args, strict=False))  # defaults not passed
    bound.update(kwargs)
    key = [kernel.fn.__name__]
    for i, (name, constexpr) in enumerate(params):
        if name in bound:
            specialized = name not in unspecialized and i not in unspecialized
            key.append((name, _arg_key(bound.pop(name), constexpr, specialized)))
    key += sorted((name, repr(value)) for name, value in bound.items())
    return tuple(key)


@contextlib.contextmanager
def launches_recorded() -> Iterator[list[tuple]]:
    """A list that receives the :func:`compile_key` of every Triton launch in the block; the launches return
    None without compiling or running anything, but for a kernel whose results the host reads at once (one
    marked ``runs_when_dry``: the fast-math proofs, ``exactfuse.ops.fastmath``), which runs and is not
    recorded: a proof read from memory no kernel wrote would choose a formula at random."""
    seen: list[tuple] = []
    real = {cls: cls.run for cls in _kernel_classes()}

    def run(self, *args, grid=None, warmup=False, **kwargs):
        if getattr(self, "runs_when_dry", False):
            return next(f for cls, f in real.items() if isinstance(self, cls))(
                self, *args, grid=grid, warmup=warmup, **kwargs
            )
        seen.append(compile_key(self, args, kwargs))

    saved = [(cls, cls.__dict__.get("run")) for cls in _kernel_classes()]
    for cls, _ in saved:
        cls.run = run
    try:
        yield seen
    finally:
        for cls, own in saved:
            if own is None:  # inherited: the base class's again
                del cls.run
            else:
                cls.run = own


def plan_parts(keys: list[frozenset], parts: int) -> list[int]:
    """Each case's part, from each case's set of specializations: cases taken largest set first (ties: the
    earlier case), each to the part whose set of specializations it leaves smallest, then to the one it adds
    fewest to, then to the one with fewest cases (then the first). The parts' sets stay even and overlap
    little: a part's compile time is about its set's size."""
    taken: list[set] = [set() for _ in range(parts)]
    counts = [0] * parts
    owner = [0] * len(keys)
    for i in sorted(range(len(keys)), key=lambda i: (-len(keys[i]), i)):
        best = min(range(parts), key=lambda p: (len(taken[p] | keys[i]), len(keys[i] - taken[p]), counts[p], p))
        taken[best] |= keys[i]
        counts[best] += 1
        owner[i] = best
    return owner


def case_keys(op, provider: str, dtype: torch.dtype, device: torch.device, quick: bool) -> list[frozenset]:
    """Each of the row's cases' specializations (:func:`compile_key`), in ``op.iter_cases`` order, from dry
    launches. A case the provider declines launches nothing; one whose dry call raises keeps the launches
    before it (its check will meet the error)."""
    keys = []
    with launches_recorded() as seen:
        for case in op.iter_cases(device, dtype, quick=quick):  # one case's tensors alive at a time
            seen.clear()
            if op.providers[provider].accepts(*case.args, **case.kwargs) is True:
                with contextlib.suppress(Exception):
                    op.run_provider(provider, *case.args, **case.kwargs)
            keys.append(frozenset(seen))
            del case
    return keys


def case_owners(op, provider: str, dtype: torch.dtype, device: torch.device, quick: bool, parts: int) -> list[int]:
    """The part (of ``parts``) that checks each of the row's cases: :func:`plan_parts` over :func:`case_keys`."""
    return plan_parts(case_keys(op, provider, dtype, device, quick), parts)
