"""The conv family's spec/prefill launch variants against the per-row masked tile, under the interpreter:
register-window runs (``ConvConfig.unroll``), tiles walked down the rows (``steps``) and the lean tap sum of
tiles inside one request (``clean``)."""

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
    assert_same_bits(monkeypatch, {"unroll": unroll, "clean": False}, {"clean": False})


@pytest.mark.interpreter
@pytest.mark.parametrize("steps", [1, 3])
def test_interpreter_clean_tiles_give_the_same_bits(steps, monkeypatch):
    """Tiles of 4 rows, ``steps`` of them a program, with the lean tap sum wherever a tile lies inside one
    request past its first ``SL`` rows, against the per-row masked tile everywhere: outputs, residuals and
    states bit for bit (varlen requests, padded slots, initial states, spec rows, ``seq_idx``)."""
    assert_same_bits(monkeypatch, {"BT": 4, "steps": steps}, {"BT": 4, "clean": False})


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
