"""Nsight Compute profile of the conv family where it stays below its targets: causal_conv1d prefill beside
fla-core's conv, and short_conv decode in both state layouts.

``bash scripts/gpu/run.sh ncu conv`` profiles one call each (after a warm call) of:

- causal_conv1d at ``B1-L8192-C10240-K4`` (SiLU, bias, slot cache), exactfuse's launch (lean kernel, then
  the row kernel's fixup launch and the state write-back) and fla-core's ``causal_conv1d`` on the same
  inputs, each with the SiLU and without an activation: what bounds a kernel that stays under half the
  copy rate (issue slots against DRAM), and what the SiLU adds to it;
- short_conv decode at ``R256`` with the state as ``[slot, C, W]`` (``cw``) and as ``[slot, W, C]`` (``wc``):
  the same kernel over the same bytes at 58% and 97% of the roofline.

Per kernel it prints time, DRAM throughput, occupancy, registers, issue-slot use and the largest
warp-stall reasons. Checked first: exactfuse's outputs against the spec bit for bit (its contract), and
FLA's within 2e-2 of them.
"""

from ncu_summary import main, profile_calls


def profile() -> None:
    import torch

    from exactfuse.ops.conv import _causal_conv1d, _short_conv
    from exactfuse.ops.conv.inputs import _causal_grid, _short_conv_grid
    from exactfuse.ops.conv.peers import _fla_causal_conv1d
    from exactfuse.testing import clone_args

    device = torch.device("cuda")
    (case,) = [lazy.materialize() for lazy in _causal_grid(device, torch.bfloat16, ["B1-L8192-C10240-K4"])]
    calls = []
    for activation in ("silu", None):
        bound = _causal_conv1d.signature.bind(*case.args, **case.kwargs)
        bound.arguments["activation"] = activation
        args, kwargs = bound.args, bound.kwargs
        (a, k), (sa, sk) = clone_args(args, kwargs), clone_args(args, kwargs)
        ours = _causal_conv1d.run_provider("triton", *a, **k)
        assert torch.equal(ours, _causal_conv1d.run_provider("native", *sa, **sk)), f"{activation}: not the spec's"
        fla = _fla_causal_conv1d(*clone_args(args, kwargs))
        assert torch.allclose(fla().float(), ours.float(), atol=2e-2, rtol=2e-2), "FLA's output is not within 2e-2"
        calls += [lambda a=a, k=k: _causal_conv1d.run_provider("triton", *a, **k), fla]
    for lazy in _short_conv_grid(device, torch.bfloat16, ["decode-R256-cw", "decode-R256-wc"]):
        decode = lazy.materialize()
        (a, k), (sa, sk) = clone_args(decode.args, decode.kwargs), clone_args(decode.args, decode.kwargs)
        _short_conv.run_provider("triton", *a, **k)
        _short_conv.run_provider("native", *sa, **sk)
        pairs = zip([*a, *k.values()], [*sa, *sk.values()], strict=True)
        assert all(torch.equal(x, y) for x, y in pairs if isinstance(x, torch.Tensor)), f"{decode.id}: not the spec's"
        calls.append(lambda a=a, k=k: _short_conv.run_provider("triton", *a, **k))
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)
