"""Nsight Compute of the conv family (bf16): causal_conv1d prefill, exactfuse's launch (the lean kernel, the
prefill kernel's fixup launch, the state write-back) beside fla-core's conv, each with ``--activations``
(``silu``, ``none``) on the ``--prefill`` grid shapes (default ``B1-L8192-C10240-K4``); short_conv decode on
``--decode`` (default ``decode-R256-cw,decode-R256-wc``; ``-`` none), with ``--tile`` also each ``cw`` shape at
the register window the rule gives slots that are not dense; causal_conv1d_fn (the stateless prefill, one
launch) beside FLA's own stateless call on ``--fn`` (default ``-``: none; e.g. ``B1-L512-C4096-K4``). Each output
is checked first: exactfuse's bit for bit against the spec (or the shipped rule's), FLA's within 2e-2."""

import argparse

import torch
from common import ncu_main
from sweep_conv import launch

from exactfuse.bench.peers.conv import _fla_causal_conv1d, _fla_causal_conv1d_fn
from exactfuse.ops.conv import _causal_conv1d, _causal_conv1d_fn, _short_conv, heuristics
from exactfuse.testing import clone_args
from exactfuse.testing.cases.conv_grids import _causal_grid, _fn_grid, _short_conv_grid


def calls() -> list:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefill", default="B1-L8192-C10240-K4")
    parser.add_argument("--activations", default="silu,none")
    parser.add_argument("--decode", default="decode-R256-cw,decode-R256-wc")
    parser.add_argument("--tile", action="store_true")
    parser.add_argument("--fn", default="-")
    opts = parser.parse_args()
    device, out = torch.device("cuda"), []

    def checked(op, case):  # exactfuse's launch, checked bit for bit against the spec
        (a, k), (sa, sk) = clone_args(case.args, case.kwargs), clone_args(case.args, case.kwargs)
        ours = op.run_provider("triton", *a, **k)
        spec = op.run_provider("native", *sa, **sk)
        pairs = [(ours, spec), *zip([*a, *k.values()], [*sa, *sk.values()], strict=True)]
        assert all(torch.equal(x, y) for x, y in pairs if isinstance(x, torch.Tensor)), f"{case.id}: not the spec's"
        out.append(lambda: op.run_provider("triton", *a, **k))
        return ours

    for case in (lazy.materialize() for lazy in _causal_grid(device, torch.bfloat16, opts.prefill.split(","))):
        for activation in [None if a == "none" else a for a in opts.activations.split(",")]:
            bound = _causal_conv1d.signature.bind(*case.args, **case.kwargs)
            bound.arguments["activation"] = activation
            ours = checked(_causal_conv1d, type(case)(case.id, bound.args, bound.kwargs))
            fla = _fla_causal_conv1d(*clone_args(bound.args, bound.kwargs))
            assert torch.allclose(fla().float(), ours.float(), atol=2e-2, rtol=2e-2), "FLA's output is not within 2e-2"
            out.append(fla)
    stateless = _fn_grid(device, torch.bfloat16, opts.fn.split(",")) if opts.fn != "-" else []
    for case in (lazy.materialize() for lazy in stateless):
        ours = checked(_causal_conv1d_fn, case)
        fla = _fla_causal_conv1d_fn(*clone_args(case.args, case.kwargs))
        assert torch.allclose(fla().float().view_as(ours), ours.float(), atol=2e-2, rtol=2e-2), "FLA's output differs"
        out.append(fla)
    decode = _short_conv_grid(device, torch.bfloat16, opts.decode.split(",")) if opts.decode != "-" else []
    for case in (lazy.materialize() for lazy in decode):
        checked(_short_conv, case)
        if opts.tile and case.id.endswith("-cw"):
            bound = _short_conv.signature.bind(*case.args, **case.kwargs).arguments
            C, K = bound["weight"].shape
            window = (K - 1) * bound["dilation"]
            config = heuristics.conv_config  # [slot, C, W] slots: not contiguous, dense (the rule) or not
            _, ref_res, ref_state = launch(_short_conv, case, config(C, window, "decode", False, True))
            tile_call, res, state = launch(_short_conv, case, config(C, window, "decode", False, False))
            assert torch.equal(res, ref_res) and torch.equal(state, ref_state), f"{case.id}: the two paths differ"
            out.append(tile_call)
    return out


if __name__ == "__main__":
    ncu_main(calls)
