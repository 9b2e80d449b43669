"""scheduler.units: one formatter per unit; memory figures parse back to what they say."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.spec.quantity import parse_memory
from scheduler.units import (
    format_bytes,
    format_duration,
    format_gpu_hours,
    format_millicores,
    format_resources,
)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (900, "900"),
        (1024, "1Ki"),
        (512 * 2**20, "512Mi"),
        (24684084 * 1024, "23.5Gi"),  # the node memory the issue saw printed as 24684084Ki
        (256 * 2**20, "256Mi"),
        (3 * 2**40, "3Ti"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@given(st.integers(min_value=0, max_value=2**55))
def test_printed_memory_parses_back_within_the_rounding(n):
    back = parse_memory(format_bytes(n))
    assert abs(back - n) <= max(0.05 * n, 1)


@pytest.mark.parametrize(
    ("m", "text"), [(0, "0"), (500, "500m"), (1000, "1"), (2500, "2.5"), (64000, "64")]
)
def test_format_millicores(m, text):
    assert format_millicores(m) == text


@pytest.mark.parametrize(
    ("s", "text"),
    [(0, "0s"), (45, "45s"), (60, "1m"), (200, "3m20s"), (7200, "2h"), (7500, "2h5m")]
    + [(86400, "1d"), (200000, "2d7h"), (-5, "0s")],
)
def test_format_duration(s, text):
    assert format_duration(s) == text


def test_format_resources():
    assert format_resources(2000, 24684084 * 1024, 1) == "2 cpu, 23.5Gi, 1 gpu"
    assert format_resources(500, 2**30, 0) == "500m cpu, 1Gi"
    assert format_resources(None, None, None) == ""


@pytest.mark.parametrize(
    "hours, text",
    [(0.0, "0.00"), (0.0056, "0.0056"), (0.011, "0.01"), (12.345, "12.35"), (1500.0, "1500.00")],
)
def test_format_gpu_hours_shows_a_few_gpu_seconds(hours, text):
    assert format_gpu_hours(hours) == text
