"""The CI budget of one test: a test whose body runs over two minutes must say why.

``.ci/run`` has a budget (the CI issue: 40 minutes on a fresh machine, 25 with caches), and most of
it goes to a few long end-to-end tests. A new test that quietly takes minutes is how a suite drifts
past its budget, so a test whose call (its own body, without the set-up of fixtures it may share
with its module: ``--durations`` shows those) takes more than :data:`LIMIT_S` fails at its
teardown unless it carries ``@pytest.mark.slow(reason="...")`` saying what the time buys. The
limit is generous on purpose (the long tests here take a minute on a busy two-core machine): it
catches a test that waits on time or repeats a whole scenario, not noise.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

LIMIT_S = 120.0
"""Seconds a test's call may take without a ``slow`` marker."""

_CALL_S = pytest.StashKey[float]()


def slow_reason(item: pytest.Item) -> str | None:
    """The reason the test's ``slow`` marker gives, or None (no marker, or one without a reason)."""
    marker = item.get_closest_marker("slow")
    if marker is None:
        return None
    reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
    return str(reason).strip() or None


def over_budget(call_s: float, reason: str | None) -> str | None:
    """The failure message for a call of ``call_s`` seconds, or None when within the budget."""
    if call_s <= LIMIT_S or reason is not None:
        return None
    return (f"this test's call took {call_s:.0f} s, over the {LIMIT_S:.0f} s a test may take without "
            f'@pytest.mark.slow(reason="...") saying what the time buys (tests/support/budget.py); '
            f"make it faster, or mark it and say why")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call":
        item.stash[_CALL_S] = report.duration
    elif report.when == "teardown" and report.passed:
        message = over_budget(item.stash.get(_CALL_S, 0.0), slow_reason(item))
        if message is not None:
            report.outcome = "failed"
            report.longrepr = message
