"""Registration of every op as ``torch.ops.exactfuse.<name>``.

``compiler="visible"``: ``torch.library.triton_op``. Inductor traces into the
body, and the kernels it launches through ``wrap_triton`` become graph nodes
it can schedule. ``compiler="opaque"``: ``torch.library.custom_op`` with a fake
(the native spec by default, run on fake tensors), so compiled graphs hold one
opaque node and the Python launch logic (tile or split choice) runs per call.
Either way the registered body is the registry's own dispatch; the opaque op's body always runs on
plain tensors, so its kernels launch directly (``direct_triton_launches``), as ``triton_op`` does for
plain tensors itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from exactfuse.registry.op import Op

NAMESPACE = "exactfuse"


def _with_signature(fn: Callable, op: Op) -> Callable:
    @functools.wraps(op.native)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapper.__signature__ = op.signature
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in op.signature.parameters.values()},
        "return": op.signature.return_annotation,
    }
    return wrapper


def register_torch_op(op: Op):
    from exactfuse.registry.op import direct_triton_launches

    qualname = f"{NAMESPACE}::{op.name}"
    if op.compiler == "visible":
        torch.library.triton_op(qualname, _with_signature(op.dispatch, op), mutates_args=op.mutates_args)
    else:

        def dispatch_directly(*args, **kwargs):
            with direct_triton_launches():
                return op.dispatch(*args, **kwargs)

        body = _with_signature(dispatch_directly, op)
        custom = torch.library.custom_op(qualname, body, mutates_args=op.mutates_args)
        custom.register_fake(_with_signature(op.fake or op.native, op))
    return getattr(getattr(torch.ops, NAMESPACE), op.name)
