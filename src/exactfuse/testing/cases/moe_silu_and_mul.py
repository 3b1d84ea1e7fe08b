"""Inputs of moe_silu_and_mul and moe_silu_and_mul_backward (shared by tests, ``verify`` and ``bench``),
their benchmark grids and roofline cost. The registry imports this module on first use
(``registry.load_declarations``)."""

from __future__ import annotations

import torch

from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul, moe_silu_and_mul_backward
from exactfuse.registry import Case
from exactfuse.testing.inputs import make_generator, randn_with_specials
from exactfuse.utils import DTYPE_NAMES

# (M, N): edge and model shapes; N = 7 and 33 are odd widths, the
# (7, 384), (33, 960), (5, 512) trio mixes odd M with widths that are not
# powers of two, and M = 1..16 x N = 768/1024/1536 is the small shared-expert
# batch family (small batches are where a kernel it replaces produced NaN).
QUICK_SHAPES = ((0, 64), (1, 7), (3, 33), (7, 384), (5, 512), (4, 1024))
FULL_SHAPES = (
    (0, 64),
    (1, 7),
    (3, 33),
    (7, 384),
    (33, 960),
    (5, 512),
    (1, 1024),
    (6, 768),
    (384, 1024),
    (1536, 2048),
    (4096, 3072),
    (49152, 1024),
    *((m, n) for m in (1, 2, 4, 8, 16) for n in (768, 1024, 1536)),
)
LAYOUTS = {"split": False, "inter": True}
# quick keeps every width N (BN, BM, EVEN_N), every (weights, out_dtype) variant in both layouts and every
# dtype, on fewer combinations: each (shape, layout) takes one variant, by turns (each combination is a
# Triton specialization of its own), and each extra case (specials, wide range, row stride) one layout.
QUICK_EXTRA_LAYOUT = {"specials": "split", "wide-range": "inter", "row-stride": "split"}


def _weights(kind: str, M: int, dtype: torch.dtype, device, gen: torch.Generator) -> torch.Tensor | None:
    """None, or top-k-like weights in (0, 1] as fp32 (``"w32"``) or the input dtype (``"wx"``)."""
    if kind == "none":
        return None
    w = torch.rand((M,), generator=gen, dtype=torch.float32) * 0.9 + 0.1
    return w.to(torch.float32 if kind == "w32" else dtype).to(device)


def _variants(dtype: torch.dtype, quick: bool):
    """(weights kind, out_dtype) pairs: every weights kind; an fp32 output from half inputs."""
    yield "none", None
    yield "w32", None
    yield "wx", None
    if dtype != torch.float32:
        yield "w32", torch.float32
    if not quick and dtype == torch.float32:
        yield "none", torch.float16


@moe_silu_and_mul.inputs
def _inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    gen = make_generator(seed)
    variants = list(_variants(dtype, quick))
    for s, (M, N) in enumerate(QUICK_SHAPES if quick else FULL_SHAPES):
        for j, (layout, interleaved) in enumerate(LAYOUTS.items()):
            for wkind, out_dtype in variants if not quick else [variants[(s + j) % len(variants)]]:
                x = randn_with_specials((M, 2 * N), dtype, device, gen, specials=False)
                w = _weights(wkind, M, dtype, device, gen)
                suffix = f"-out_{DTYPE_NAMES[out_dtype]}" if out_dtype is not None else ""
                yield Case(f"M{M}-N{N}-{layout}-{wkind}{suffix}", (x, w, interleaved, out_dtype))
    for layout, interleaved in LAYOUTS.items():
        if not quick or QUICK_EXTRA_LAYOUT["specials"] == layout:
            x = randn_with_specials((64, 2 * 96), dtype, device, gen, specials=True)
            w = _weights("w32", 64, dtype, device, gen)
            yield Case(f"specials-M64-N96-{layout}-w32", (x, w, interleaved))
        if not quick or QUICK_EXTRA_LAYOUT["wide-range"] == layout:
            wide = randn_with_specials((8, 2 * 256), dtype, device, gen, specials=False) * 12
            yield Case(f"wide-range-M8-N256-{layout}-none", (wide, None, interleaved))
        if not quick or QUICK_EXTRA_LAYOUT["row-stride"] == layout:
            strided = randn_with_specials((6, 2 * 160), dtype, device, gen, specials=False)[:, : 2 * 128]
            w = _weights("w32", 6, dtype, device, gen)
            yield Case(f"row-stride-M6-N128-{layout}-w32", (strided, w, interleaved))


