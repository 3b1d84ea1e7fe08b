"""Exactness by exhaustion: fast 16-bit activation formulas, admitted only by an exhaustive proof.

The activation of an fp16 or bf16 tensor takes a 16-bit input, so its whole domain is 65,536 bit patterns.
A fast formula (``exactfuse.ops.math``: approximate ``exp``, approximate division) gives eager PyTorch's
bits on every input exactly when it gives them on all 65,536. :func:`proof` runs every pattern through
the kernels' own activation helper (``exactfuse.ops.math.activation``) with each candidate formula id,
rounds to the dtype and compares bit for bit with eager ``F.silu`` / ``F.gelu`` / ``torch.sigmoid`` (the
eager gate of ``sparse_paged_attention``) on the same device (any
NaN matches any NaN). The first candidate with no differing input is admitted; when every candidate
fails, the exact formula (the spec's math, which needs no proof) stays, and each failure is logged as a
warning naming the (formula, dtype) pair. Launchers ask :func:`chosen_formula`, which proves once per
(activation, dtype, device) and process: on the first call, or in ``exactfuse.warmup``.

- fp32 takes the exact formula: its domain is 2^32 inputs, and fast formulas differ on a few percent.
- Non-CUDA devices (CPU tensors under ``TRITON_INTERPRET=1``) take the exact formula: the interpreter
  evaluates numpy stand-ins of the fast math, so a proof there would say nothing about a GPU.
  :func:`proof` itself runs there (fp16; the CPU tests use it).
- Inside CUDA-graph capture a proof cannot run (it launches kernels and reads their results back): a pair
  not yet proven takes the exact formula for that call, bitwise as well, with a warning to warm up
  first. Nothing is cached then, so the next eager call proves it.
- Under torch.compile / make_fx the launcher runs on fake tensors; the proof runs on real ones, outside
  every tracing mode, and the traced graph keeps the formula proven here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.utils._python_dispatch import _disable_current_modes

from exactfuse.ops.math import activation as kernel_activation

log = logging.getLogger(__name__)

# Formula ids: ``exactfuse.ops.math.activation``'s constexpr FORMULA (it dispatches on these numbers).
SILU, GELU_ERF, GELU_TANH = 0, 1, 2  # the exact formulas, as ATen's CUDA kernels evaluate them
SILU_FAST, SILU_SIGMOID, SILU_EXP_FAST_DIV, SILU_EXP_NEWTON_DIV = 3, 4, 5, 6
GELU_ERF_LIBDEVICE, GELU_TANH_APPROX, GELU_TANH_SIGMOID = 7, 8, 9
SILU_FAST_FP16_FIXED = 10
SILU_RCP = 11
SIGMOID, SIGMOID_FAST, SIGMOID_RCP = 12, 13, 14
SILU_RCP_FP16_FIXED, SIGMOID_RCP_FP16_FIXED = 15, 16

FORMULAS: dict[int, tuple[str, str]] = {  # id -> (activation, what it evaluates)
    SILU: ("silu", "exact: libdevice exp, IEEE division"),
    GELU_ERF: ("gelu_none", "exact: CUDA's erff"),
    GELU_TANH: ("gelu_tanh", "exact: libdevice tanhf"),
    SILU_FAST: ("silu", "ex2.approx exp, approximate division"),
    SILU_SIGMOID: ("silu", "x * tl.sigmoid(x)"),
    SILU_EXP_FAST_DIV: ("silu", "libdevice exp, approximate division"),
    SILU_EXP_NEWTON_DIV: ("silu", "libdevice exp, approximate division + one Newton step"),
    GELU_ERF_LIBDEVICE: ("gelu_none", "tl.erf (libdevice erff)"),
    GELU_TANH_APPROX: ("gelu_tanh", "tanh.approx.f32"),
    GELU_TANH_SIGMOID: ("gelu_tanh", "x / (1 + ex2.approx exp(-2u)), approximate division"),
    SILU_FAST_FP16_FIXED: ("silu", "ex2.approx exp, approximate division, eager's fp16 result at -2.7246, -4.9219"),
    SILU_RCP: ("silu", "ex2.approx.ftz exp, x times rcp.approx.f32"),
    SIGMOID: ("sigmoid", "exact: libdevice exp, IEEE division"),
    SIGMOID_FAST: ("sigmoid", "ex2.approx exp, approximate division"),
    SIGMOID_RCP: ("sigmoid", "ex2.approx.ftz exp, rcp.approx.f32"),
    SILU_RCP_FP16_FIXED: (
        "silu",
        "ex2.approx.ftz exp, x times rcp.approx.f32, eager's fp16 result at -2.7246, -4.9219",
    ),
    SIGMOID_RCP_FP16_FIXED: (
        "sigmoid",
        "ex2.approx.ftz exp, rcp.approx.f32, eager's fp16 result at 0.0068359, -0.0063477",
    ),
}
EXACT = {"silu": SILU, "gelu_none": GELU_ERF, "gelu_tanh": GELU_TANH, "sigmoid": SIGMOID}
EXACT_FORMULAS = frozenset(EXACT.values())

# What the kernels try, fastest first, per (activation, dtype); the exact formula follows as the last
# resort. A pair is listed when an exhaustive GPU check found its formula bitwise on an H200
# (benchmarks/results/h200/sweeps/fast_activation_proofs.txt); a failure elsewhere is logged and the next
# candidate taken. No GELU formula faster than the exact one proves out there.
CANDIDATES: dict[tuple[str, torch.dtype], tuple[int, ...]] = {
    ("silu", torch.bfloat16): (SILU_RCP, SILU_FAST),
    ("silu", torch.float16): (SILU_RCP_FP16_FIXED, SILU_FAST_FP16_FIXED, SILU_EXP_NEWTON_DIV),
    ("sigmoid", torch.bfloat16): (SIGMOID_RCP, SIGMOID_FAST),
    ("sigmoid", torch.float16): (SIGMOID_RCP_FP16_FIXED,),
}
# The ops whose kernels evaluate each activation through ``activation`` with the chosen formula.
OPS_USING = {
    "silu": ("silu_and_mul", "silu_mul", "short_conv", "causal_conv1d", "causal_conv1d_update"),
    "gelu_none": ("gelu_and_mul", "gelu_mul"),
    "gelu_tanh": ("gelu_and_mul", "gelu_mul"),
    "sigmoid": ("sparse_paged_attention",),  # its eager gate: torch.sigmoid(gate) rounded to the dtype
}
INPUTS = 1 << 16
SHOWN = 4  # differing inputs a check keeps


@dataclass(frozen=True)
class FormulaCheck:
    """One formula run over all 65,536 inputs of a dtype: how many differ from eager, and the first few."""

    formula: int
    differing: int
    first: tuple[float, ...]

    @property
    def name(self) -> str:
        return FORMULAS[self.formula][1]

    def summary(self) -> str:
        shown = ", ".join(f"{v:.5g}" for v in self.first)
        more = ", ..." if self.differing > len(self.first) else ""
        return f"{self.differing} of {INPUTS:,} inputs differ" + (f" ({shown}{more})" if shown else "")


@dataclass(frozen=True)
class ProofResult:
    """The formula the kernels use for (activation, dtype) on a device, and each candidate tried."""

    activation: str
    dtype: torch.dtype
    formula: int
    checks: tuple[FormulaCheck, ...]  # the candidates tried, in order; the exact formula is never checked

    @property
    def name(self) -> str:
        return FORMULAS[self.formula][1]

    @property
    def fast(self) -> bool:
        return self.formula != EXACT[self.activation]


@triton.jit
def prove_kernel(p_x, p_y, N, ACTIVATION: tl.constexpr, FORMULA: tl.constexpr, BLOCK: tl.constexpr):
    """``y = ACTIVATION(x, FORMULA)`` rounded to y's dtype, as the production kernel rounds it.

    p_x, p_y: ``[N]`` contiguous 16-bit. constexpr: ACTIVATION, the kernels' ``@triton.jit`` helper
    (fp32 -> fp32); FORMULA, its formula id; BLOCK.
    """
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    b_x = tl.load(p_x + o, mask=m).to(tl.float32)
    tl.store(p_y + o, ACTIVATION(b_x, FORMULA).to(p_y.dtype.element_ty), mask=m)


# The host reads its results at once: launches recorded dry (``exactfuse_cli.plan``) still run it, so that a
# proof made then is the one a real call makes.
prove_kernel.runs_when_dry = True


def all_inputs(dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Every 16-bit pattern of ``dtype`` once: ``[65536]``."""
    return torch.arange(INPUTS, dtype=torch.int32).to(torch.int16).view(dtype).to(device)


