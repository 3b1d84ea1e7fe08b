"""Registration of every op as ``torch.ops.exactfuse.<name>``.

``compiler="visible"``: ``torch.library.triton_op``. Inductor traces into the body, and the kernels it
launches through ``wrap_triton`` become graph nodes it can schedule. ``compiler="opaque"``:
``torch.library.custom_op`` with a fake (the native spec by default, run on fake tensors), so compiled
graphs hold one opaque node and the Python launch logic (tile or split choice) runs per call.

Under the Triton interpreter (``TRITON_INTERPRET=1``, CPU) every op registers as opaque: ``wrap_triton``
hands an interpreted kernel back unwrapped (no higher-order op), so a traced ``triton_op`` body would
try to run it on fake tensors; as an opaque op with a fake, compile and export trace on the CPU and the
interpreted kernels run when the graph runs.

Either way the registered body is the registry's own dispatch. The opaque op's body always runs on
plain tensors, so its kernels launch directly (``direct_triton_launches``), as ``triton_op`` does for
plain tensors itself.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from exactfuse.registry.platform import interpreter_enabled

if TYPE_CHECKING:
    from exactfuse.registry.op import Op

NAMESPACE = "exactfuse"

try:  # torch >= 2.6; private, so guarded: the thread-local flag torch's set_wrap_triton_enabled toggles
    from torch._library.triton import wrap_triton_enabled as _WRAP_TRITON
    from torch._library.triton import wrap_triton_enabled_default as _WRAP_TRITON_DEFAULT
except ImportError:  # pragma: no cover - older torch: every launch goes through wrap_triton's dispatch
    _WRAP_TRITON = _WRAP_TRITON_DEFAULT = None


class direct_triton_launches:  # noqa: N801 - used as a context manager, like a function
    """Within it, kernels launched through ``torch.library.wrap_triton`` launch directly instead of through
    its higher-order op: the shortcut ``torch.library.triton_op`` takes itself when it runs on plain
    tensors. Only for calls on plain tensors outside any trace (a trace needs the higher-order op).

    It sets the flag that ``torch._library.triton.set_wrap_triton_enabled`` sets, without that
    generator-based context manager: 1.0 against 3.3 µs per call (timeit, on a 2-core CPU).
    """

    __slots__ = ("previous",)

    def __enter__(self) -> None:
        if _WRAP_TRITON is not None:
            self.previous = getattr(_WRAP_TRITON, "value", _WRAP_TRITON_DEFAULT)
            _WRAP_TRITON.value = False

    def __exit__(self, *exc) -> None:
        if _WRAP_TRITON is not None:
            _WRAP_TRITON.value = self.previous


def schema_signature(op: Op) -> inspect.Signature:
    """The op's signature as registered: a mutating op's parameters up to its last mutated one have no
    default. The dispatcher drops trailing arguments equal to their defaults before it calls a Python
    kernel, and torch 2.11's version bump of mutated arguments (custom_op's ADInplaceOrView kernel)
    indexes them by schema position: ``causal_conv1d(x, weight, bias)`` traced with ``conv_state``
    left to None raised IndexError. Traced calls pass every argument (``Op._schema_args``)."""
    params = list(op.signature.parameters.values())
    last = max((i for i, p in enumerate(params) if p.name in op.mutates_args), default=-1)
    return op.signature.replace(
        parameters=[p.replace(default=inspect.Parameter.empty) if i <= last else p for i, p in enumerate(params)]
    )


def _with_signature(fn: Callable, op: Op) -> Callable:
    signature = schema_signature(op)

    @functools.wraps(op.native)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapper.__signature__ = signature
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in signature.parameters.values()},
        "return": signature.return_annotation,
    }
    return wrapper


class _SourcelessBody:
    """A ``triton_op`` body as a callable object rather than a function.

    ``torch.library.triton_op`` reads its body's source at registration to list the ``wrap_triton``
    kernels written in it (AOTAutograd's cache key), and imports Inductor to parse it: 1.4 s of
    ``import exactfuse`` on a 2-core CPU, 5.5 s of 10.9 on a cold H200
    (benchmarks/results/h200/sweeps/verify_time_imports.txt). The registry's dispatch launches its
    kernels through the providers, never in the body, so that list is empty either way; an object has
    no source, so torch returns the same empty list without the import (``test_library``)."""

    def __init__(self, fn: Callable, op: Op) -> None:
        wrapped = _with_signature(fn, op)
        self._fn = fn
        self.__signature__ = wrapped.__signature__
        self.__annotations__ = wrapped.__annotations__
        self.__globals__ = wrapped.__globals__  # where torch's schema inference resolves string annotations
        self.__name__ = self.__qualname__ = op.name
        self.__module__ = wrapped.__module__
        self.__doc__ = wrapped.__doc__

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


def registers_opaque(op: Op) -> bool:
    """Whether ``op`` registers as an opaque ``custom_op`` here (its own kind, or any op under the interpreter)."""
    return op.compiler == "opaque" or interpreter_enabled()


def register_torch_op(op: Op):
    qualname = f"{NAMESPACE}::{op.name}"
    if not registers_opaque(op):
        torch.library.triton_op(qualname, _SourcelessBody(op.dispatch, op), mutates_args=op.mutates_args)
    else:

        def dispatch_directly(*args, **kwargs):
            with direct_triton_launches():
                return op.dispatch(*args, **kwargs)

        body = _with_signature(dispatch_directly, op)
        custom = torch.library.custom_op(qualname, body, mutates_args=op.mutates_args)
        custom.register_fake(_with_signature(op.fake or op.native, op))
    return getattr(getattr(torch.ops, NAMESPACE), op.name)