# ------------------------------------------------------------- bench grids
BENCH_M = (1, 6, 96, 384, 4096, 49152)
BENCH_N = (768, 1024, 1536, 3072)
QUICK_BENCH = ("M6-N1024-inter-none", "M4096-N1024-split-w32", "M49152-N3072-inter-none")


def _bench_cases(device: torch.device, dtype: torch.dtype, only: tuple[str, ...] | None = None):
    """M x N x layout x (no weights, fp32 row weights); tensors made lazily, case by case."""
    for M in BENCH_M:
        for N in BENCH_N:
            for layout, interleaved in LAYOUTS.items():
                for wkind in ("none", "w32"):
                    case_id = f"M{M}-N{N}-{layout}-{wkind}"
                    if only is not None and case_id not in only:
                        continue
                    x = torch.randn((M, 2 * N), dtype=dtype, device=device)
                    w = None if wkind == "none" else torch.rand((M,), dtype=torch.float32, device=device)
                    yield Case(case_id, (x, w, interleaved))


moe_silu_and_mul.grid("default")(_bench_cases)
moe_silu_and_mul.grid("quick")(lambda device, dtype: _bench_cases(device, dtype, QUICK_BENCH))


def _bytes(
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> int:
    """Read ``gateup`` and ``row_weights`` once, write ``[M, N]`` of ``out_dtype`` once."""
    M, N = gateup.shape[0], gateup.shape[1] // 2
    read = gateup.numel() * gateup.element_size()
    if row_weights is not None:
        read += row_weights.numel() * row_weights.element_size()
    return read + M * N * (out_dtype or gateup.dtype).itemsize


moe_silu_and_mul.cost(bytes=_bytes)


# ------------------------------------------------------------- backward: inputs, grids, cost
@moe_silu_and_mul_backward.inputs
def _backward_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    """Each forward case with the output's gradient first (the output's dtype; NaN/Inf/zeros/subnormals
    where the case has specials); the ``-rows`` variant reads the gradient as rows of a wider tensor
    (row stride N + 3)."""
    gen = make_generator(seed + 1000)
    for case in _inputs(device, dtype, quick=quick, seed=seed):
        gateup = case.args[0]
        grad_dtype = (case.args[3] if len(case.args) > 3 else None) or dtype  # out_dtype or gateup's
        M, N = gateup.shape[0], gateup.shape[1] // 2
        specials = case.id.startswith("specials")
        yield Case(case.id, (randn_with_specials((M, N), grad_dtype, device, gen, specials=specials), *case.args))
        if M and N > 1 and case.id.startswith(("M3-", "M7-", "specials", "row-stride")):
            wide = randn_with_specials((M, N + 3), grad_dtype, device, gen, specials=specials)
            yield Case(f"{case.id}-rows", (wide[:, :N], *case.args))


def _bench_backward(device: torch.device, dtype: torch.dtype, only: tuple[str, ...] | None = None):
    """The forward's grid with a random output gradient first."""
    for case in _bench_cases(device, dtype, only):
        gateup = case.args[0]
        grad = torch.randn((gateup.shape[0], gateup.shape[1] // 2), dtype=dtype, device=device)
        yield Case(case.id, (grad, *case.args))


moe_silu_and_mul_backward.grid("default")(_bench_backward)
moe_silu_and_mul_backward.grid("quick")(lambda device, dtype: _bench_backward(device, dtype, QUICK_BENCH))


def _backward_bytes(
    grad: torch.Tensor,
    gateup: torch.Tensor,
    row_weights: torch.Tensor | None = None,
    interleaved: bool = False,
    out_dtype: torch.dtype | None = None,
) -> int:
    """Read the gradient ``[M, N]``, ``gateup`` and ``row_weights`` once; write ``d gateup`` and ``d
    row_weights`` once."""
    read = grad.numel() * grad.element_size() + gateup.numel() * gateup.element_size()
    if row_weights is not None:
        read += 2 * row_weights.numel() * row_weights.element_size()
    return read + gateup.numel() * gateup.element_size()


moe_silu_and_mul_backward.cost(bytes=_backward_bytes)
