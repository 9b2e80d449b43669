"""resources.py: the triple functions agree with Resources and with brute force."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.core import resources as rs
from scheduler.core.model import Resources

ints = st.integers(min_value=-(10**12), max_value=10**12)
triples = st.tuples(ints, ints, ints)


@given(triples, triples)
def test_triple_arithmetic_matches_resources(a, b):
    ra, rb = Resources(*a), Resources(*b)
    assert rs.add(a, b) == (ra + rb).triple()
    assert rs.sub(a, b) == (ra - rb).triple()
    assert rs.scale(a, 3) == (ra * 3).triple()
    assert rs.fits(a, b) == ra.fits_in(rb)
    assert rs.excess(a, b) == (ra - rb).clamp_min_zero().triple()


@given(triples, triples)
def test_take_never_exceeds_want_or_avail_and_is_never_negative(want, avail):
    t = rs.take(want, avail)
    for k in range(3):
        assert 0 <= t[k] <= max(want[k], 0)
        assert t[k] <= max(avail[k], 0)
        assert t[k] == max(min(want[k], avail[k]), 0)


@given(triples, triples)
def test_accumulators_change_in_place(a, v):
    acc = list(a)
    rs.iadd(acc, v)
    assert tuple(acc) == rs.add(a, v)
    rs.isub(acc, v)
    assert tuple(acc) == a
    rs.isub_floor(acc, v)
    assert tuple(acc) == rs.excess(a, v)


@given(st.lists(st.tuples(st.integers(0, 20), triples), max_size=30), st.integers(0, 21))
def test_prefix_sums_match_brute_force(adds, pos):
    ps = rs.PrefixSums(21)
    for p, v in adds:
        ps.add(p, v)
    assert tuple(ps.before(pos)) == rs.total(v for p, v in adds if p < pos)
    assert tuple(ps.total) == rs.total(v for _, v in adds)


def test_resources_refuses_a_non_int_component_by_name():
    with pytest.raises(TypeError, match=r"Resources\.cpu_m must be int, got 1\.5"):
        Resources(cpu_m=1.5)  # type: ignore[arg-type]
