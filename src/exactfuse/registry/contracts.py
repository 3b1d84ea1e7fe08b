"""Numerical contracts: how a provider's output must relate to the native spec.

| contract      | passes when                                                        |
|---------------|--------------------------------------------------------------------|
| ``Bitwise()`` | every element has the native bit pattern (any NaN matches any NaN) |
| ``Ulp(n)``    | every element is within n units in the last place of the dtype     |
| ``Tolerance`` | ``isclose`` with the per-dtype (atol, rtol) table below            |
| ``PerOutput`` | one contract per output of an op that returns several tensors      |

NaN positions must match under every contract. A check returns a
:class:`CheckResult` with the max abs error, max ulp, mismatch count and the
index of the worst element, so a failure says where to look. Every check runs
where the tensors are (the GPU for GPU tests, ``verify`` and the bench gate),
``comparison.CHUNK`` elements at a time, so its float64 and int64 temporaries stay bounded
and nothing is copied to the host.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from exactfuse.registry import comparison
from exactfuse.registry.comparison import (
    _INT_VIEW,
    _abs_err,
    _flat_pair,
    _Largest,
    _unravel,
    _zero_mask_mismatches,
    bits_differ,
    ulp_distance,
)
from exactfuse.utils import DTYPE_NAMES

# (atol, rtol) per dtype. fp32: a few ulp of fp32 around 1 (2^-23 = 1.2e-7) after
# a short chain of ops; fp16: 2^-10 = 9.8e-4 is one ulp at 1; bf16: 2^-7 = 7.8e-3
# is one ulp at 1, so 1.6e-2 admits two roundings of difference.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1.3e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-3, 1.6e-2),
}


@dataclass
class CheckResult:
    """Outcome of one contract check of ``actual`` against ``expected``."""

    passed: bool
    contract: str
    numel: int
    mismatches: int = 0
    max_abs_err: float = 0.0
    max_ulp: int = 0
    worst_index: tuple[int, ...] | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        text = (
            f"{status} {self.contract}: {self.mismatches}/{self.numel} differ, "
            f"max abs err {self.max_abs_err:.3g}, max ulp {self.max_ulp}"
        )
        if self.worst_index is not None and self.mismatches:
            text += f", worst at {self.worst_index}"
        if self.detail:
            text += f"; {self.detail}"
        return text


class Contract(abc.ABC):
    """Base class: subclasses implement :meth:`check`."""

    name = "contract"

    @abc.abstractmethod
    def check(self, actual: torch.Tensor, expected: torch.Tensor, **context: Any) -> CheckResult:
        """Judge ``actual`` (a provider's output) against ``expected`` (native's)."""

    def _shape_check(self, actual: torch.Tensor, expected: torch.Tensor) -> CheckResult | None:
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            return CheckResult(
                False,
                self.name,
                expected.numel(),
                expected.numel(),
                detail=f"got {tuple(actual.shape)} {actual.dtype}, expected {tuple(expected.shape)} {expected.dtype}",
            )
        return None

    def for_outputs(self, n: int) -> list[Contract]:
        """The contract of each of a call's ``n`` outputs: this one for all (:class:`PerOutput` differs)."""
        return [self] * n

    def describe(self, dtype: torch.dtype) -> str:
        """The contract on outputs of ``dtype``, with its numbers (a tolerance's atol and rtol)."""
        return self.name

    def __repr__(self) -> str:
        return self.name


