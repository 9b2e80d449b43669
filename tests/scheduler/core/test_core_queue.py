"""Queue orders: priority-fifo, fifo, drf, las, srtf; aging; cycle limit; determinism."""

from __future__ import annotations

import pytest

from scheduler.core import QUEUE_ORDERS, Policy, ReasonKind, schedule
from scheduler.core.queue import OrderContext, full_key
from tests.factories import job, node, running, snapshot, vc

ONE_SLOT = [node("only", gpu=1)]


def _first_bound(pending, policy, now=0.0, running_jobs=(), nodes=ONE_SLOT, vcs=None):
    d = schedule(snapshot(nodes, pending, running_jobs, vcs), policy, now)
    return [b.job for b in d.binds]


def test_registry_holds_every_named_order():
    assert set(QUEUE_ORDERS) == {"priority-fifo", "fifo", "drf", "las", "srtf"}


def test_priority_fifo_orders_by_priority_then_submit_time():
    pending = [job("late-high", priority=75, submit=5), job("early-low", priority=25, submit=0)]
    assert _first_bound(pending, Policy(aging_per_hour=0)) == ["late-high"]
    pending = [job("b", submit=2), job("a", submit=1)]
    assert _first_bound(pending, Policy(aging_per_hour=0)) == ["a"]


def test_ties_break_by_name():
    pending = [job("b", submit=1), job("a", submit=1)]
    assert _first_bound(pending, Policy(aging_per_hour=0)) == ["a"]


def test_aging_lets_an_old_low_priority_job_overtake():
    old = job("old-low", priority=25, submit=0)
    new = job("new-normal", priority=50, submit=100 * 3600)
    policy = Policy(aging_per_hour=1.0)
    # after 100 h the old job has 25 + 100 > 50 + 0
    assert _first_bound([new, old], policy, now=100 * 3600) == ["old-low"]
    assert _first_bound([new, old], Policy(aging_per_hour=0), now=100 * 3600) == ["new-normal"]


def test_fifo_is_submit_order_for_equal_priorities():
    pending = [job("second", submit=2), job("first", submit=1)]
    assert _first_bound(pending, Policy(queue_order="fifo", aging_per_hour=0)) == ["first"]


def test_drf_serves_the_vc_with_the_smallest_dominant_share_first():
    nodes = [node("a", gpu=4), node("b", gpu=4)]
    busy = running(job("r", gpu=4, vc="heavy"), ["a"])
    pending = [job("h", gpu=1, vc="heavy", submit=0), job("l", gpu=1, vc="light", submit=5)]
    policy = Policy(queue_order="drf", vc_quota=False, aging_per_hour=0, max_jobs_per_cycle=1)
    assert _first_bound(pending, policy, running_jobs=[busy], nodes=nodes) == ["l"]


def test_drf_alternates_between_vcs_within_one_cycle():
    nodes = [node("a", gpu=4)]
    pending = [job(f"x{i}", gpu=1, vc="x", submit=i) for i in range(3)] + [
        job(f"y{i}", gpu=1, vc="y", submit=10 + i) for i in range(3)
    ]
    policy = Policy(queue_order="drf", vc_quota=False, aging_per_hour=0)
    assert sorted(_first_bound(pending, policy, nodes=nodes)) == ["x0", "x1", "y0", "y1"]


def test_las_prefers_least_attained_service_and_is_fifo_within_a_level():
    policy = Policy(queue_order="las", aging_per_hour=0, las_thresholds=(100.0, 1000.0))
    pending = [job("served", attained=500.0, submit=0), job("fresh", attained=0.0, submit=9)]
    assert _first_bound(pending, policy) == ["fresh"]
    pending = [job("b", attained=50.0, submit=2), job("a", attained=90.0, submit=1)]
    assert _first_bound(pending, policy) == ["a"]  # same level (< 100): FIFO


def test_las_counts_a_running_jobs_current_run_as_attained_service():
    policy = Policy(queue_order="las", aging_per_hour=0, las_thresholds=(100.0,))
    ctx = OrderContext(now=1000.0, policy=policy, vc_share=lambda vc: 0.0)
    order = QUEUE_ORDERS["las"]
    j = job("r", gpu=2)
    rj = running(j, ["n"], start=900.0)  # 100 s x 2 GPUs = 200 GPU-s > 100
    assert full_key(order, j, ctx, rj)[1] == 1
    assert full_key(order, j, ctx)[1] == 0


def test_srtf_prefers_shortest_remaining_and_puts_unknown_last():
    policy = Policy(queue_order="srtf", aging_per_hour=0)
    pending = [
        job("unknown", submit=0),
        job("long", estimate=1000.0, submit=1),
        job("short", estimate=100.0, submit=2),
    ]
    assert _first_bound(pending, policy) == ["short"]
    pending = [job("unknown", submit=0), job("long", estimate=1000.0, submit=1)]
    assert _first_bound(pending, policy) == ["long"]
    # 900 GPU-s served by a 1-GPU job: 100 s remain of 1000
    pending = [
        job("mostly-done", estimate=1000.0, attained=900.0, submit=5),
        job("short", estimate=200.0, submit=0),
    ]
    assert _first_bound(pending, policy) == ["mostly-done"]


@pytest.mark.parametrize("order", sorted(QUEUE_ORDERS))
def test_every_order_puts_priority_first(order):
    pending = [job("low", priority=25, submit=0), job("high", priority=75, submit=9, estimate=9e9)]
    policy = Policy(queue_order=order, aging_per_hour=0, vc_quota=False)
    assert _first_bound(pending, policy) == ["high"]


def test_max_jobs_per_cycle_leaves_the_rest_with_a_cycle_limit_reason():
    nodes = [node("a", gpu=8)]
    pending = [job(f"j{i}", submit=i) for i in range(5)]
    d = schedule(snapshot(nodes, pending), Policy(max_jobs_per_cycle=2), 0.0)
    assert [b.job for b in d.binds] == ["j0", "j1"]
    assert {n: r.kind for n, r in d.pending.items()} == {
        f"j{i}": ReasonKind.CYCLE_LIMIT for i in (2, 3, 4)
    }


def test_duplicate_pending_job_names_are_rejected():
    with pytest.raises(ValueError, match="job 'a'"):
        schedule(snapshot(ONE_SLOT, [job("a"), job("a")]), Policy(), 0.0)


def test_vc_argument_of_factories_is_used():  # guards the factory against silent defaults
    s = snapshot(ONE_SLOT, [job("a", vc="x")], vcs=[vc("x", gpu=1)])
    assert s.pending[0].vc == "x" and s.vcs[0].guarantee.gpu == 1
