"""Nsight Compute profile of causal_conv1d_update's decode step beside fla-core's update, on FLA's own state
(the grid's ``-lastK`` cases, bf16): what bounds each kernel at B = 64 and B = 1024 (DRAM against issue
slots, stalls), where exactfuse measures 0.87-0.96x FLA's time.

``bash scripts/gpu/run.sh ncu conv_update`` profiles one call each, after a warm call; FLA runs at the
fastest configuration of its autotuner's set for each shape (the ``fla`` peer's choice,
``peers._fla_update_config``, timed before the profiled region). Checked first: exactfuse's output and
state against the spec bit for bit, FLA's within 2e-2 of them.
"""

from ncu_summary import main, profile_calls


def profile() -> None:
    import torch

    from exactfuse.bench.peers.conv import _fla_causal_conv1d_update
    from exactfuse.ops.conv import _causal_conv1d_update
    from exactfuse.testing import clone_args
    from exactfuse.testing.cases.conv import _update_grid

    device = torch.device("cuda")
    calls = []
    for lazy in _update_grid(device, torch.bfloat16, ["B64-C10240-K4-lastK", "B1024-C10240-K4-lastK"]):
        case = lazy.materialize()
        (a, k), (sa, sk), (fa, fk) = (clone_args(case.args, case.kwargs) for _ in range(3))
        ours = _causal_conv1d_update.run_provider("triton", *a, **k)
        spec = _causal_conv1d_update.run_provider("native", *sa, **sk)
        assert torch.equal(ours, spec) and torch.equal(a[1], sa[1]), f"{case.id}: not the spec's"
        fla = _fla_causal_conv1d_update(fa, fk)
        out = fla()
        assert torch.allclose(out.float(), ours.float(), atol=2e-2, rtol=2e-2), f"{case.id}: FLA not within 2e-2"
        calls += [lambda a=a, k=k: _causal_conv1d_update.run_provider("triton", *a, **k), fla]
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)
