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
GPU_MEMORY_SHARE = 0.85


def pytest_configure(config):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if HAS_CUDA and workers > 1 and os.environ.get("PYTEST_XDIST_WORKER"):
        torch.cuda.set_per_process_memory_fraction(GPU_MEMORY_SHARE / workers)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_interp = pytest.mark.skip(reason="needs TRITON_INTERPRET=1 (Triton on the CPU)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "interpreter" in item.keywords and not INTERPRETER:
            item.add_marker(skip_interp)


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
