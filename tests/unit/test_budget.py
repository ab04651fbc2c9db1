"""The per-test budget (tests/support/budget.py): over 120 s needs a ``slow`` marker with a reason; and
the time per worker (tests/support/worker_times.py)."""

from __future__ import annotations

import types

import pytest

from tests.support import budget, worker_times

pytestmark = pytest.mark.unit


def test_a_call_within_the_limit_passes_without_a_marker() -> None:
    assert budget.over_budget(budget.LIMIT_S, None) is None


def test_a_longer_call_without_a_reason_fails_and_says_what_to_do() -> None:
    message = budget.over_budget(budget.LIMIT_S + 11, None)
    assert message is not None
    assert "131 s" in message and "@pytest.mark.slow" in message


def test_a_longer_call_with_a_reason_passes() -> None:
    assert budget.over_budget(budget.LIMIT_S * 3, "six recovery scenarios at once") is None


@pytest.mark.slow(reason="the reason is read from the marker")
def test_the_reason_is_read_from_the_marker(request: pytest.FixtureRequest) -> None:
    assert budget.slow_reason(request.node) == "the reason is read from the marker"


@pytest.mark.slow
def test_a_marker_without_a_reason_is_no_reason(request: pytest.FixtureRequest) -> None:
    assert budget.slow_reason(request.node) is None


def test_a_report_names_the_xdist_worker_that_ran_it_on_the_controller_only() -> None:
    report = pytest.TestReport("t.py::x", ("t.py", 1, "x"), {}, "passed", None, "call", [])
    assert worker_times.worker_of(report) is None  # not from a worker (a run without xdist)
    report.node = types.SimpleNamespace(gateway=types.SimpleNamespace(id="gw2"))  # type: ignore[attr-defined]
    assert worker_times.worker_of(report) == "gw2"
    assert worker_times.minutes(1531.4) == "25 min 31 s"
