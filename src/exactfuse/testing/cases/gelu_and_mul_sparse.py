"""Inputs of gelu_and_mul_sparse (shared by tests, ``verify`` and ``bench``), its benchmark grids and
roofline cost. The registry imports this module on first use (``registry.load_declarations``)."""

from __future__ import annotations

import torch

from exactfuse.ops.act_and_mul import native as gated_native
from exactfuse.ops.gelu_and_mul_sparse import STD_MULTIPLIER, gelu_and_mul_sparse, native
from exactfuse.registry import Case
from exactfuse.testing.inputs import make_generator, randn, randn_with_specials

FULL_T = (1, 7, 128, 2048)
FULL_D = (1, 31, 128, 2048, 8192, 16384, 32768)
QUICK_SHAPES = [(T, d) for T in (1, 7, 64) for d in (1, 31, 128)] + [(7, 1000), (16, 2048)]
# quick runs the T x d matrix in the first GELU form only: "tanh" (ACTIVATION = 2) runs in the edge cases
# (all but m-zero and specials are tanh), and each width of the matrix is one more specialization per form.
QUICK_APPROXIMATIONS = ("none",)
CONSTANTS = (0.0, -0.0, 1.0, -2.5, 0.375, 1000.0, 3.140625, -7.0e-5)


def _gated(T: int, d: int, dtype, device, gen, *, gate_offset: float = 0.0) -> torch.Tensor:
    x = randn((T, 2 * d), torch.float32, "cpu", gen)
    x[:, :d] += gate_offset
    return x.to(dtype).to(device)


def _constant_rows(d: int, dtype, device, gen) -> torch.Tensor:
    """Each gate row one constant (std = 0): cutoff = mean, so relu(gate - cutoff) is all zero."""
    x = randn((len(CONSTANTS), 2 * d), torch.float32, "cpu", gen)
    x[:, :d] = torch.tensor(CONSTANTS).unsqueeze(1)
    return x.to(dtype).to(device)


def _special_rows(d: int, dtype, device, gen) -> torch.Tensor:
    """Row 0 NaN, 1 +Inf, 2 -Inf, 3 both infinities, 4 signed zeros in the gate; rows 5.. plain."""
    x = randn((8, 2 * d), torch.float32, "cpu", gen)
    x[0, 0] = float("nan")
    x[1, d // 2] = float("inf")
    x[2, d - 1] = float("-inf")
    x[3, 0], x[3, d - 1] = float("inf"), float("-inf")
    x[4, : d // 2] = 0.0
    x[4, d // 2 : d] = -0.0
    x[5:, d:] = torch.where(x[5:, d:] > 2.0, torch.full_like(x[5:, d:], float("inf")), x[5:, d:])  # Inf in up
    return x.to(dtype).to(device)


@gelu_and_mul_sparse.inputs
def _inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    """The contract matrix: T x d in both GELU forms (``quick``: in ``QUICK_APPROXIMATIONS``), then edge
    cases (ids name them)."""
    gen = make_generator(seed)
    m = STD_MULTIPLIER
    shapes = QUICK_SHAPES if quick else [(T, d) for T in FULL_T for d in FULL_D]
    for T, d in shapes:
        x = _gated(T, d, dtype, device, gen)
        for approximate in QUICK_APPROXIMATIONS if quick else gated_native.GELU_APPROXIMATIONS:
            yield Case(f"T{T}-d{d}-{approximate}", (x, m, approximate))
    T, d = (32, 256) if quick else (128, 2048)
    yield Case(f"gate-offset3-T{T}-d{d}", (_gated(T, d, dtype, device, gen, gate_offset=3.0), m, "tanh"))
    yield Case(f"m-neg-T{T}-d{d}", (_gated(T, d, dtype, device, gen), native.normal_quantile(0.3), "tanh"))
    yield Case(f"m-zero-T{T}-d{d}", (_gated(T, d, dtype, device, gen), 0.0, "none"))
    yield Case(
        "odd-width-T5-d300" if quick else "odd-width-T5-d3000",
        (_gated(5, 300 if quick else 3000, dtype, device, gen), m, "tanh"),
    )
    for d in (64,) if quick else (64, 2048, 32768):
        yield Case(f"constant-rows-d{d}", (_constant_rows(d, dtype, device, gen), m, "tanh"))
        yield Case(f"nan-inf-rows-d{d}", (_special_rows(d, dtype, device, gen), m, "tanh"))
    yield Case("specials-T64-d128", (randn_with_specials((64, 256), dtype, device, gen), m, "none"))
    yield Case("nd-2x3x5-d33", (_gated(30, 33, dtype, device, gen).reshape(2, 3, 5, 66), m, "tanh"))
    yield Case("empty-T0-d64", (_gated(0, 64, dtype, device, gen), m, "tanh"))
    wide = _gated(16, 120, dtype, device, gen)
    yield Case("strided-rows-T16-d100", (wide[:, :200], m, "tanh"))


# ------------------------------------------------------------- bench grids
BENCH_T = (1, 4, 16, 64, 256, 1024, 2048)
BENCH_D = (2048, 4096, 8192, 12288, 16384, 32768)


def _bench_cases(device, dtype, shapes):
    gen = make_generator(0)
    for T, d in shapes:
        yield Case(f"T{T}-d{d}", (_gated(T, d, dtype, device, gen), STD_MULTIPLIER, "tanh"))


@gelu_and_mul_sparse.grid("default")
def _grid_default(device, dtype):
    """T in {1, 4, 16, 64, 256, 1024, 2048} x d in {2048, ..., 32768} (42 shapes), tanh."""
    return _bench_cases(device, dtype, [(T, d) for T in BENCH_T for d in BENCH_D])


@gelu_and_mul_sparse.grid("quick")
def _grid_quick(device, dtype):
    return _bench_cases(device, dtype, [(16, 8192), (2048, 16384)])


def _bytes(x: torch.Tensor, std_multiplier: float = 0.0, approximate: str = "tanh") -> int:
    """Read ``[T, 2d]`` once (the gate once), write ``[T, d]`` once."""
    return x.numel() * x.element_size() * 3 // 2


gelu_and_mul_sparse.cost(bytes=_bytes)
