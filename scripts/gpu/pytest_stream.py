"""A pytest plugin that writes each test's result the moment it is known, for runs that may be cut off.

``pytest -p pytest_stream`` (with ``scripts/gpu`` on ``PYTHONPATH``) appends one line per finished test to
the file named by ``EXACTFUSE_STREAM`` -- ``outcome seconds node-id`` -- and, after a failure, its
traceback. Under ``pytest-xdist`` the controller receives every worker's reports, so one file holds them
all. A run stopped at its time limit keeps everything that finished, and the tests still running are
the ones whose ``start`` line has no result line.
"""

from __future__ import annotations

import os

# xdist workers report to the controller, which writes; a worker writing too would double each line
_PATH = None if os.environ.get("PYTEST_XDIST_WORKER") else os.environ.get("EXACTFUSE_STREAM")


def _write(text: str) -> None:
    if _PATH:
        with open(_PATH, "a") as f:
            f.write(text)


def pytest_runtest_logstart(nodeid, location):
    _write(f"start {nodeid}\n")


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        if report.when != "call" and report.outcome == "skipped":
            _write(f"skipped {report.duration:.1f} {report.nodeid}\n")
            return
        outcome = report.outcome if report.when == "call" else f"{report.outcome}-in-{report.when}"
        _write(f"{outcome} {report.duration:.1f} {report.nodeid}\n")
        if report.failed:
            _write("".join(f"    {line}\n" for line in str(report.longrepr).splitlines()[-60:]))
