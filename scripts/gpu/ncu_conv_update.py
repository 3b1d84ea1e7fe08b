"""Nsight Compute of causal_conv1d_update's decode step beside fla-core's update on FLA's own state (the grid's
``-lastK`` cases, bf16) at B = 64 and 1024, FLA at its peer's configuration; exactfuse's output and state
checked bit for bit against the spec first, FLA's within 2e-2."""

import torch
from common import ncu_main

from exactfuse.bench.peers.conv import _fla_causal_conv1d_update
from exactfuse.ops.conv import _causal_conv1d_update as op
from exactfuse.testing import clone_args
from exactfuse.testing.cases.conv_grids import _update_grid


def calls() -> list:
    out = []
    for lazy in _update_grid(torch.device("cuda"), torch.bfloat16, ["B64-C10240-K4-lastK", "B1024-C10240-K4-lastK"]):
        case = lazy.materialize()
        (a, k), (sa, sk), (fa, fk) = (clone_args(case.args, case.kwargs) for _ in range(3))
        ours = op.run_provider("triton", *a, **k)
        assert torch.equal(ours, op.run_provider("native", *sa, **sk)) and torch.equal(a[1], sa[1]), case.id
        fla = _fla_causal_conv1d_update(fa, fk)
        assert torch.allclose(fla().float(), ours.float(), atol=2e-2, rtol=2e-2), f"{case.id}: FLA not within 2e-2"
        out += [lambda a=a, k=k: op.run_provider("triton", *a, **k), fla]
    return out


if __name__ == "__main__":
    ncu_main(calls)
