"""Peer libraries timed beside exactfuse: adapters keyed by op name.

A :class:`PeerAdapter` says whether its library is importable here
(``available``), whether it can run a case (``accepts``) and how to turn the
op's arguments into a zero-argument call of the peer (``prepare``). Argument
conversion (splitting, copies) happens in ``prepare``, outside the timed
region: the peer is timed on the inputs it natively takes. Peers have no
contract; the runner checks them against native with the dtype Tolerance and
reports their error.

The modules of this package, one per op family (``bench/peers/<family>.py``), register their op's peers
with :func:`register_peer`; :func:`peers_for` imports every one of them the first time it is called, and
the runner picks up every available adapter whose ``op`` is being benchmarked. Nothing here knows any op.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import torch

PreparedCall = Callable[[], object]


def _always(*args, **kwargs) -> bool:
    return True


@dataclass(frozen=True)
class PeerAdapter:
    """One peer implementation of one exactfuse op.

    name: column name in results (``liger``). op: the exactfuse op it stands
    in for. available: library importable and usable here (called once per
    run). prepare: ``(args, kwargs) -> zero-arg call`` on the op's arguments.
    accepts: ``(*args, **kwargs) -> bool`` for the cases it supports.
    distribution: the package whose version goes into the results.
    computes: what the row computes, in words, where the peer's call is not exactly the op's (an adapter
    around the peer, or the peer's own call without a semantics the op has); it goes into the row's note.
    result_only: the call computes the op's result but not the arguments the op mutates (a state cache
    the peer does not keep): the gate checks the result alone.
    """

    name: str
    op: str
    available: Callable[[], bool]
    prepare: Callable[[tuple, dict], PreparedCall]
    accepts: Callable[..., bool] = _always
    distribution: str | None = None
    computes: str = ""
    result_only: bool = False

    def version(self) -> str | None:
        if self.distribution is None:
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None


PEERS: dict[str, dict[str, PeerAdapter]] = {}


def register_peer(adapter: PeerAdapter) -> PeerAdapter:
    """Add ``adapter`` for its op; a second adapter of the same name for the op is an error."""
    by_name = PEERS.setdefault(adapter.op, {})
    if adapter.name in by_name:
        raise ValueError(f"peer {adapter.name!r} is already registered for op {adapter.op!r}")
    by_name[adapter.name] = adapter
    return adapter


def unregister_peer(op: str, name: str) -> None:
    PEERS.get(op, {}).pop(name, None)


@functools.cache
def load_peers() -> None:
    """Import every module of this package (once): each registers its op family's peers."""
    for module in pkgutil.iter_modules(__path__, f"{__name__}."):
        importlib.import_module(module.name)


def peers_for(op: str, wanted: Callable[[str], bool] = lambda name: True) -> list[PeerAdapter]:
    """The adapters registered for ``op`` that ``wanted`` takes (by name) and whose library is available here;
    only those are imported (an unwanted peer's library, FLA's say, costs its import nothing)."""
    load_peers()
    return [a for a in PEERS.get(op, {}).values() if wanted(a.name) and a.available()]


def importable_on_cuda(module: str) -> Callable[[], bool]:
    """An ``available`` check: a CUDA device is present and ``module`` imports (checked once)."""

    @functools.cache
    def available() -> bool:
        if not torch.cuda.is_available():
            return False
        try:
            importlib.import_module(module)
        except Exception:  # not installed, or incompatible with this torch/triton
            return False
        return True

    return available


def cuda_only() -> bool:
    """An ``available`` check for baselines built from torch itself: a CUDA device is present."""
    return torch.cuda.is_available()


def fastest(calls: dict[str, PreparedCall], rep_ms: float = 5.0) -> PreparedCall:
    """The fastest of a peer's natural calls for one case (its users' forms of the same computation), each
    timed as the bench times it (CUDA-graph replays, ``timing.cudagraph_timer``); the winner carries its
    name as ``form``, which the row's note gives. One call is returned as it is."""
    from exactfuse.bench.timing import cudagraph_timer

    if len(calls) > 1:
        timer = cudagraph_timer(rep_ms=rep_ms)
        times = {name: timer(call) for name, call in calls.items()}
        name = min(times, key=times.get)
    else:
        (name,) = calls
    call = calls[name]
    call.form = name
    return call


@contextlib.contextmanager
def on_capture_stream():
    """A stream context for a peer that records an autograd graph when prepared and runs only its backward
    when called: the stream ``torch.cuda.graph`` captures on by default (the timer's CUDA graph,
    ``triton.testing.do_bench_cudagraph``). Autograd runs each backward node on its forward's stream, so a
    forward recorded anywhere else would put the timed backward's kernels outside the capture. The stream
    waits for the caller's work before the block, and the caller's stream for the block's after it."""
    if torch.cuda.graph.default_capture_stream is None:
        torch.cuda.graph(torch.cuda.CUDAGraph())  # creates the class's default capture stream
    stream, caller = torch.cuda.graph.default_capture_stream, torch.cuda.current_stream()
    stream.wait_stream(caller)
    with torch.cuda.stream(stream):
        yield
    caller.wait_stream(stream)
