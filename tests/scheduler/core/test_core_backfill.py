"""EASY backfill, strict FIFO, and jobs that go ahead without backfill."""

from __future__ import annotations

from scheduler.core import Backfill, Policy, ReasonKind, schedule
from tests.factories import job, node, running, snapshot

EASY = Policy(backfill=Backfill.EASY, preemption=(), aging_per_hour=0)


def _half_busy_node(estimate):
    # node a: 4 of 8 GPUs held by r1 until t=estimate; node b: full, no estimate
    return [
        running(job("r1", gpu=4, estimate=estimate), ["a"], start=0.0),
        running(job("r2", gpu=8), ["b"], start=0.0),
    ]


def test_easy_reserves_for_the_blocked_head_and_backfills_short_jobs_only():
    pending = [
        job("wide", gpu=8, submit=0),
        job("long", gpu=4, submit=1, estimate=5000.0),
        job("unknown", gpu=4, submit=2),
        job("short", gpu=4, submit=3, estimate=500.0),
    ]
    s = snapshot([node("a"), node("b")], pending, _half_busy_node(1000.0))
    d = schedule(s, EASY, 0.0)
    assert [b.job for b in d.binds] == ["short"]  # ends at 500 <= shadow time 1000
    assert d.pending["wide"].kind is ReasonKind.INSUFFICIENT_RESOURCES
    assert d.pending["wide"].details["reserved_at"] == 1000.0
    for name in ("long", "unknown"):
        assert d.pending[name].kind is ReasonKind.RESERVATION
        assert d.pending[name].message.startswith("waiting behind reservation for job wide")


def test_without_estimates_jobs_may_only_use_capacity_the_reservation_does_not_need():
    pending = [
        job("wide", gpu=8, submit=0),
        job("fits-elsewhere", gpu=2, submit=1),
        job("would-take-its-room", gpu=4, submit=2),
    ]
    nodes = [node("a"), node("b"), node("c", gpu=2)]
    s = snapshot(nodes, pending, _half_busy_node(None))
    d = schedule(s, EASY, 0.0)
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("fits-elsewhere", "c")]
    assert d.pending["would-take-its-room"].kind is ReasonKind.RESERVATION


def test_strict_fifo_blocks_everything_behind_the_head():
    policy = Policy(backfill=Backfill.NONE, strict_order=True, preemption=(), aging_per_hour=0)
    pending = [job("wide", gpu=8, submit=0), job("small", gpu=1, submit=1)]
    s = snapshot([node("a")], pending, [running(job("r", gpu=4), ["a"])])
    d = schedule(s, policy, 0.0)
    assert d.binds == ()
    assert d.pending["small"].kind is ReasonKind.QUEUE_ORDER
    assert d.pending["small"].message == "waiting behind job wide (strict queue order)"


def test_without_backfill_and_strict_order_later_jobs_go_ahead():
    policy = Policy(backfill=Backfill.NONE, strict_order=False, preemption=(), aging_per_hour=0)
    pending = [job("wide", gpu=8, submit=0), job("small", gpu=1, submit=1)]
    s = snapshot([node("a")], pending, [running(job("r", gpu=4), ["a"])])
    assert [b.job for b in schedule(s, policy, 0.0).binds] == ["small"]


def test_strict_order_with_easy_backfills_around_the_reserved_head():
    policy = Policy(backfill=Backfill.EASY, strict_order=True, preemption=(), aging_per_hour=0)
    pending = [job("wide", gpu=8, submit=0), job("small", gpu=1, submit=1)]
    nodes = [node("a"), node("c", gpu=1)]
    s = snapshot(nodes, pending, [running(job("r", gpu=4), ["a"])])
    d = schedule(s, policy, 0.0)
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("small", "c")]


def test_the_reservation_accounts_for_jobs_bound_earlier_in_the_cycle():
    # "first" takes node b this cycle (estimate 100); "wide" then reserves for t=100 on b,
    # so a short job may still use a's free capacity, a long one may not take b's remainder.
    pending = [
        job("first", gpu=4, submit=0, estimate=100.0),
        job("wide", gpu=8, submit=1),
        job("long", gpu=4, submit=2, estimate=1e6),
    ]
    held = [running(job("r", gpu=8), ["a"])]
    s = snapshot([node("a"), node("b")], pending, held)
    d = schedule(s, EASY, 0.0)
    assert [b.job for b in d.binds] == ["first"]
    assert d.pending["wide"].details["reserved_at"] == 100.0
    assert d.pending["long"].kind is ReasonKind.RESERVATION