class Elementwise(Contract):
    """A contract judged element by element (:meth:`_bad`), with the statistics of :meth:`_measure`."""

    @abc.abstractmethod
    def _bad(self, a: torch.Tensor, e: torch.Tensor, ulp: torch.Tensor) -> torch.Tensor:
        """The elements of a chunk that break the contract."""

    def _measure(self, actual: torch.Tensor, expected: torch.Tensor, chunk: int | None = None) -> CheckResult:
        """The result of an elementwise contract (:meth:`_bad`), ``chunk`` elements at a time where the
        tensors are: the mismatches, the largest error and ulp distance, and the worst element (the
        largest error among the mismatches, else overall)."""
        a, e = _flat_pair(actual, expected)
        chunk = chunk or comparison.CHUNK
        floating = a.dtype in _INT_VIEW
        mismatches, max_err, max_ulp = 0, 0.0, 0
        worst_bad, worst_err = _Largest(), _Largest()
        for start in range(0, a.numel(), chunk):
            ac, ec = a[start : start + chunk], e[start : start + chunk]
            err = _abs_err(ac, ec)
            ulp = ulp_distance(ac, ec) if floating else err.to(torch.int64)
            bad = self._bad(ac, ec, ulp)
            n_bad = int(bad.sum())
            mismatches += n_bad
            max_err = max(max_err, float(err.max()))
            max_ulp = max(max_ulp, int(ulp.max()))
            worst_err.offer(err, start)
            if n_bad:
                worst_bad.offer(torch.where(bad, 1 + err, torch.zeros_like(err)), start)
        worst = worst_bad.index if worst_bad.index is not None else worst_err.index
        return CheckResult(mismatches == 0, self.name, a.numel(), mismatches, max_err, max_ulp,
                           _unravel(worst, actual.shape))  # fmt: skip


class PerOutput(Contract):
    """One contract per output, in order, for an op that returns a tuple of tensors whose outputs are held
    to different contracts (an elementwise gradient bitwise, a reduction over another sum order by a
    float64 reference). ``outputs``: ``(name, contract)`` pairs; the name labels the output in reports."""

    def __init__(self, *outputs: tuple[str, Contract]):
        self.outputs = tuple(outputs)
        self.name = "; ".join(f"{name}: {c.name}" for name, c in self.outputs)

    def for_outputs(self, n: int) -> list[Contract]:
        if n != len(self.outputs):
            raise ValueError(f"{self.name}: {n} outputs, the contract names {len(self.outputs)}")
        return [c for _, c in self.outputs]

    def describe(self, dtype: torch.dtype) -> str:
        return "; ".join(f"{name}: {c.describe(dtype)}" for name, c in self.outputs)

    def check(self, actual, expected, **context):
        raise TypeError(f"{self.name}: check each output with its own contract (for_outputs)")


class Bitwise(Elementwise):
    """Identical bit patterns; any NaN matches any NaN."""

    name = "Bitwise"

    def _bad(self, a, e, ulp):
        return bits_differ(a, e)

    def check(self, actual, expected, **context):
        if (res := self._shape_check(actual, expected)) is not None:
            return res
        return self._measure(actual, expected)


class Ulp(Elementwise):
    """At most ``n`` units in the last place of the output dtype."""

    def __init__(self, n: int):
        self.n = n
        self.name = f"Ulp({n})"

    def _bad(self, a, e, ulp):
        return ulp > self.n

    def check(self, actual, expected, **context):
        if (res := self._shape_check(actual, expected)) is not None:
            return res
        return self._measure(actual, expected)


class Tolerance(Elementwise):
    """``isclose`` with (atol, rtol) from :data:`TOLERANCES` unless given."""

    def __init__(self, atol: float | None = None, rtol: float | None = None):
        self.atol, self.rtol = atol, rtol
        self.name = "Tolerance" if atol is None and rtol is None else f"Tolerance({atol}, {rtol})"

    def tolerances(self, dtype: torch.dtype) -> tuple[float, float]:
        atol, rtol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
        return (self.atol if self.atol is not None else atol, self.rtol if self.rtol is not None else rtol)

    def describe(self, dtype: torch.dtype) -> str:
        atol, rtol = self.tolerances(dtype)
        return f"Tolerance(atol={atol:g}, rtol={rtol:g})"

    def _bad(self, a, e, ulp):
        atol, rtol = self.tolerances(a.dtype)
        return ~torch.isclose(a.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True)

    def check(self, actual, expected, **context):
        if (res := self._shape_check(actual, expected)) is not None:
            return res
        res = self._measure(actual, expected)
        res.detail = "atol {:g}, rtol {:g}".format(*self.tolerances(actual.dtype))
        return res


