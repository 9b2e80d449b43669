"""Lower bounds on hand-computed instances."""

from __future__ import annotations

import pytest

from scheduler.sim.bounds import jct_mean_lower_bound, makespan_lower_bound, srpt_mean_flow
from scheduler.sim.trace import TraceJob


def test_srpt_single_machine_hand_example() -> None:
    # speed 2 machine; works 8 (r=0), 2 (r=1), 4 (r=1)
    jobs = [TraceJob("a", 0, 4, 2), TraceJob("b", 1, 2, 1), TraceJob("c", 1, 4, 1)]
    # t0-1: a 8->6; t1: b(2) runs -> done t2; c(4) -> done t4; a(6) -> done t7
    assert srpt_mean_flow(jobs, 2) == pytest.approx(((2 - 1) + (4 - 1) + 7) / 3)
    assert jct_mean_lower_bound(jobs, 2) == pytest.approx(max(11 / 3, (4 + 2 + 4) / 3))


def test_makespan_bound_hand_example() -> None:
    jobs = [TraceJob("a", 0, 10, 1), TraceJob("b", 5, 1, 4), TraceJob("c", 5, 2, 4)]
    # max(r+p) = 10; from t=5: 5 + (4 + 8)/2 = 11; from 0: 0 + (10+12)/2 = 11
    assert makespan_lower_bound(jobs, 2) == pytest.approx(11)
    assert makespan_lower_bound(jobs, 100) == pytest.approx(10)
