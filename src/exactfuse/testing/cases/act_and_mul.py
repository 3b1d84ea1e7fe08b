"""Inputs of silu_and_mul, gelu_and_mul, silu_mul and gelu_mul and of their backward ops (shared by tests,
``verify`` and ``bench``), their benchmark grids and roofline cost. The registry imports this module on first
use (``registry.load_declarations``)."""

from __future__ import annotations

import torch

from exactfuse.ops.act_and_mul import (
    gelu_and_mul,
    gelu_and_mul_backward,
    gelu_mul,
    gelu_mul_backward,
    native,
    silu_and_mul,
    silu_and_mul_backward,
    silu_mul,
    silu_mul_backward,
)
from exactfuse.registry import Case
from exactfuse.testing.inputs import make_generator, randn_with_specials

FULL_T = (0, 1, 7, 83, 2048)
FULL_D = (1, 31, 512, 768, 13824)
# quick (``verify --quick``, the interpreter tests) keeps every kernel, layout, formula and dtype on fewer
# sizes: each width is a Triton specialization per dtype, formula and layout, and T is do_not_specialize
# (T = 7 compiles nothing T = 1 does not). d = 1 (D = 1, BD = 1), d = 31 (BD = 32, masked), d = 768 (BD =
# 256 by the power-of-two rule); BD = 64 comes with nd-d33, a D divisible by 16 with specials-d128.
QUICK_T = (0, 1, 7)
QUICK_D = (1, 31, 768)
# The GELU ops' quick widths: d = 1's and d = 768's tiles compile in the SiLU ops (the same kernels).
QUICK_GELU_D = (31,)
# The GELU ops' quick cases in the second approximation (tanh): NaN/Inf and the cancellation region, so
# FORMULA = 2 still runs in every dtype and layout, forward and backward.
QUICK_TANH_CASES = ("specials", "wide-range")


def _gated_cases(
    device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0, quick_d: tuple = QUICK_D
):
    gen = make_generator(seed)
    for T in QUICK_T if quick else FULL_T:
        for d in quick_d if quick else FULL_D:
            x = randn_with_specials((T, 2 * d), dtype, device, gen, specials=False)
            yield Case(f"T{T}-d{d}", (x,))
    yield Case("nd-2x3x5-d33", (randn_with_specials((2, 3, 5, 66), dtype, device, gen, specials=False),))
    yield Case("specials-T64-d128", (randn_with_specials((64, 256), dtype, device, gen, specials=True),))
    big = randn_with_specials((8, 512), dtype, device, gen, specials=False) * 12
    yield Case("wide-range-T8-d256", (big,))


def _pair_cases(
    device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0, quick_d: tuple = QUICK_D
):
    """Each gated case as ``(gate, up)``: two tensors, and (``-halves``) the two halves of ``x``, whose
    rows are ``2d`` apart, as a fused projection's output viewed in two."""
    for case in _gated_cases(device, dtype, quick=quick, seed=seed, quick_d=quick_d):
        x = case.args[0]
        d = x.shape[-1] // 2
        # torch's CPU erf-GELU returns NaN at +inf on contiguous fp32 rows of 7 or more (its vectorized
        # path; torch 2.13), where CUDA and the kernel give +inf: on the CPU the specials case keeps the
        # halves, whose reference takes the other path
        if not (device.type == "cpu" and case.id.startswith("specials")):
            yield Case(case.id, (x[..., :d].contiguous(), x[..., d:].contiguous()))
        if x.dim() == 2:
            yield Case(f"{case.id}-halves", (x[:, :d], x[:, d:]))


def _with_approximations(cases):
    """The GELU ops' cases: each case once per approximation; ``quick``: the T x d matrix at
    ``QUICK_GELU_D``, and the second approximation on the ``QUICK_TANH_CASES`` only."""

    def inputs(device, dtype, *, quick=False, seed=0):
        for i, approximate in enumerate(native.GELU_APPROXIMATIONS):
            for case in cases(device, dtype, quick=quick, seed=seed, quick_d=QUICK_GELU_D):
                if quick and i > 0 and not case.id.startswith(QUICK_TANH_CASES):
                    continue
                yield Case(f"{approximate}-{case.id}", case.args, {"approximate": approximate})

    return inputs


