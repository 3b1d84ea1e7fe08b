"""Gated activations: declarations of silu_and_mul and gelu_and_mul.

Spec in ``native.py``, kernel in ``triton.py``; this file registers them,
their input generator (shared by tests, ``verify`` and ``bench``), warmup,
benchmark grids and roofline cost.
"""

from __future__ import annotations

import torch

from exactfuse.ops.activation import native
from exactfuse.registry import Bitwise, Case, Tolerance, op, platform
from exactfuse.testing.inputs import make_generator, randn_with_specials

# Bitwise against eager PyTorch on CUDA. Under the Triton interpreter the
# reference runs on the CPU, whose exp/erf/tanh (SLEEF vectors) are neither
# CUDA's libdevice nor the interpreter's numpy: measured there (fp16/fp32,
# the full input matrix) up to 5 fp32 ulp for silu and absolute errors of
# 4e-6 near zero for gelu, so the CPU contract is the per-dtype Tolerance.
# fp32 erf-GELU needs atol 1e-4 there: torch CPU's vectorized erff is one ulp
# off in the cancellation region 1 + erf(g/sqrt 2) for g < -3, and the
# wide-range case multiplies that by |up| ~ 100 (measured: g = -3.123,
# u = -99.84; float64 truth 0.2791161, CPU native 0.2791401, interpreter
# 0.2791123 -- the reference is the one that is off).
CONTRACT = Bitwise()
INTERPRETER_CONTRACT = Tolerance()
GELU_INTERPRETER_CONTRACT = {
    torch.float16: Tolerance(),
    torch.bfloat16: Tolerance(),
    torch.float32: Tolerance(atol=1e-4),
}


def _check_silu(x: torch.Tensor) -> None:
    native.check_gated_input("silu_and_mul", x)


def _check_gelu(x: torch.Tensor, approximate: str = "none") -> None:
    native.check_gated_input("gelu_and_mul", x)
    native.check_approximate("gelu_and_mul", approximate)


def _triton_supports(x: torch.Tensor, approximate: str = "none") -> bool:
    """CUDA (or interpreter, no bf16 there), unit last stride, rows viewable as 2-D."""
    if not platform.triton_device_ok(x):
        return False
    if x.is_cpu and x.dtype == torch.bfloat16:  # is_cpu: 0.1 µs, .device.type: 0.4 (CPU machine, timeit)
        return False  # the interpreter has no bf16 arithmetic
    return x.is_contiguous() or (x.dim() == 2 and x.stride(-1) == 1)


silu_and_mul = op(native.silu_and_mul, contract=CONTRACT, interpreter_contract=INTERPRETER_CONTRACT, check=_check_silu)
gelu_and_mul = op(
    native.gelu_and_mul, contract=CONTRACT, interpreter_contract=GELU_INTERPRETER_CONTRACT, check=_check_gelu
)

from exactfuse.ops.activation import triton as _triton  # noqa: E402

silu_and_mul.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=lambda x: _triton_supports(x),
    kernels=[_triton.act_and_mul_kernel],
)(_triton.silu_and_mul_triton)
gelu_and_mul.provider(
    "triton",
    supported=platform.triton_available,
    supports_args=_triton_supports,
    kernels=[_triton.act_and_mul_kernel],
)(_triton.gelu_and_mul_triton)


# ------------------------------------------------------------------ inputs
FULL_T = (0, 1, 7, 83, 2048)
FULL_D = (1, 31, 512, 768, 13824)
QUICK_T = (0, 1, 7)
QUICK_D = (1, 31, 64, 768)


def _gated_cases(device: torch.device, dtype: torch.dtype, *, quick: bool, seed: int):
    gen = make_generator(seed)
    for T in QUICK_T if quick else FULL_T:
        for d in QUICK_D if quick else FULL_D:
            x = randn_with_specials((T, 2 * d), dtype, device, gen, specials=False)
            yield Case(f"T{T}-d{d}", (x,))
    yield Case("nd-2x3x5-d33", (randn_with_specials((2, 3, 5, 66), dtype, device, gen, specials=False),))
    yield Case("specials-T64-d128", (randn_with_specials((64, 256), dtype, device, gen, specials=True),))
    big = randn_with_specials((8, 512), dtype, device, gen, specials=False) * 12
    yield Case("wide-range-T8-d256", (big,))


@silu_and_mul.inputs
def _silu_inputs(device, dtype, *, quick=False, seed=0):
    return _gated_cases(device, dtype, quick=quick, seed=seed)


@gelu_and_mul.inputs
def _gelu_inputs(device, dtype, *, quick=False, seed=0):
    for approximate in native.GELU_APPROXIMATIONS:
        for case in _gated_cases(device, dtype, quick=quick, seed=seed):
            yield Case(f"{approximate}-{case.id}", case.args, {"approximate": approximate})


# ------------------------------------------------------------------ warmup
def _warm(launch, device, dtype, widths, **kwargs):
    # one small and one large launch per width: the heuristic's two num_warps
    for d in widths:
        for T in (1, -(-_triton.SMALL_TILE_ELEMENTS // d)):
            launch(torch.ones((T, 2 * d), dtype=dtype, device=device), **kwargs)


@silu_and_mul.warmup
def _silu_warmup(device, dtype, *, widths=(4096,)):
    """Compile the kernel for each output width ``d`` in ``widths``."""
    _warm(_triton.silu_and_mul_triton, device, dtype, widths)


@gelu_and_mul.warmup
def _gelu_warmup(device, dtype, *, widths=(4096,), approximate=native.GELU_APPROXIMATIONS):
    """Compile the kernel for each ``d`` in ``widths`` and each approximation."""
    for a in (approximate,) if isinstance(approximate, str) else approximate:
        _warm(_triton.gelu_and_mul_triton, device, dtype, widths, approximate=a)


# ------------------------------------------------------------- bench grids
BENCH_T = (1, 16, 256, 4096, 32768)
BENCH_D = (768, 4096, 14336)


def _bench_cases(device, dtype, kwargs=None):
    for T in BENCH_T:
        for d in BENCH_D:
            x = torch.randn((T, 2 * d), dtype=dtype, device=device)
            yield Case(f"T{T}-d{d}", (x,), dict(kwargs or {}))


silu_and_mul.grid("default")(lambda device, dtype: _bench_cases(device, dtype))
silu_and_mul.grid("quick")(
    lambda device, dtype: (c for c in _bench_cases(device, dtype) if c.id in ("T16-d4096", "T4096-d4096"))
)
gelu_and_mul.grid("default")(lambda device, dtype: _bench_cases(device, dtype, {"approximate": "tanh"}))
gelu_and_mul.grid("quick")(
    lambda device, dtype: (
        c for c in _bench_cases(device, dtype, {"approximate": "tanh"}) if c.id in ("T16-d4096", "T4096-d4096")
    )
)


def _gated_bytes(x: torch.Tensor, approximate: str = "none") -> int:
    """Read ``[T, 2d]`` once, write ``[T, d]`` once."""
    return x.numel() * x.element_size() * 3 // 2


silu_and_mul.cost(bytes=lambda x: _gated_bytes(x))
gelu_and_mul.cost(bytes=_gated_bytes)
from exactfuse.ops.activation.moe import moe_silu_and_mul  # noqa: E402, F401
from exactfuse.ops.activation.sparse import gelu_and_mul_sparse  # noqa: E402, F401

__all__ = ["gelu_and_mul", "silu_and_mul"]
