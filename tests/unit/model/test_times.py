"""The one set of time conversions (``model.times``): the forms each former copy produced."""

from __future__ import annotations

import datetime

import pytest

from trainguard.model import times

T = 1_800_000_000  # 2027-01-15T08:00:00Z


def test_epoch_and_datetime_round_trip_in_utc() -> None:
    when = times.to_datetime(T + 0.25)
    assert when.tzinfo is datetime.UTC and times.to_epoch(when) == T + 0.25
    assert times.iso_utc(when) == "2027-01-15T08:00:00.250000+00:00"


def test_iso_text_accepts_z_and_offsets() -> None:
    assert times.parse_iso(" 2027-01-15T08:00:00Z ").timestamp() == T
    assert times.parse_iso("2027-01-15T10:00:00+02:00").timestamp() == T
    assert times.parse_iso("2027-01-15T08:00:00").tzinfo is None
    with pytest.raises(ValueError):
        times.parse_iso("yesterday")


def test_rfc3339_forms_kubernetes_writes() -> None:
    when = times.to_datetime(T + 0.5)
    assert times.rfc3339(when) == "2027-01-15T08:00:00Z"
    assert times.rfc3339(when, micro=True) == "2027-01-15T08:00:00.500000Z"
    assert times.rfc3339(times.to_datetime(T)) == "2027-01-15T08:00:00Z"


@pytest.mark.parametrize(("text", "ns"), [
    ("2027-01-15T08:00:00Z", T * times.NS),
    ("2027-01-15T08:00:00.000000001Z", T * times.NS + 1),
    ("2027-01-15T08:00:00.123456789123Z", T * times.NS + 123_456_789),
    ("2027-01-15T10:00:00.5+02:00", T * times.NS + 500_000_000),
    ("2027-01-15T10:00:00+02:00", T * times.NS),
    ("2027-01-15T08:00:00.25", T * times.NS + 250_000_000),
])
def test_rfc3339_nanoseconds_are_exact(text: str, ns: int) -> None:
    assert times.parse_rfc3339_ns(text) == ns


def test_rfc3339_nanoseconds_round_trip_and_refuse_other_text() -> None:
    assert times.rfc3339_ns(T * times.NS + 7) == "2027-01-15T08:00:00.000000007Z"
    assert times.parse_rfc3339_ns(times.rfc3339_ns(T * times.NS + 123)) == T * times.NS + 123
    with pytest.raises(ValueError):
        times.parse_rfc3339_ns("not a time")
