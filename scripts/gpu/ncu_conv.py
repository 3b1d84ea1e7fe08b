"""Nsight Compute profile of the conv family where it stays below its targets: causal_conv1d prefill beside
fla-core's conv, and short_conv decode in both state layouts.

``bash scripts/gpu/run.sh ncu conv`` profiles one call each (after a warm call) of:

- causal_conv1d at ``B1-L8192-C10240-K4`` (SiLU, bias, slot cache), exactfuse's launch (lean kernel, then
  the row kernel's fixup launch and the state write-back) and fla-core's ``causal_conv1d`` on the same
  inputs, each with the SiLU and without an activation: what bounds a kernel that stays under half the
  copy rate (issue slots against DRAM), and what the SiLU adds to it;
- short_conv decode at ``R256`` with the state as ``[slot, C, W]`` (``cw``) and as ``[slot, W, C]`` (``wc``):
  the same kernel over the same bytes at 58% and 97% of the roofline.

Options (``ncu conv --prefill B64-L128-C10240-K4 --activations silu --tile``): ``--prefill`` the causal_conv1d
grid shapes (comma-separated; default ``B1-L8192-C10240-K4``), ``--activations`` ``silu`` and/or ``none``,
``--decode`` the short_conv decode shapes (default ``decode-R256-cw,decode-R256-wc``; ``-`` none), ``--tile``
also each ``cw`` decode shape with the register window the rule gives slots that are not dense
(``conv_config(..., dense_windows=False)``), beside the flat run the rule gives dense ones, its residual and
state first checked bit for bit against the shipped rule's.

Per kernel it prints time, DRAM throughput, occupancy, registers, issue-slot use and the largest
warp-stall reasons. Checked first: exactfuse's outputs against the spec bit for bit (its contract), and
FLA's within 2e-2 of them.
"""

import argparse

from ncu_summary import main, profile_calls


def profile() -> None:
    import torch
    from sweep_conv import run_decode

    from exactfuse.ops.conv import _short_conv, heuristics
    from exactfuse.testing import clone_args
    from exactfuse.testing.cases.conv import _causal_grid, _short_conv_grid

    parser = argparse.ArgumentParser()
    parser.add_argument("--prefill", default="B1-L8192-C10240-K4")
    parser.add_argument("--activations", default="silu,none")
    parser.add_argument("--decode", default="decode-R256-cw,decode-R256-wc")
    parser.add_argument("--tile", action="store_true")
    opts = parser.parse_args()
    device = torch.device("cuda")
    activations = [None if a == "none" else a for a in opts.activations.split(",")]
    calls = []
    for case in [lazy.materialize() for lazy in _causal_grid(device, torch.bfloat16, opts.prefill.split(","))]:
        calls += _prefill_calls(case, activations)
    decode = _short_conv_grid(device, torch.bfloat16, opts.decode.split(",")) if opts.decode != "-" else []
    for lazy in decode:
        case = lazy.materialize()
        (a, k), (sa, sk) = clone_args(case.args, case.kwargs), clone_args(case.args, case.kwargs)
        _short_conv.run_provider("triton", *a, **k)
        _short_conv.run_provider("native", *sa, **sk)
        pairs = zip([*a, *k.values()], [*sa, *sk.values()], strict=True)
        assert all(torch.equal(x, y) for x, y in pairs if isinstance(x, torch.Tensor)), f"{case.id}: not the spec's"
        calls.append(lambda a=a, k=k: _short_conv.run_provider("triton", *a, **k))
        if opts.tile and case.id.endswith("-cw"):
            bound = _short_conv.signature.bind(*case.args, **case.kwargs).arguments
            C, K = bound["weight"].shape
            window = (K - 1) * bound["dilation"]  # [slot, C, W] slots: not contiguous, dense
            ref_call, ref_res, ref_state = run_decode(case, heuristics.conv_config(C, window, "decode", False, True))
            ref_call()
            tile_call, res, state = run_decode(case, heuristics.conv_config(C, window, "decode", False, False))
            tile_call()
            assert torch.equal(res, ref_res) and torch.equal(state, ref_state), f"{case.id}: the two paths differ"
            calls.append(tile_call)
    profile_calls(calls)


def _prefill_calls(case, activations) -> list:
    """exactfuse's causal_conv1d and fla-core's on ``case`` with each activation, checked first."""
    import torch

    from exactfuse.bench.peers.conv import _fla_causal_conv1d
    from exactfuse.ops.conv import _causal_conv1d
    from exactfuse.testing import clone_args

    calls = []
    for activation in activations:
        bound = _causal_conv1d.signature.bind(*case.args, **case.kwargs)
        bound.arguments["activation"] = activation
        args, kwargs = bound.args, bound.kwargs
        (a, k), (sa, sk) = clone_args(args, kwargs), clone_args(args, kwargs)
        ours = _causal_conv1d.run_provider("triton", *a, **k)
        assert torch.equal(ours, _causal_conv1d.run_provider("native", *sa, **sk)), f"{activation}: not the spec's"
        fla = _fla_causal_conv1d(*clone_args(args, kwargs))
        assert torch.allclose(fla().float(), ours.float(), atol=2e-2, rtol=2e-2), "FLA's output is not within 2e-2"
        calls += [lambda a=a, k=k: _causal_conv1d.run_provider("triton", *a, **k), fla]
    return calls


if __name__ == "__main__":
    main(profile)