def contract_for(contract: Contract | dict[torch.dtype, Contract], dtype: torch.dtype) -> Contract:
    """Resolve a per-dtype contract table (or a single contract) for ``dtype``."""
    if isinstance(contract, dict):
        if dtype not in contract:
            raise KeyError(f"no contract declared for dtype {dtype}")
        return contract[dtype]
    return contract


def describe(contract: Contract | dict[torch.dtype, Contract], dtypes: Sequence[torch.dtype], sep: str = ", ") -> str:
    """``contract`` (one, or a per-dtype table) on ``dtypes``, with its numbers: ``"fp16: ..., bf16: ..."``
    (entries joined by ``sep``), or one entry where every dtype reads the same."""
    described = {dtype: contract_for(contract, dtype).describe(dtype) for dtype in dtypes}
    if len(set(described.values())) == 1:
        return next(iter(described.values()))
    return sep.join(f"{DTYPE_NAMES.get(dtype, str(dtype))}: {text}" for dtype, text in described.items())


class Float64Relative(Contract):
    """Relative Frobenius error against a float64 reference, bounded by native's own.

    Passes when ``‖actual − ref64‖ / ‖ref64‖ ≤ factor × max(‖native − ref64‖ / ‖ref64‖, floor)``,
    where ``ref64 = reference(*args, **kwargs)`` is computed in float64 from the
    call's arguments and ``native`` is the ``expected`` output. The floor keeps an
    exact native (integer-valued data, one-hot inputs) from demanding exactness.
    NaN or Inf where the reference is finite fails; where the reference is NaN
    or infinite (special inputs) the output must hold the same value, and the
    norms are taken over the finite positions; an all-zero reference is judged
    by absolute error instead. For GEMM and attention (docs/contracts.md).
    """

    def __init__(self, reference, factor: float = 2.0, floor: float = 1e-6):
        self.reference, self.factor, self.floor = reference, factor, floor
        self.name = f"Float64Relative({factor:g}x)"

    def check(self, actual, expected, *, args=(), kwargs=None, **context):
        if (res := self._shape_check(actual, expected)) is not None:
            return res
        a_all, e_all = _flat_pair(actual, expected)
        ref_all = self.reference(*args, **(kwargs or {})).detach().to(e_all.device).reshape(-1)
        # sums of squares of the finite positions (the norms), the outputs that differ where the reference is
        # NaN or infinite (special inputs: there the output must be the same special), chunk by chunk
        sq_ref = sq_err = sq_native = 0.0
        n_special = 0
        worst = _Largest()
        chunk = comparison.CHUNK
        for start in range(0, a_all.numel(), chunk):
            ref = ref_all[start : start + chunk].double()
            a, e = a_all[start : start + chunk].double(), e_all[start : start + chunk].double()
            finite = torch.isfinite(ref)
            special_bad = ~finite & ~((a == ref) | (torch.isnan(a) & torch.isnan(ref)))
            ref_f = torch.where(finite, ref, 0.0)
            a_f, e_f = torch.where(finite, a, 0.0), torch.where(finite, e, 0.0)
            sq_ref += float(ref_f.square().sum())
            sq_err += float(torch.nan_to_num(a_f - ref_f, nan=float("inf")).square().sum())
            sq_native += float((e_f - ref_f).square().sum())
            n_special += int(special_bad.sum())
            abs_err = torch.where(finite, (a - ref).abs().nan_to_num(nan=float("inf")), 0.0)
            worst.offer(torch.where(special_bad, float("inf"), abs_err), start)
        scale = math.sqrt(sq_ref) or 1.0
        err, native_err = math.sqrt(sq_err) / scale, math.sqrt(sq_native) / scale
        bound = self.factor * max(native_err, self.floor)
        passed = a_all.numel() == 0 or (err <= bound and n_special == 0)
        detail = f"rel err {err:.3g} vs native {native_err:.3g} (bound {bound:.3g})"
        if n_special:
            detail += f"; {n_special} outputs differ where the reference is NaN or infinite"
        return CheckResult(
            passed=passed,
            contract=self.name,
            numel=a_all.numel(),
            mismatches=0 if passed else max(1, n_special),
            max_abs_err=worst.value or 0.0,
            worst_index=_unravel(worst.index, actual.shape),
            detail=detail,
            extra={"rel_err": err, "native_rel_err": native_err},
        )


