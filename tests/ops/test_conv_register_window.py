"""The conv family's spec/prefill register-window runs (``ConvConfig.unroll``) against each tap's own
loads, under the interpreter."""

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
    shipped = heuristics.conv_config
    failures = []
    for op in (short_conv, causal_conv1d):
        for case in op.cases("cpu", torch.float32):
            if "decode" in case.id:  # one row a program: no runs
                continue
            base = run("triton", case, op)
            with monkeypatch.context() as m:
                m.setattr(heuristics, "conv_config", lambda *a: dataclasses.replace(shipped(*a), unroll=unroll))
                windowed = run("triton", case, op)
            for i, (a, b) in enumerate(zip(windowed, base, strict=True)):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and not torch.equal(bits(a), bits(b)):
                    failures.append(f"{op.name} {case.id}: argument {i} differs")
    assert not failures, "\n".join(failures)
