"""Every op's cost functions (bytes and flops for the roofline) take every one of its declared cases: a
bench row whose cost raises has no roofline, and verify's cases are the shapes the bench grids extend."""

from __future__ import annotations

import pytest
import torch

import exactfuse
from exactfuse.registry import OPS


@pytest.mark.parametrize("name", sorted(OPS))
def test_cost_functions_take_every_declared_case(name):
    op = exactfuse.get(name)
    op.load_declarations()
    dtype = torch.float16 if torch.float16 in op.dtypes else op.dtypes[0]
    for case in op.cases("cpu", dtype, quick=True):
        for what, fn in (("bytes", op.bytes_fn), ("flops", op.flops_fn)):
            if fn is not None:
                value = fn(*case.args, **case.kwargs)
                assert value is None or value >= 0, f"{name} {case.id}: {what} = {value}"
