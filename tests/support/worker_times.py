"""pytest plugin: how long each pytest-xdist worker was busy and when it finished.

The CI budget (``.ci/run``) is the wall time of the slowest worker, not the sum of the tests: a
worker holding the simulated cluster's group, or one long file that came last, decides it. The
summary at the end of a run with several workers names each worker's test count, the time its
tests took, and when its last test ended after the session began, so the long pole is visible
in every CI log (the CI issue: "visible budget")."""

from __future__ import annotations

import dataclasses
import time

import pytest


@dataclasses.dataclass
class Worker:
    tests: int = 0
    busy_s: float = 0.0
    last_stop: float = 0.0


_started = [time.time()]
"""When the session began (set at its start; a list, not a rebound global)."""
_workers: dict[str, Worker] = {}


def worker_of(report: pytest.TestReport) -> str | None:
    """The xdist worker (``gw0`` ...) that ran ``report``, on the controller; None elsewhere."""
    node = getattr(report, "node", None)
    gateway = getattr(node, "gateway", None)
    name = getattr(gateway, "id", None)
    return str(name) if name else None


def pytest_sessionstart(session: pytest.Session) -> None:
    del session
    _started[0] = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    name = worker_of(report)
    if name is None:
        return
    worker = _workers.setdefault(name, Worker())
    worker.busy_s += report.duration
    worker.last_stop = max(worker.last_stop, getattr(report, "stop", 0.0) or time.time())
    if report.when == "call":
        worker.tests += 1


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if len(_workers) < 2:
        return
    terminalreporter.section("time per worker")
    for name in sorted(_workers, key=lambda n: int(n.removeprefix("gw")) if n[2:].isdigit() else 0):
        w = _workers[name]
        terminalreporter.write_line(
            f"{name}: {w.tests:5d} tests, busy {minutes(w.busy_s)} (set-ups and teardowns included), "
            f"last test ended {minutes(max(0.0, w.last_stop - _started[0]))} after the start")
