"""Test configuration: markers, the Triton interpreter on CPU-only machines, seeds.

Without CUDA, ``TRITON_INTERPRET=1`` is set before Triton is imported, so the
Triton providers run on the CPU (tests marked ``interpreter``). ``gpu`` tests
are skipped without CUDA; ``interpreter`` tests are skipped when the
interpreter is off (on a GPU machine run them with ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

HAS_CUDA = torch.cuda.is_available()
INTERPRETER = os.environ.get("TRITON_INTERPRET", "0") == "1"


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
