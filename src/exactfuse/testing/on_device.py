"""Contract checks evaluated where the tensors are (the GPU for GPU tests, verify and the bench gate).

Outputs of 10^8 to 10^9 elements are too big to copy to the host and check there, so:

1. bit-identical outputs pass any contract, decided with one compare on the device;
2. otherwise the standard contracts (``Bitwise``, ``Ulp``, ``Tolerance``, exact types) are evaluated on
   the device in chunks by :func:`device_check`, with the same pass/fail rule and statistics as their
   ``check``;
3. an op-specific contract (a subclass) runs its own ``check``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from exactfuse.registry.contracts import Bitwise, CheckResult, Contract, Tolerance, Ulp, ulp_distance
from exactfuse.registry.op import Op
from exactfuse.testing.calls import collect_outputs
from exactfuse.utils import poison_outputs

CHUNK = 1 << 26
_FLOATS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
STANDARD = (Bitwise, Ulp, Tolerance)  # the contracts device_check evaluates


def bit_identical(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Same shape, dtype and bits (any NaN matches any NaN), compared on the device."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype or actual.device != expected.device:
        return False
    if actual.dtype not in _FLOATS:
        return bool(torch.equal(actual, expected))
    view = _FLOATS[actual.dtype]
    differ = actual.view(view) != expected.view(view)
    return not bool((differ & ~(torch.isnan(actual) & torch.isnan(expected))).any())


def _abs_err(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    ad, ed = a.double(), e.double()
    err = (ad - ed).abs()
    same = (ad == ed) | (torch.isnan(ad) & torch.isnan(ed))
    return torch.where(same, torch.zeros_like(err), torch.nan_to_num(err, nan=float("inf")))


def _bad(contract: Contract, a: torch.Tensor, e: torch.Tensor, ulp: torch.Tensor) -> torch.Tensor:
    if isinstance(contract, Tolerance):
        atol, rtol = contract.tolerances(a.dtype)
        return ~torch.isclose(a.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True)
    if isinstance(contract, Ulp):
        return ulp > contract.n
    if a.dtype in _FLOATS:
        view = _FLOATS[a.dtype]
        return (a.view(view) != e.view(view)) & ~(torch.isnan(a) & torch.isnan(e))
    return a != e


def device_check(contract: Contract, actual: torch.Tensor, expected: torch.Tensor, chunk: int = CHUNK) -> CheckResult:
    """``contract.check`` for Bitwise/Ulp/Tolerance, evaluated where the tensors are, ``chunk`` elements at a time."""
    if (res := contract._shape_check(actual, expected)) is not None:
        return res
    a, e = actual.detach().reshape(-1), expected.detach().reshape(-1)
    floating = a.dtype in _FLOATS
    mismatches, max_err, max_ulp = 0, 0.0, 0
    worst_bad: tuple[float, int] | None = None
    worst_err: tuple[float, int] | None = None
    for start in range(0, a.numel(), chunk):
        ac, ec = a[start : start + chunk], e[start : start + chunk]
        err = _abs_err(ac, ec)
        ulp = ulp_distance(ac, ec) if floating else err.to(torch.int64)
        bad = _bad(contract, ac, ec, ulp)
        n_bad = int(bad.sum())
        mismatches += n_bad
        max_err = max(max_err, float(err.max()))
        max_ulp = max(max_ulp, int(ulp.max()))
        i = int(err.argmax())
        if worst_err is None or float(err[i]) > worst_err[0]:
            worst_err = (float(err[i]), start + i)
        if n_bad:
            score = torch.where(bad, 1 + err, torch.zeros_like(err))
            j = int(score.argmax())
            if worst_bad is None or float(score[j]) > worst_bad[0]:
                worst_bad = (float(score[j]), start + j)
    worst = worst_bad or worst_err
    index = None
    if worst is not None:
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst[1]), actual.shape))
    result = CheckResult(mismatches == 0, contract.name, a.numel(), mismatches, max_err, max_ulp, index)
    if isinstance(contract, Tolerance):
        atol, rtol = contract.tolerances(a.dtype)
        result.detail = f"atol {atol:g}, rtol {rtol:g}"
    return result


def check_on_device(
    contract: Contract, actual: torch.Tensor, expected: torch.Tensor, args: tuple, kwargs: dict, op: Op | None
) -> CheckResult:
    """``contract.check`` with its full result: on the device for the standard contracts (no copy to the
    host), the contract's own ``check`` otherwise (whose result may carry more, e.g. row counts)."""
    if type(contract) in STANDARD:
        return check_output(contract, actual, expected, args, kwargs, op)
    return contract.check(actual, expected, args=args, kwargs=kwargs, op=op)


def check_output(
    contract: Contract, actual: torch.Tensor, expected: torch.Tensor, args: tuple, kwargs: dict, op: Op
) -> CheckResult:
    """One output against the reference by the cheapest exact route (see the module doc)."""
    if bit_identical(actual, expected):
        return CheckResult(True, contract.name, expected.numel())
    if type(contract) in STANDARD:
        return device_check(contract, actual, expected)
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
