"""Points in time as users write them (scheduler/timespec.py): every text is a time from
1970 to the end of 9999 or a ValueError naming the field, never another error and never a
time that cannot be printed as a date (a GPU-hours report of ``since=1e300`` was a 400
"OverflowError", one of ``since=253402300800`` a 500)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.timespec import LATEST_TIME_S, parse_when

NOW = 1_795_000_000.0  # 2026-11-19


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", NOW - 7200),
        (" 30m ", NOW - 1800),
        ("1.5d", NOW - 1.5 * 86400),
        ("0", 0.0),
        ("1795000000", NOW),
        ("2026-11-26", dt.datetime(2026, 11, 26, tzinfo=dt.UTC).timestamp()),
        ("2026-11-26T10:00+01:00", dt.datetime(2026, 11, 26, 9, tzinfo=dt.UTC).timestamp()),
        ("9999-12-31T23:59:59", LATEST_TIME_S),
    ],
)
def test_the_three_forms(text, expected):
    assert parse_when(text, NOW, "since") == pytest.approx(expected)


@pytest.mark.parametrize(
    "text", ["1e300", "253402300800", "nan", "inf", "-inf", "-5", "99999999w", "3000w"]
)
def test_times_outside_1970_to_9999_are_refused_naming_the_field(text):
    with pytest.raises(ValueError, match=r"^until: expected a time from 1970 to the end of 9999"):
        parse_when(text, NOW, "until")


@given(st.text(max_size=40))
def test_any_text_is_a_printable_time_or_a_value_error_naming_the_field(text):
    try:
        t = parse_when(text, NOW, "since")
    except ValueError as exc:
        assert str(exc).startswith("since: expected"), exc
        assert repr(text) in str(exc)
        return
    assert 0.0 <= t <= LATEST_TIME_S
    dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d")  # printable as a date
