"""Declaration of ``gelu_and_mul_sparse`` (Gemma3n's sparse GELU).

Spec in ``sparse_native.py``, kernels in ``sparse_triton.py``, their launch choice in
``sparse_heuristics.py``; this file
registers them, the input generator (shared by tests, ``verify`` and
``bench``), warmup, benchmark grids and roofline cost.
"""

from __future__ import annotations

import torch

from exactfuse.ops.activation import native as gated_native
from exactfuse.ops.activation import sparse_native as native
from exactfuse.registry import Case, op, platform
from exactfuse.registry.contracts import RowBitwise, ZeroMaskTolerance
from exactfuse.testing.inputs import make_generator, randn, randn_with_specials
from exactfuse.utils import num_sms

# fp16/bf16: whole rows bitwise equal to eager on >= 99.9% of rows, on every row
# up to d = 128. The row mean and std are fp32 sums in another order than ATen's,
# so in rare rows a statistic rounds to the neighbouring fp16/bf16 value and the
# cutoff moves by one ulp (a probe on the H200 saw 0-1 such rows in 2048 per
# width). fp32: the statistics are not rounded, so every row differs by fp32 ulps:
# Tolerance, with the exact zero mask on narrow rows.
CONTRACT = {
    torch.float16: RowBitwise(),
    torch.bfloat16: RowBitwise(),
    torch.float32: ZeroMaskTolerance(up_to_d=128),
}
# Under the interpreter the reference is the CPU's: ``mean`` divides the fp32 sum
# by d (CUDA multiplies by rows/numel), ``std`` is a float64 Welford, numpy sums
# pairwise. Measured (fp16, 2048 rows each at d = 31 and 128, 1024 at d = 2048,
# randn and randn + 3 gates): no row differs, so the same contract holds there.
INTERPRETER_CONTRACT = CONTRACT
GEMMA3N_SPARSITY = 0.95
STD_MULTIPLIER = native.normal_quantile(GEMMA3N_SPARSITY)  # 1.6448536


def _check(x: torch.Tensor, std_multiplier: float, approximate: str) -> None:
    gated_native.check_gated_input(native.OP_NAME, x)
    native.check_std_multiplier(native.OP_NAME, std_multiplier)
    gated_native.check_approximate(native.OP_NAME, approximate)


def _triton_supports(x: torch.Tensor, std_multiplier: float, approximate: str) -> bool:
    """CUDA (or the interpreter, without bf16), d <= 32768, unit last stride, rows viewable as 2-D."""
    if not platform.triton_device_ok(x):
        return False
    if x.device.type == "cpu" and x.dtype == torch.bfloat16:
        return False  # the interpreter has no bf16 arithmetic
    if x.shape[-1] // 2 > _heuristics.MAX_D:
        return False
    return x.is_contiguous() or (x.dim() == 2 and x.stride(-1) == 1)


gelu_and_mul_sparse = op(
    native.gelu_and_mul_sparse, contract=CONTRACT, interpreter_contract=INTERPRETER_CONTRACT, check=_check
)

from exactfuse.ops.activation import sparse_heuristics as _heuristics  # noqa: E402
from exactfuse.ops.activation import sparse_triton as _triton  # noqa: E402

gelu_and_mul_sparse.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=_triton_supports,
    kernels=[
        _triton.gelu_and_mul_sparse_kernel,
        _triton.gelu_and_mul_sparse_looped_kernel,
        _triton.gelu_and_mul_sparse_split_stats_kernel,
        _triton.gelu_and_mul_sparse_split_apply_kernel,
    ],
)(_triton.gelu_and_mul_sparse_triton)


# ------------------------------------------------------------------ inputs
FULL_T = (1, 7, 128, 2048)
FULL_D = (1, 31, 128, 2048, 8192, 16384, 32768)
QUICK_SHAPES = [(T, d) for T in (1, 7, 64) for d in (1, 31, 128)] + [(7, 1000), (16, 2048)]
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
    """The contract matrix: T x d in both GELU forms, then edge cases (ids name them)."""
    gen = make_generator(seed)
    m = STD_MULTIPLIER
    shapes = QUICK_SHAPES if quick else [(T, d) for T in FULL_T for d in FULL_D]
    for T, d in shapes:
        x = _gated(T, d, dtype, device, gen)
        for approximate in gated_native.GELU_APPROXIMATIONS:
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


# ------------------------------------------------------------------ warmup
@gelu_and_mul_sparse.warmup
def _warmup(device, dtype, *, widths=(2048, 8192, 16384), approximate=("tanh",), **_other_ops_options):
    """Compile the kernels for each output width ``d`` in ``widths`` and each GELU form: every kernel
    :func:`~exactfuse.ops.activation.sparse_heuristics.choose_kernel` picks for some batch size at that width."""
    sms = num_sms(torch.device(device))
    for a in (approximate,) if isinstance(approximate, str) else approximate:
        for d in widths:
            seen = set()
            for T in _heuristics.warmup_batches(d, sms):
                if (plan := _heuristics.choose_kernel(T, d, sms)) not in seen:
                    seen.add(plan)
                    x = torch.ones((T, 2 * d), dtype=dtype, device=device)
                    _triton.launch_gelu_and_mul_sparse(x, STD_MULTIPLIER, a)


# ------------------------------------------------------------- bench grids
BENCH_T = (1, 4, 16, 64, 256, 1024, 2048)
BENCH_D = (2048, 4096, 8192, 12288, 16384, 32768)


def _bench_cases(device, dtype, shapes):
    gen = make_generator(0)
    for T, d in shapes:
        yield Case(f"T{T}-d{d}", (_gated(T, d, dtype, device, gen), STD_MULTIPLIER, "tanh"))


@gelu_and_mul_sparse.grid("default")
def _grid_default(device, dtype):
    """Issue #4: T in {1, 4, 16, 64, 256, 1024, 2048} x d in {2048, ..., 32768} (42 shapes), tanh."""
    return _bench_cases(device, dtype, [(T, d) for T in BENCH_T for d in BENCH_D])


@gelu_and_mul_sparse.grid("quick")
def _grid_quick(device, dtype):
    return _bench_cases(device, dtype, [(16, 8192), (2048, 16384)])


def _bytes(x: torch.Tensor, std_multiplier: float = 0.0, approximate: str = "tanh") -> int:
    """Read ``[T, 2d]`` once (the gate once), write ``[T, d]`` once."""
    return x.numel() * x.element_size() * 3 // 2


gelu_and_mul_sparse.cost(bytes=_bytes)

__all__ = ["STD_MULTIPLIER", "gelu_and_mul_sparse"]
