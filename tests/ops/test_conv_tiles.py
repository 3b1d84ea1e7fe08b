"""The conv family's spec/prefill launch variants against the row kernel's per-row masked tile alone, under
the interpreter: register-window runs (``ConvConfig.unroll``) and the lean prefill kernel with the row
kernel's fixup launch (``ConvConfig.lean``)."""

import dataclasses

import pytest
import torch

from exactfuse.ops.conv import causal_conv1d, heuristics, short_conv
from exactfuse.testing import clone_args

INT_VIEW = {torch.float16: torch.int16, torch.float32: torch.int32}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT_VIEW[t.dtype])


def run(provider: str, case, op):
    args, kwargs = clone_args(case.args, case.kwargs)
    out = op.run_provider(provider, *args, **kwargs)
    return (*args, out)


@pytest.mark.interpreter
@pytest.mark.parametrize("unroll", [4])
def test_interpreter_register_window_gives_the_same_bits(unroll, monkeypatch):
    """Spec and prefill rows in runs over a register window (``ConvConfig.unroll``) against each tap's
    own loads: outputs, residuals and states bit for bit, for short_conv and causal_conv1d (its packed
    ``seq_idx`` cases included)."""
    assert_same_bits(monkeypatch, {"unroll": unroll, "lean": False}, {"lean": False})


@pytest.mark.interpreter
@pytest.mark.parametrize("rows", [2, 4])
def test_interpreter_lean_prefill_gives_the_same_bits(rows, monkeypatch):
    """Tiles of ``rows`` rows: the lean kernel on the tiles with no request boundary near them, the fixup
    launch on the rest, against the per-row masked tile everywhere: outputs, residuals and states bit for
    bit (varlen and empty requests, padded slots, initial states, rows past the last request). 2-row tiles
    are shorter than the taps' reach (``SL`` up to 6), so one boundary leaves several tiles."""
    assert_same_bits(monkeypatch, {"BT": rows}, {"BT": rows, "lean": False})


def assert_same_bits(monkeypatch, variant: dict, reference: dict) -> None:
    """Every spec/prefill case of short_conv and causal_conv1d (fp32, CPU) launched with the shipped rule
    changed by ``variant`` and by ``reference``: every floating-point argument and output bit for bit."""
    shipped = heuristics.conv_config
    failures = []
    for op in (short_conv, causal_conv1d):
        for case in op.cases("cpu", torch.float32):
            if "decode" in case.id:  # one row a program
                continue
            runs = []
            for change in (variant, reference):
                with monkeypatch.context() as m:
                    m.setattr(heuristics, "conv_config", lambda *a, c=change: dataclasses.replace(shipped(*a), **c))
                    runs.append(run("triton", case, op))
            for i, (a, b) in enumerate(zip(*runs, strict=True)):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and not torch.equal(bits(a), bits(b)):
                    failures.append(f"{op.name} {case.id}: argument {i} differs")
    assert not failures, "\n".join(failures)
