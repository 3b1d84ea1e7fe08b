"""The bench tests' fake op (tests/bench_fakes.py), declared once per test module."""

import pytest

from bench_fakes import registered_fake_op


@pytest.fixture(scope="module")
def fake_op():
    yield from registered_fake_op()
