"""The bench tests' fake op (tests/support/bench_fakes.py), declared once per test module."""

import pytest

from support.bench_fakes import registered_fake_op


@pytest.fixture(scope="module")
def fake_op():
    yield from registered_fake_op()
