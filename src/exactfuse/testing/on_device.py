"""Contract checks where the tensors are (the GPU for GPU tests, verify and the bench gate).

Outputs of 10^8 to 10^9 elements are too big to copy to the host and check there: every contract's
``check`` runs on the outputs' device, a chunk at a time (``exactfuse.registry.contracts``), and
bit-identical outputs pass any contract after one compare on the device (:func:`check_output`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from exactfuse.registry.contracts import Bitwise, CheckResult, Contract, Tolerance, Ulp, bits_differ
from exactfuse.registry.op import Op
from exactfuse.testing.calls import collect_outputs
from exactfuse.utils import poison_outputs

STANDARD = (Bitwise, Ulp, Tolerance)  # contracts whose result on bit-identical outputs is a plain pass


def bit_identical(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Same shape, dtype and bits (any NaN matches any NaN), compared on the device."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype or actual.device != expected.device:
        return False
    return not bool(bits_differ(actual, expected).any())


def check_on_device(
    contract: Contract, actual: torch.Tensor, expected: torch.Tensor, args: tuple, kwargs: dict, op: Op | None
) -> CheckResult:
    """``contract.check`` with its full result (a subclass's may carry more, e.g. row counts); the
    standard contracts by :func:`check_output`."""
    if type(contract) in STANDARD:
        return check_output(contract, actual, expected, args, kwargs, op)
    return contract.check(actual, expected, args=args, kwargs=kwargs, op=op)


def check_output(
    contract: Contract, actual: torch.Tensor, expected: torch.Tensor, args: tuple, kwargs: dict, op: Op
) -> CheckResult:
    """One output against the reference by the cheapest exact route (see the module doc)."""
    if bit_identical(actual, expected):
        return CheckResult(True, contract.name, expected.numel())
    return contract.check(actual, expected, args=args, kwargs=kwargs, op=op)


def check_call(
    op: Op,
    call: Callable[[], object],
    args: tuple,
    kwargs: dict,
    expected: list[torch.Tensor],
    contract: Contract,
    compare: Callable[..., CheckResult] = check_output,
    result_only: bool = False,
) -> CheckResult:
    """Run ``call()`` once with its outputs NaN-poisoned and check every output (the result, and for a
    mutating op the arguments ``args``/``kwargs`` it mutated) against ``expected`` by ``compare``
    (:func:`check_output`, or :func:`check_on_device` for the contract's full result), each output under
    its own contract where the op declares one per output (``PerOutput``): the first
    failure, else the pass with the largest error. ``exactfuse.testing.check_provider`` and the bench
    gate (``exactfuse.bench.gate.run_gate``) both check through it. ``result_only``: the result's outputs
    alone, the mutated arguments left out (a bench peer that keeps no state of the op's)."""
    with poison_outputs():
        result = call()
        actual = collect_outputs(op, result, args, kwargs)
    if result_only:
        actual = actual[: len(actual) - len(collect_outputs(op, None, args, kwargs))]
        expected = expected[: len(actual)]
    if len(actual) != len(expected):
        return CheckResult(False, contract.name, 0, detail=f"{len(actual)} outputs, expected {len(expected)}")
    contracts = contract.for_outputs(len(actual))  # one per output under PerOutput
    results = [compare(c, a, e, args, kwargs, op) for c, a, e in zip(contracts, actual, expected, strict=True)]
    failed = [r for r in results if not r.passed]
    if failed:
        return failed[0]
    return max(results, key=lambda r: (r.max_ulp, r.max_abs_err), default=CheckResult(True, contract.name, 0))