def reference(activation: str, x: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch's activation of ``x`` in ``x``'s dtype: the spec's ``F.silu`` / ``F.gelu`` /
    ``torch.sigmoid``."""
    if activation == "silu":
        return F.silu(x)
    if activation == "sigmoid":
        return torch.sigmoid(x)
    return F.gelu(x, approximate=activation.removeprefix("gelu_"))


def differing(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Bool mask of the elements whose bit patterns differ; any NaN matches any NaN."""
    bits = actual.view(torch.int16) != expected.view(torch.int16)
    return bits & ~(actual.isnan() & expected.isnan())


def check_formula(activation: str, formula: int, dtype: torch.dtype, device: torch.device | str) -> FormulaCheck:
    """Run ``formula`` over every input of ``dtype`` through the kernels' helper, compare with eager."""

    device = torch.device(device)
    with _disable_current_modes(), torch.no_grad():  # real tensors, also while a launcher is being traced
        x = all_inputs(dtype, device)
        y = torch.empty_like(x)
        block = 1024 if device.type == "cuda" else INPUTS  # the interpreter: one numpy-wide program
        prove_kernel[(INPUTS // block,)](x, y, INPUTS, ACTIVATION=kernel_activation, FORMULA=formula, BLOCK=block)
        where = differing(y, reference(activation, x)).nonzero().flatten()
        return FormulaCheck(formula, int(where.numel()), tuple(x[where[:SHOWN]].float().tolist()))


_PROOFS: dict[tuple[str, torch.dtype, torch.device], ProofResult] = {}
_CHOSEN: dict[tuple[str, torch.dtype, torch.device], int] = {}
_warned_capture: set[tuple[str, torch.dtype]] = set()


def _normal(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def proof(activation: str, dtype: torch.dtype, device: torch.device | str) -> ProofResult:
    """The formula the kernels may use for ``activation`` on ``dtype`` inputs on ``device``: the first of
    ``CANDIDATES[(activation, dtype)]`` that no 16-bit input tells apart from eager, else the exact one.
    Cached per (activation, dtype, device) for the process; fp32 is never proven (exact formula)."""
    device = _normal(device)
    key = (activation, dtype, device)
    if key not in _PROOFS:
        _PROOFS[key] = _prove(activation, dtype, device)
    return _PROOFS[key]


def _prove(activation: str, dtype: torch.dtype, device: torch.device) -> ProofResult:
    checks = []
    for formula in CANDIDATES.get((activation, dtype), ()) if dtype.itemsize == 2 else ():
        check = check_formula(activation, formula, dtype, device)
        checks.append(check)
        if check.differing == 0:
            return ProofResult(activation, dtype, formula, tuple(checks))
        log.warning(
            "exactfuse: %s formula %r is not bitwise for %s on %s: %s; the kernels take the next formula",
            activation, check.name, dtype, device, check.summary(),
        )  # fmt: skip
    return ProofResult(activation, dtype, EXACT[activation], tuple(checks))


def chosen_formula(activation: str, dtype: torch.dtype, device: torch.device) -> int:
    """The formula id a launcher passes as ``FORMULA`` for ``activation`` of ``dtype`` tensors on
    ``device`` (a tensor's device). One dict lookup after the first call per key."""
    formula = _CHOSEN.get((activation, dtype, device))
    return _choose(activation, dtype, device) if formula is None else formula


def _choose(activation: str, dtype: torch.dtype, device: torch.device) -> int:
    if device.type != "cuda" or dtype.itemsize != 2 or (activation, dtype) not in CANDIDATES:
        formula = EXACT[activation]
    elif torch.cuda.is_current_stream_capturing():
        if (activation, dtype) not in _warned_capture:
            _warned_capture.add((activation, dtype))
            log.warning(
                "exactfuse: the fast %s formula for %s is proven on a device's first eager call or in "
                "exactfuse.warmup, not inside CUDA-graph capture; this capture takes the exact formula "
                "(bitwise as well). Call exactfuse.warmup(...) before capturing.", activation, dtype,
            )  # fmt: skip
        return EXACT[activation]
    else:
        formula = proof(activation, dtype, device).formula
    _CHOSEN[(activation, dtype, device)] = formula
    return formula


def clear_proofs() -> None:
    """Forget every proof and choice of this process (tests; a changed ``CANDIDATES``)."""
    _PROOFS.clear()
    _CHOSEN.clear()
    _warned_capture.clear()
