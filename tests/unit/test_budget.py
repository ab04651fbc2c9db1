"""The per-test budget (tests/support/budget.py): over 120 s needs a ``slow`` marker with a reason."""

from __future__ import annotations

import pytest

from tests.support import budget

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
