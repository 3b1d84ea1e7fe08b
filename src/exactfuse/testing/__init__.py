"""Testing kit: contract checks of a provider against the native spec.

``check_provider`` runs native and a provider on the same case, the provider's
outputs poisoned with NaN before it runs, and applies the op's contract.
"""

from __future__ import annotations

import torch

from exactfuse.registry.case import Case
from exactfuse.registry.comparison import ordered_bits, ulp_distance
from exactfuse.registry.contracts import TOLERANCES, Bitwise, CheckResult, Contract, Tolerance, Ulp
from exactfuse.registry.op import Op
from exactfuse.testing.calls import CompileWatch, clone_args, collect_outputs
from exactfuse.testing.inputs import make_generator, randn, randn_with_specials
from exactfuse.testing.on_device import check_call, check_on_device
from exactfuse.utils import empty, poison_outputs


def check_provider(op: Op, provider: str, case: Case, contract: Contract | None = None) -> CheckResult:
    """Run ``provider`` and native on ``case``; check the contract on every output."""
    n_args, n_kwargs = clone_args(case.args, case.kwargs)
    expected = collect_outputs(op, op.run_provider("native", *n_args, **n_kwargs), n_args, n_kwargs)
    if contract is None:
        first = next((a for a in case.args if isinstance(a, torch.Tensor)), None)
        dtype = expected[0].dtype if expected else first.dtype
        contract = op.contract_for(dtype, first.device.type if first is not None else "cuda")
    p_args, p_kwargs = clone_args(case.args, case.kwargs)
    run = lambda: op.run_provider(provider, *p_args, **p_kwargs)  # noqa: E731  (check_call runs it once)
    return check_call(op, run, p_args, p_kwargs, expected, contract, compare=check_on_device)


def assert_contract_matrix(op: Op, device, dtype: torch.dtype, *, quick: bool = False, provider: str = "triton"):
    """Every declared case of ``op`` on ``device``: ``provider`` accepts it and meets the contract; the
    failures are listed together."""
    failures, ran = [], 0
    for case in op.iter_cases(device, dtype, quick=quick):  # one case's tensors alive at a time
        assert op.providers[provider].accepts(*case.args, **case.kwargs) is True, case.id
        result = check_provider(op, provider, case)
        ran += 1
        if not result.passed:
            failures.append(f"{case.id}: {result.summary()}")
        del case  # before the generator builds the next one
    assert ran and not failures, "\n".join(failures)


__all__ = [
    "TOLERANCES",
    "Bitwise",
    "CheckResult",
    "CompileWatch",
    "Contract",
    "Tolerance",
    "Ulp",
    "assert_contract_matrix",
    "check_call",
    "check_on_device",
    "check_provider",
    "clone_args",
    "collect_outputs",
    "empty",
    "make_generator",
    "ordered_bits",
    "poison_outputs",
    "randn",
    "randn_with_specials",
    "ulp_distance",
]
