"""``verify --jobs``'s plan of a split row (``exactfuse_cli/plan.py``): the cases that launch the same kernel
specializations checked in one part, found from dry launches that compile and run nothing; the parts still
check each case once, and ``merge_parts`` fails a row whose parts did not."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from exactfuse.registry import OPS
from exactfuse_cli import plan, verify


@triton.jit
def _fill_kernel(p_out, n, VALUE: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(p_out + o, tl.full([BLOCK], VALUE, tl.float32), mask=o < n)


@pytest.mark.interpreter
def test_a_dry_launch_records_its_specialization_and_runs_nothing():
    out = torch.zeros(8)
    with plan.launches_recorded() as seen:
        _fill_kernel[(1,)](out, 8, VALUE=1.0, BLOCK=8)
        _fill_kernel[(1,)](out, 8, VALUE=1.0, BLOCK=8)
        _fill_kernel[(1,)](out, 7, VALUE=2.0, BLOCK=8)  # another constexpr, another specialization
    assert torch.equal(out, torch.zeros(8))
    assert len(seen) == 3 and seen[0] == seen[1] != seen[2]
    assert seen[0][0] == "_fill_kernel" and ("VALUE", "1.0") in seen[0] and ("VALUE", "2.0") in seen[2]
    assert ("n", (False, False)) in seen[2] and ("p_out", ("torch.float32", True)) in seen[0]
    _fill_kernel[(1,)](out, 8, VALUE=1.0, BLOCK=8)  # launches again once the block is left
    assert torch.equal(out, torch.ones(8))


@pytest.mark.interpreter
def test_a_fast_math_proof_made_during_dry_launches_is_the_real_one():
    """The proof kernel's results are read back at once: dry launches run it (and do not record it), so the
    proof cached then is the one made outside them."""
    from exactfuse.ops import fastmath

    fastmath.clear_proofs()
    real = fastmath.proof("silu", torch.float16, "cpu")
    fastmath.clear_proofs()
    with plan.launches_recorded() as seen:
        dry = fastmath.proof("silu", torch.float16, "cpu")
    fastmath.clear_proofs()
    assert dry == real and seen == []
    assert [c.differing for c in dry.checks] == [c.differing for c in real.checks]


def test_the_plan_keeps_cases_of_one_specialization_together_and_the_parts_even():
    a, b, c, d = (frozenset({k}) for k in "abcd")
    assert plan.plan_parts([a, b, a, b], 2) == [0, 1, 0, 1]
    assert plan.plan_parts([a, a, b, b], 2) == [0, 0, 1, 1]  # where index mod 2 would compile a and b twice
    owners = plan.plan_parts([a | b, a, b, c, d, c | d], 2)
    assert owners[:3] == [owners[0]] * 3 and owners[3:] == [owners[3]] * 3 and owners[0] != owners[3]
    assert plan.plan_parts([frozenset()] * 5, 2) == [0, 1, 0, 1, 0]  # nothing launched: by count


def test_parts_that_miss_a_case_or_check_one_twice_fail_the_row():
    def part(owned, walked=4):
        return {"cases": len(owned), "declined": 0, "failed": 0, "max_abs_err": 0.0, "max_ulp": 0,
                "first_failure": "", "owned": owned, "walked": walked}  # fmt: skip

    assert verify.merge_parts([part([0, 2]), part([1, 3])])["failed"] == 0
    for parts in ([part([0, 2]), part([1])], [part([0, 1, 2]), part([2, 3])], [part([0, 1]), part([2, 3], 5)]):
        merged = verify.merge_parts(parts)
        assert merged["failed"] == 1 and "did not check each case once" in merged["first_failure"], merged


@pytest.mark.interpreter
def test_planned_parts_check_each_case_once_compile_less_and_merge_to_the_whole_row():
    """causal_conv1d's quick row in 4 planned parts on the interpreter: each part checks the cases the plan
    gives it, together each case once, into the whole row's result; the parts' specializations, summed, are
    fewer than those of the parts by index mod 4."""
    _check_planned_parts(torch.device("cpu"), torch.float32)


@pytest.mark.gpu
def test_gpu_planned_parts_check_each_case_once_compile_less_and_merge_to_the_whole_row():
    """The same on a GPU in bf16, where the dry launches stand in for compiled kernels (``JITFunction``) and a
    split row of a compiler-visible op is planned by default."""
    _check_planned_parts(torch.device("cuda"), torch.bfloat16)


def _check_planned_parts(device: torch.device, dtype: torch.dtype) -> None:
    op, parts = OPS["causal_conv1d"], 4
    keys = plan.case_keys(op, "triton", dtype, device, True)
    triton = op.providers["triton"]
    accepted = [triton.accepts(*c.args, **c.kwargs) is True for c in op.iter_cases(device, dtype, quick=True)]
    assert [bool(k) for k in keys] == accepted  # a case the provider takes launches, one it declines does not
    assert len(frozenset().union(*keys)) > parts
    owners = plan.case_owners(op, "triton", dtype, device, True, parts)
    assert owners == plan.plan_parts(keys, parts)

    def compiled(owner_of) -> int:
        return sum(len(frozenset().union(*[k for i, k in enumerate(keys) if owner_of(i) == p])) for p in range(parts))

    assert compiled(owners.__getitem__) < compiled(lambda i: i % parts)
    whole = verify.verify_op(op, "triton", dtype, device, True)
    planned = None if device.type == "cuda" else True  # the default on a GPU
    split = [verify.verify_op(op, "triton", dtype, device, True, p, parts, planned) for p in range(parts)]
    assert [r["owned"] for r in split] == [[i for i, o in enumerate(owners) if o == p] for p in range(parts)]
    assert whole["cases"] == len(keys) and whole["failed"] == 0
    merged = verify.merge_parts(split)
    assert merged == {k: v for k, v in whole.items() if k not in ("owned", "walked")}
