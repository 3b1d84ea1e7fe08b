"""Test configuration: markers, the Triton interpreter on CPU-only machines, seeds.

Without CUDA, ``TRITON_INTERPRET=1`` is set before Triton is imported, so the
Triton providers run on the CPU (tests marked ``interpreter``). ``gpu`` tests
are skipped without CUDA; ``interpreter`` tests are skipped when the
interpreter is off (on a CUDA machine run them with ``TRITON_INTERPRET=1``).

Under pytest-xdist on a GPU each worker takes at most ``GPU_MEMORY_SHARE / workers`` of the card, so
that workers cannot starve each other; tests marked ``big_memory`` need more than that share and run in
a pass of their own (``scripts/gpu/gpu_suite.py``). Each GPU test records its peak allocation as the
property ``peak_gib``.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

HAS_CUDA = torch.cuda.is_available()
INTERPRETER = os.environ.get("TRITON_INTERPRET", "0") == "1"
# the part of the card the xdist workers share; the rest is their CUDA contexts' and the driver's
# (EXACTFUSE_GPU_SHARE sets it for one run: scripts/gpu/gpu_suite.py's big_memory pass)
GPU_MEMORY_SHARE = 0.85


def pytest_configure(config):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if HAS_CUDA and workers > 1 and os.environ.get("PYTEST_XDIST_WORKER"):
        share = float(os.environ.get("EXACTFUSE_GPU_SHARE", GPU_MEMORY_SHARE))
        torch.cuda.set_per_process_memory_fraction(share / workers)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_interp = pytest.mark.skip(reason="needs TRITON_INTERPRET=1 (Triton on the CPU)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "interpreter" in item.keywords and not INTERPRETER:
            item.add_marker(skip_interp)
    if path := os.environ.get("EXACTFUSE_TEST_SECONDS"):
        items[:] = first_pairs_balanced(
            slowest_first(items, path), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
        )


def slowest_first(items: list, path: str) -> list:
    """``items`` ordered by the seconds each took in an earlier run (``path``: lines ``SECONDS NODEID``, as
    ``scripts/gpu/gpu_suite.py`` writes them), tests it has no time for first, ties in collection order.
    pytest-xdist hands tests out in this order, one at a time a worker (``--maxschedchunk 1``, which
    ``scripts/gpu/gpu_suite.py`` passes), so the longest start first and the short ones fill in: the pass
    ends near its total time over the workers, not one long test after the others finished.
    Every worker reads the same file, so all collect the same order, as xdist requires."""
    seconds = {}
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
        for line in lines:
            value, _, node = line.strip().partition(" ")
            seconds[node.strip()] = float(value)
    return sorted(items, key=lambda item: -seconds.get(item.nodeid, float("inf")))


def first_pairs_balanced(items: list, workers: int) -> list:
    """``items`` (slowest first) with their first ``2 workers`` reordered so that xdist's first round pairs a
    long test with a short one: its load scheduler hands each worker two tests to start with, consecutive in
    the order (at least two, even with ``--maxschedchunk 1``), which gave the first worker the two longest
    (the wgmma kernel's two dtypes, 272 s in a shared pass of 477 at 4807fcb,
    benchmarks/results/h100/gpu_suite.txt). Worker ``i`` gets the ``i``-th longest and the ``(2 workers -
    1 - i)``-th; the rest follow, slowest first. Unchanged without workers."""
    if workers < 2 or len(items) < 2 * workers:
        return items
    head = items[: 2 * workers]
    paired = [test for i in range(workers) for test in (head[i], head[2 * workers - 1 - i])]
    return paired + items[2 * workers :]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _peak_memory(request):
    """A GPU test's peak allocation in GiB, as the property ``peak_gib`` (the suite's report lists the largest)."""
    if not HAS_CUDA or "gpu" not in request.keywords:
        yield
        return
    torch.cuda.reset_peak_memory_stats()
    yield
    request.node.user_properties.append(("peak_gib", round(torch.cuda.max_memory_allocated() / 2**30, 2)))
