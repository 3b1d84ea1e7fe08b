"""The correctness gate run before timing: a candidate's outputs against native.

As ``exactfuse.testing.check_provider`` does, the candidate runs with its outputs NaN-poisoned and every
output (the result, and for mutating ops the mutated arguments) is checked where it lies
(``exactfuse.testing.on_device``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from exactfuse.registry.contracts import CheckResult, Contract
from exactfuse.registry.op import Op
from exactfuse.testing.calls import clone_args, collect_outputs
from exactfuse.testing.on_device import CHUNK, bit_identical, check_output, device_check
from exactfuse.utils import poison_outputs

__all__ = ["CHUNK", "bit_identical", "check_output", "clone_args", "device_check", "reference_outputs", "run_gate"]


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
) -> CheckResult:
    """Run ``prepare(args, kwargs)()`` once, outputs poisoned, and check it against ``expected``."""
    if op.mutates_args:
        args, kwargs = clone_args(args, kwargs)
    call = prepare(args, kwargs)
    with poison_outputs():
        actual = collect_outputs(op, call(), args, kwargs)
    if len(actual) != len(expected):
        return CheckResult(False, contract.name, 0, detail=f"{len(actual)} outputs, expected {len(expected)}")
    results = [check_output(contract, a, e, args, kwargs, op) for a, e in zip(actual, expected, strict=True)]
    failed = [r for r in results if not r.passed]
    if failed:
        return failed[0]
    return max(results, key=lambda r: (r.max_ulp, r.max_abs_err), default=CheckResult(True, contract.name, 0))