def _rows_of(t: torch.Tensor) -> tuple[int, int]:
    """``(rows, d)``: every dimension but the last is a row index."""
    d = t.shape[-1] if t.dim() else 1
    return (t.numel() // d if d else 0), d


class RowBitwise(Elementwise):
    """Whole rows bitwise equal (zero signs and the zero mask included), but for a small fraction.

    For ops whose rows depend on a statistic (mean, std) that a provider sums in
    another order than the reference: in rare rows the rounded statistic lands on
    the neighbouring value and that whole row differs. Rows of width up to
    ``all_rows_up_to_d`` must all match. Wider rows: the contract is that at
    least ``min_fraction`` of the rows of a test matrix match; one call checks
    ``differing <= max(1, floor(rows * (1 - min_fraction)))`` (one row of
    slack, since a call with a handful of rows cannot express a fraction), and
    reports ``extra["rows"]`` and ``extra["differing_rows"]`` so that a test
    sums them over its matrix. A systematic error makes most rows differ and
    fails either way. ``extra`` also holds the zero-mask mismatches; ``max_ulp``
    is the largest distance in the differing rows. Runs on the tensors' device.
    """

    def __init__(self, min_fraction: float = 0.999, all_rows_up_to_d: int = 128):
        self.min_fraction, self.all_rows_up_to_d = min_fraction, all_rows_up_to_d
        self.name = f"RowBitwise({min_fraction:g}, all rows up to d={all_rows_up_to_d})"

    def allowed_rows(self, rows: int, d: int) -> int:
        if d <= self.all_rows_up_to_d:
            return 0
        return max(1, int(rows * (1.0 - self.min_fraction) + 1e-9))

    def _bad(self, a, e, ulp):
        return bits_differ(a, e)

    def check(self, actual, expected, **context):
        if (res := self._shape_check(actual, expected)) is not None:
            return res
        a, e = _flat_pair(actual, expected)
        rows, d = _rows_of(actual)
        differing = int(bits_differ(a, e).reshape(rows, d).any(-1).sum()) if rows and d else 0
        allowed = self.allowed_rows(rows, d)
        zero_mask = _zero_mask_mismatches(a, e)
        res = self._measure(actual, expected)
        res.passed = differing <= allowed
        res.detail = f"{differing}/{rows} rows differ (allowed {allowed}), {zero_mask} zero-mask mismatches"
        res.extra = {"rows": rows, "differing_rows": differing, "zero_mask_mismatches": zero_mask}
        return res


class ZeroMaskTolerance(Tolerance):
    """:class:`Tolerance`, plus the same zero positions as native in rows of width up to ``up_to_d``.

    For sparse outputs: a tolerance admits a tiny value where native has an
    exact zero, so on narrow rows the sparsity mask is compared exactly.
    """

    def __init__(self, up_to_d: int = 128, atol: float | None = None, rtol: float | None = None):
        super().__init__(atol, rtol)
        self.up_to_d = up_to_d
        self.name = f"{self.name} + zero mask up to d={up_to_d}"

    def describe(self, dtype: torch.dtype) -> str:
        return f"{super().describe(dtype)} + zero mask up to d={self.up_to_d}"

    def check(self, actual, expected, **context):
        res = super().check(actual, expected, **context)
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            return res
        a, e = _flat_pair(actual, expected)
        zero_mask = _zero_mask_mismatches(a, e)
        res.extra["zero_mask_mismatches"] = zero_mask
        if _rows_of(actual)[1] <= self.up_to_d and zero_mask:
            res.passed = False
            res.detail += f"; {zero_mask} zero-mask mismatches"
        return res
