"""Host time of an eager op call on the CPU, piece by piece: validation, provider choice, the rest.

For ``w4a16_gemm`` (M = 1, K = N = 4096, fp16, positional arguments as a decode layer passes them)
and ``silu_and_mul`` (T = 1, d = 4096, fp16), each piece timed alone:

- ``check``: the op's validation;
- ``select native``: provider choice in the CPU default order (``native``);
- ``select triton,native``: provider choice in the CUDA order. ``TRITON_INTERPRET=1`` is set before
  Triton is imported, so the Triton provider is available and its ``supports_args`` runs and accepts
  these CPU tensors, as it does CUDA tensors on a CUDA machine (its device test takes the
  interpreter's longer branch here);
- ``__call__ noop``: the whole eager call ``op(*args)`` with a provider that returns at once (``noop``,
  registered here with the native signature, chosen by ``op.priority(["noop"])``): the host time of
  the call minus the provider's own;
- ``rest of __call__``: ``__call__ noop`` minus ``check`` minus ``select native``.

The pieces are timed in REPEAT interleaved rounds of NUMBER calls each, so that a slow spell of the
machine (runs of this script on a 2-core CPU differ by up to 2x) reaches every piece; each
number is the fastest round (µs per call; the median round in brackets). Nothing is launched. To
compare two versions of the code, run it on each checkout a few times, alternating, and take the
lowest of each number:

    PYTHONPATH=src python3 scripts/probe_host_overhead.py          # about 15 s on a 2-core CPU
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import contextlib
import statistics
import timeit
from collections.abc import Callable

import torch

from exactfuse.ops.act_and_mul import silu_and_mul
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.registry import Op
from exactfuse.testing.cases.w4a16 import _random_prepared

NUMBER = 2000
REPEAT = 60


def add_noop_provider(op: Op) -> None:
    """A provider with the native signature that returns its first argument."""

    def noop(*args, **kwargs):
        return args[0]

    noop.__signature__ = op.signature
    noop.__annotations__ = {p.name: p.annotation for p in op.signature.parameters.values()}
    noop.__annotations__["return"] = op.signature.return_annotation
    op.provider("noop")(noop)


def time_pieces(op: Op, pieces: dict[str, tuple[list[str] | None, Callable[[], object]]]) -> dict[str, list[float]]:
    """µs per call of each ``name: (priority order or None, fn)``, one list entry per round."""
    runs: dict[str, list[float]] = {name: [] for name in pieces}
    for _ in range(REPEAT):
        for name, (order, fn) in pieces.items():
            with op.priority(order) if order else contextlib.nullcontext():
                runs[name].append(timeit.timeit(fn, number=NUMBER) / NUMBER * 1e6)
    return runs


def probe(name: str, op: Op, args: tuple) -> None:
    add_noop_provider(op)
    assert op.select(*args).name == "native"
    with op.priority(["triton", "native"]):
        assert op.select(*args).name == "triton", "the Triton provider should accept these arguments"
    with op.priority(["noop"]):
        assert op(*args) is args[0]
    runs = time_pieces(
        op,
        {
            "check": (None, lambda: op.check(*args)),
            "select native": (None, lambda: op.select(*args)),
            "select triton,native": (["triton", "native"], lambda: op.select(*args)),
            "__call__ noop": (["noop"], lambda: op(*args)),
        },
    )
    best = {piece: min(r) for piece, r in runs.items()}
    print(name)
    for piece, r in runs.items():
        print(f"  {piece:22} {best[piece]:6.2f} µs  ({statistics.median(r):.2f})")
    rest = best["__call__ noop"] - best["check"] - best["select native"]
    print(f"  {'rest of __call__':22} {rest:6.2f} µs")


def main() -> None:
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; fastest (median) of {REPEAT} rounds of {NUMBER} calls")
    w = _random_prepared(4096, 4096, torch.float16, "cpu")
    a = torch.randn(1, 4096, dtype=torch.float16)
    probe("w4a16_gemm M1-4096x4096 fp16", w4a16_gemm, (a, w.qweight, w.scales, None, None, None, 128))
    probe("silu_and_mul T1-d4096 fp16", silu_and_mul, (torch.randn(1, 2 * 4096, dtype=torch.float16),))


if __name__ == "__main__":
    main()
