"""Duration strings: one strict spelling, float seconds inside, canonical text outside."""

from __future__ import annotations

import pytest

from trainguard.policy import durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("7d", 604800.0),
        ("500ms", 0.5),
        ("1d2h3m4s5ms", 93784.005),
        ("0s", 0.0),
    ],
)
def test_parse_accepts_unit_strings(text: str, seconds: float) -> None:
    assert durations.parse(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "bad",
    ["30", "", " 30s", "30 s", "-5s", "5S", "1m1h", "1s1s", "1e3s", "30sec", "P1D", "5s;rm", "9" * 70 + "s", "400d"],
)
def test_parse_rejects_everything_else(bad: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        durations.parse(bad)


@pytest.mark.parametrize("bad", [30, 30.0, None, True, ["30s"]])
def test_parse_rejects_non_strings(bad: object) -> None:
    with pytest.raises(ValueError, match="must be a string"):
        durations.parse(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1800.0, "30m"), (5400.0, "1h30m"), (0.5, "500ms"), (604800.0, "7d"), (0.0, "0s"), (90.0, "1m30s")],
)
def test_format_is_canonical_and_round_trips(seconds: float, text: str) -> None:
    assert durations.format_seconds(seconds) == text
    assert durations.parse(text) == pytest.approx(seconds)


@pytest.mark.parametrize("seconds", [0.0001, 0.00001, 1.0005])
def test_format_of_sub_millisecond_values_still_parses(seconds: float) -> None:
    assert durations.parse(durations.format_seconds(seconds)) == pytest.approx(seconds)
