"""Nsight Compute profile of causal_conv1d prefill: exactfuse's row kernel with each tap's loads and with a
register window, beside fla-core's ``causal_conv1d`` (carried as a wheel), same inputs.

``bash scripts/gpu/run.sh ncu conv`` profiles one call of each (after a warm call) on the bench grid's
``B1-L8192-C10240-K4`` case and prints, per kernel, time, DRAM throughput, occupancy, registers,
issue-slot use and the largest warp-stall reasons.
"""

from ncu_summary import main, profile_calls

WINDOWED = {"unroll": 4}


def profile() -> None:
    import dataclasses

    import torch
    from sweep_conv import run

    from exactfuse.ops.short_conv import _causal_conv1d, heuristics
    from exactfuse.ops.short_conv.grids import _causal_grid
    from exactfuse.ops.short_conv.peers import _fla_causal_conv1d

    case = next(_causal_grid(torch.device("cuda"), torch.bfloat16, ("B1-L8192-C10240-K4",))).materialize()
    a = _causal_conv1d.signature.bind(*case.args, **case.kwargs).arguments
    C, K = a["weight"].shape
    shipped = heuristics.conv_config(C, K - 1, "prefill")
    calls = [run(case, shipped)[0], run(case, dataclasses.replace(shipped, **WINDOWED))[0]]
    calls.append(_fla_causal_conv1d(case.args, case.kwargs))
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)
