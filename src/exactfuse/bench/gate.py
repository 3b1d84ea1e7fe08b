"""The correctness gate run before timing: a candidate's outputs against native.

Through the check ``exactfuse.testing.check_provider`` uses (``exactfuse.testing.on_device.check_call``):
the candidate runs with its outputs NaN-poisoned and every output (the result, and for mutating ops the
mutated arguments) is checked where it lies.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from exactfuse.registry.contracts import CheckResult, Contract
from exactfuse.registry.op import Op
from exactfuse.testing.calls import clone_args, collect_outputs
from exactfuse.testing.on_device import bit_identical, check_call, check_output

__all__ = ["bit_identical", "check_output", "clone_args", "reference_outputs", "run_gate"]


def reference_outputs(op: Op, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """Native's outputs on a copy of the arguments when the op mutates them."""
    if op.mutates_args:
        args, kwargs = clone_args(args, kwargs)
    return collect_outputs(op, op.native(*args, **kwargs), args, kwargs)


def run_gate(
    op: Op,
    prepare: Callable[[tuple, dict], Callable[[], object]],
    args: tuple,
    kwargs: dict,
    expected: list[torch.Tensor],
    contract: Contract,
    result_only: bool = False,
) -> CheckResult:
    """Run ``prepare(args, kwargs)()`` once, outputs poisoned, and check it against ``expected`` (the result
    alone where ``result_only``: a peer that keeps no state of the op's)."""
    if op.mutates_args:
        args, kwargs = clone_args(args, kwargs)
    return check_call(op, prepare(args, kwargs), args, kwargs, expected, contract, result_only=result_only)
