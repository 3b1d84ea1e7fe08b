"""A pytest plugin that writes each test's result the moment it is known, for runs that may be cut off.

``pytest -p pytest_stream`` (with ``scripts/gpu`` on ``PYTHONPATH``) appends one line per finished test to
the file named by ``EXACTFUSE_STREAM`` -- ``outcome seconds node-id @wall worker``: the seconds of its setup
and call, ``@wall`` the seconds since the run began when it finished, ``worker`` the xdist worker that ran
it -- and, after a failure, its traceback; and ``start node-id @wall`` when a test starts. Under
``pytest-xdist`` the controller receives every worker's reports, so one file holds them all. A run stopped
at its time limit keeps everything that finished, and the tests still running are the ones whose ``start``
line has no result line.
"""

from __future__ import annotations

import os
import time

# xdist workers report to the controller, which writes; a worker writing too would double each line
_PATH = None if os.environ.get("PYTEST_XDIST_WORKER") else os.environ.get("EXACTFUSE_STREAM")


def _write(text: str) -> None:
    if _PATH:
        with open(_PATH, "a") as f:
            f.write(text)


_BEGAN = time.monotonic()
_SETUP_SECONDS: dict[str, float] = {}


def _wall() -> str:
    return f"@{time.monotonic() - _BEGAN:.0f}"


def pytest_runtest_logstart(nodeid, location):
    _write(f"start {nodeid} {_wall()}\n")


def pytest_runtest_logreport(report):
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "-")
    if report.when == "setup" and report.passed:
        _SETUP_SECONDS[report.nodeid] = report.duration
        return
    if report.when == "call" or report.outcome != "passed":
        seconds = report.duration + _SETUP_SECONDS.pop(report.nodeid, 0.0)
        if report.when != "call" and report.outcome == "skipped":
            _write(f"skipped {seconds:.1f} {report.nodeid} {_wall()} {worker}\n")
            return
        outcome = report.outcome if report.when == "call" else f"{report.outcome}-in-{report.when}"
        _write(f"{outcome} {seconds:.1f} {report.nodeid} {_wall()} {worker}\n")
        if report.failed:
            _write("".join(f"    {line}\n" for line in str(report.longrepr).splitlines()[-60:]))