silu_and_mul.inputs(_gated_cases)
gelu_and_mul.inputs(_with_approximations(_gated_cases))
silu_mul.inputs(_pair_cases)
gelu_mul.inputs(_with_approximations(_pair_cases))


def _with_grad(cases, finite_grad_on_cpu=False):
    """The backward ops' cases: each forward case with the output's gradient first, fresh random values
    (with NaN/Inf/zeros/subnormals where the case has specials); the ``-rows`` variant reads the gradient
    as 2-D rows of a wider tensor (row stride d + 3), with ``quick`` on the specials case only (the
    strided gradient's specialization once per op and dtype, not once per width).

    ``finite_grad_on_cpu``: on the CPU the gradient's infinities become zeros. CPU PyTorch's vectorized
    fp16 GELU gives gelu(-5.543) = -1.79e-7 where CUDA's formula, which the kernel follows, rounds
    ``1 + erf`` to 0 and gives -0 (float64: -8.2e-8), and an infinite gradient times the two is +-inf
    against NaN, which no tolerance holds; on CUDA the infinities stay and the contract is bitwise."""

    def inputs(device, dtype, *, quick=False, seed=0):
        gen = make_generator(seed + 1000)
        for case in cases(device, dtype, quick=quick, seed=seed):
            first = case.args[0]
            shape = (*first.shape[:-1], first.shape[-1] // 2) if len(case.args) == 1 else first.shape
            specials = "specials" in case.id
            grads = [randn_with_specials(shape, dtype, device, gen, specials=specials)]
            rows = specials or not quick
            if rows and len(shape) == 2 and shape[0] and shape[1] > 1 and not case.id.endswith("-halves"):
                wide = randn_with_specials((shape[0], shape[1] + 3), dtype, device, gen, specials=specials)
                grads.append(wide[:, : shape[1]])
            if finite_grad_on_cpu and device.type == "cpu":
                grads = [g.masked_fill(g.isinf(), 0.0) for g in grads]
            for grad, suffix in zip(grads, ("", "-rows"), strict=False):
                yield Case(f"{case.id}{suffix}", (grad, *case.args), case.kwargs)

    return inputs


silu_and_mul_backward.inputs(_with_grad(_gated_cases))
gelu_and_mul_backward.inputs(_with_grad(_with_approximations(_gated_cases), finite_grad_on_cpu=True))
silu_mul_backward.inputs(_with_grad(_pair_cases))
gelu_mul_backward.inputs(_with_grad(_with_approximations(_pair_cases), finite_grad_on_cpu=True))


# ------------------------------------------------------------- bench grids
BENCH_T = (1, 16, 256, 4096, 32768)
BENCH_D = (768, 4096, 14336)
QUICK_BENCH = ("T16-d4096", "T4096-d4096")


def _bench_cases(device, dtype, kwargs=None, only=None):
    for T in BENCH_T:
        for d in BENCH_D:
            if only is None or f"T{T}-d{d}" in only:
                x = torch.randn((T, 2 * d), dtype=dtype, device=device)
                yield Case(f"T{T}-d{d}", (x,), dict(kwargs or {}))


def _bench_pairs(device, dtype, kwargs=None, only=None):
    for T in BENCH_T:
        for d in BENCH_D:
            if only is None or f"T{T}-d{d}" in only:
                gate, up = (
                    torch.randn((T, d), dtype=dtype, device=device),
                    torch.randn((T, d), dtype=dtype, device=device),
                )
                yield Case(f"T{T}-d{d}", (gate, up), dict(kwargs or {}))


TANH = {"approximate": "tanh"}
silu_mul.grid("default")(lambda device, dtype: _bench_pairs(device, dtype))
silu_mul.grid("quick")(lambda device, dtype: _bench_pairs(device, dtype, only=QUICK_BENCH))
gelu_mul.grid("default")(lambda device, dtype: _bench_pairs(device, dtype, TANH))
gelu_mul.grid("quick")(lambda device, dtype: _bench_pairs(device, dtype, TANH, only=QUICK_BENCH))
silu_and_mul.grid("default")(lambda device, dtype: _bench_cases(device, dtype))
silu_and_mul.grid("quick")(lambda device, dtype: _bench_cases(device, dtype, only=QUICK_BENCH))
gelu_and_mul.grid("default")(lambda device, dtype: _bench_cases(device, dtype, TANH))
gelu_and_mul.grid("quick")(lambda device, dtype: _bench_cases(device, dtype, TANH, only=QUICK_BENCH))


def _gated_bytes(x: torch.Tensor, approximate: str = "none") -> int:
    """Read ``[T, 2d]`` once, write ``[T, d]`` once."""
    return x.numel() * x.element_size() * 3 // 2


silu_and_mul.cost(bytes=lambda x: _gated_bytes(x))
gelu_and_mul.cost(bytes=_gated_bytes)


def _pair_bytes(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> int:
    """Read gate and up once, write ``[..., d]`` once."""
    return 3 * gate.numel() * gate.element_size()


silu_mul.cost(bytes=lambda gate, up: _pair_bytes(gate, up))
gelu_mul.cost(bytes=_pair_bytes)


# ------------------------------------------------------------- backward: grids and cost
def _bench_with_grad(cases):
    """Each forward bench case with a random output gradient first."""

    def grid(device, dtype):
        for case in cases(device, dtype):
            first = case.args[0]
            shape = (*first.shape[:-1], first.shape[-1] // 2) if len(case.args) == 1 else first.shape
            yield Case(case.id, (torch.randn(shape, dtype=dtype, device=device), *case.args), case.kwargs)

    return grid


silu_and_mul_backward.grid("default")(_bench_with_grad(lambda device, dtype: _bench_cases(device, dtype)))
silu_and_mul_backward.grid("quick")(
    _bench_with_grad(lambda device, dtype: _bench_cases(device, dtype, only=QUICK_BENCH))
)
gelu_and_mul_backward.grid("default")(_bench_with_grad(lambda device, dtype: _bench_cases(device, dtype, TANH)))
gelu_and_mul_backward.grid("quick")(
    _bench_with_grad(lambda device, dtype: _bench_cases(device, dtype, TANH, only=QUICK_BENCH))
)
silu_mul_backward.grid("default")(_bench_with_grad(lambda device, dtype: _bench_pairs(device, dtype)))
silu_mul_backward.grid("quick")(_bench_with_grad(lambda device, dtype: _bench_pairs(device, dtype, only=QUICK_BENCH)))
gelu_mul_backward.grid("default")(_bench_with_grad(lambda device, dtype: _bench_pairs(device, dtype, TANH)))
gelu_mul_backward.grid("quick")(
    _bench_with_grad(lambda device, dtype: _bench_pairs(device, dtype, TANH, only=QUICK_BENCH))
)


def _backward_bytes(grad: torch.Tensor, *inputs, approximate: str = "none") -> int:
    """Read the gradient ``[..., d]`` and the inputs (``x [..., 2d]`` or gate and up), write their
    gradients: five ``[..., d]`` tensors."""
    return 5 * grad.numel() * grad.element_size()


silu_and_mul_backward.cost(bytes=lambda grad, x: _backward_bytes(grad, x))
gelu_and_mul_backward.cost(bytes=lambda grad, x, approximate="none": _backward_bytes(grad, x))
silu_mul_backward.cost(bytes=lambda grad, gate, up: _backward_bytes(grad, gate, up))
gelu_mul_backward.cost(bytes=lambda grad, gate, up, approximate="none": _backward_bytes(grad, gate, up))
