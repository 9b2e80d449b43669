import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.spec.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)


@pytest.mark.parametrize(
    ("given", "millicores"),
    [(2, 2000), ("2", 2000), (0.5, 500), ("500m", 500), ("1.5", 1500), ("250m", 250)],
)
def test_cpu_to_millicores(given, millicores):
    assert parse_cpu(given) == millicores


@pytest.mark.parametrize(
    ("given", "n_bytes"),
    [
        ("4Gi", 4 * 2**30),
        ("4096M", 4096 * 10**6),
        ("512Mi", 512 * 2**20),
        ("1k", 1000),
        (1073741824, 2**30),
        ("1.5Gi", 3 * 2**29),
    ],
)
def test_memory_to_bytes(given, n_bytes):
    assert parse_memory(given) == n_bytes


def test_maro_memory_is_mib():
    assert parse_memory("2048m", mib=True) == 2048 * 2**20
    assert parse_memory(1024, mib=True) == 2**30


@pytest.mark.parametrize("bad", ["-1", -2, "2x", "abc", True, None, float("inf"), "1.2.3"])
def test_cpu_rejects(bad):
    with pytest.raises(QuantityError, match="cpu"):
        parse_cpu(bad)


@pytest.mark.parametrize("bad", ["4Qi", "-4Gi", "100m", "lots", [1]])
def test_memory_rejects_with_what_was_given(bad):
    with pytest.raises(QuantityError) as err:
        parse_memory(bad)
    assert repr(bad) in str(err.value) or str(bad) in str(err.value)


@given(st.integers(min_value=1, max_value=10**7))
def test_cpu_format_round_trips(m):
    assert parse_cpu(format_cpu(m)) == m


@given(st.integers(min_value=1, max_value=2**50))
def test_memory_format_round_trips(n):
    assert parse_memory(format_memory(n)) == n
