"""Helpers shared by the moe_silu_and_mul_backward test files: eager autograd's gradients,
the kernel called alone, the contract check and the edge-value inputs."""

from __future__ import annotations

import torch

import exactfuse
from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul, moe_silu_and_mul_backward
from exactfuse.testing import clone_args
from exactfuse.testing.calls import clone_value


def eager_autograd(grad, gateup, row_weights=None, interleaved=False, out_dtype=None):
    """Eager autograd's ``(d gateup, d row_weights or None)`` of the forward's native spec."""
    x = clone_value(gateup.detach()).requires_grad_(True)
    w = None if row_weights is None else clone_value(row_weights.detach()).requires_grad_(True)
    out = moe_silu_and_mul.native(x, w, interleaved, out_dtype)
    grads = torch.autograd.grad(out, [x] if w is None else [x, w], grad)
    return grads[0], (grads[1] if w is not None else None)


def kernel(*args):
    with exactfuse.poison_outputs():
        return moe_silu_and_mul_backward.run_provider("triton", *clone_args(args, {})[0])


def assert_within_contract(got, want, args, device_type):
    contracts = moe_silu_and_mul_backward.contract_for(args[1].dtype, device_type).for_outputs(2)
    for name, g, w, c in zip(("d_gateup", "d_row_weights"), got, want, contracts, strict=True):
        result = c.check(g, w, args=args, kwargs={})
        assert result.passed, f"{name}: {result.summary()}"


def edge_inputs(dtype, up_scale=30.0, grad_scale=4.0):
    """Gate values at the edges (NaN, +-Inf, +-0, subnormals, |g| where the sigmoid saturates or
    underflows, the cancellation of the gate's two gradient terms near g = -1.28) against signs, zeros
    and scales of up and of the gradient: ``gate, up, grad [n, 8]``."""
    tiny = torch.finfo(dtype).smallest_normal / 4
    big = min(torch.finfo(dtype).max, 1e30)
    gates = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, tiny, -tiny, 1e-3, -1e-3, 3.0, -3.0, -1.278,
             20.0, -20.0, 100.0, -100.0, 1e4, -1e4, big, -big, -88.8, 89.0]  # fmt: skip
    ups = [1.0, -1.0, 0.0, -0.0, up_scale, -up_scale, 0.5, float("nan")]
    grads = [1.0, -1.0, 0.0, -0.0, grad_scale, -grad_scale, 2.0, -0.5]
    g = torch.tensor(gates).repeat_interleave(len(ups)).reshape(-1, 8)
    u = torch.tensor(ups).repeat(len(gates)).reshape(-1, 8)
    dy = torch.tensor(grads).repeat(len(gates)).reshape(-1, 8)
    return g.to(dtype), u.to(dtype), dy.to(dtype)


def edge_calls(dtype, device="cpu", **scales):
    """The edge values in both layouts, without weights and with fp32 weights (one 0, one -0.5)."""
    gate, up, grad = (t.to(device) for t in edge_inputs(dtype, **scales))
    M = gate.shape[0]
    weights = torch.linspace(-0.5, 1.0, M).to(device)
    weights[M // 2] = 0.0
    split = torch.cat([gate, up], dim=1)
    inter = torch.stack([gate, up], dim=2).reshape(M, -1)
    for x, interleaved in ((split, False), (inter, True)):
        for w in (None, weights):
            yield (grad, x, w, interleaved)
