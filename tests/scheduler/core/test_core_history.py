"""The learned input of adaptive policies: estimable quantiles, adapt(), the window."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from scheduler.core import Backfill, Policy, ReasonKind, schedule
from scheduler.core.adapt import adapt
from scheduler.core.history import History, HistoryWindow, median_residual_s, quantile
from scheduler.core.model import Job, PriorityClass
from scheduler.core.presets import PRESETS
from tests.factories import job, node, running, snapshot, vc


def test_a_quantile_is_none_until_estimable_then_the_nearest_rank():
    xs = tuple(float(i) for i in range(1, 50))  # 49 values: 0.9 needs 50
    assert quantile(xs, 0.9) is None
    assert quantile(xs, 0.5) == 25.0
    xs = tuple(float(i) for i in range(1, 101))
    assert quantile(xs, 0.9) == 90.0
    assert quantile((), 0.5) is None


def test_adapt_sets_thresholds_from_history_and_leaves_others_alone():
    services = tuple(float(i) for i in range(1, 1001))
    runtimes = tuple(float(10 * i) for i in range(1, 1001))
    h = History(runtimes, services)
    two = [vc("a", gpu=8), vc("b", gpu=8)]
    p = adapt(PRESETS["pasture"], h, two)
    assert p.las_thresholds == (900.0, 990.0)
    assert p.backfill_horizon_s is None  # no learned horizon (reservation.starved instead)
    assert p.preemption_min_runtime_s == 300.0  # shared cluster: the floor stays
    assert adapt(PRESETS["tiresias-las"], h) is PRESETS["tiresias-las"]
    assert adapt(PRESETS["pasture"], None, two) is PRESETS["pasture"]


def test_one_tenant_runs_tiresias_with_its_starvation_rule():
    h = History(
        tuple(float(10 * i) for i in range(1, 1001)), tuple(float(i) for i in range(1, 1001))
    )
    static = PRESETS["pasture"].las_thresholds
    for vcs in ([], [vc("a", gpu=8)], [vc("a", gpu=8), vc("idle", gpu=0)]):
        p = adapt(PRESETS["pasture"], h, vcs)
        assert p.las_thresholds == static == (3600.0, 36000.0)
        assert p.preemption_min_runtime_s == 0.0  # plain Tiresias: no floor
        assert p.backfill is Backfill.NONE  # and no EASY reservations
        # every field that orders, places or preempts is the baseline's
        t = PRESETS["tiresias-las"]
        for field in (
            "queue_order",
            "las_thresholds",
            "backfill",
            "aging_per_hour",
            "preemption_min_runtime_s",
            "filters",
            "scorers",
        ):
            assert getattr(p, field) == getattr(t, field), field
        # plus Tiresias' own STARVELIMIT, which the baseline runs without (issue 36)
        assert p.starve_limit == 2.0 and t.starve_limit is None
    # VC guarantees not enforced: the VCs are no tenants either
    novc = replace(PRESETS["pasture"], vc_quota=False)
    assert adapt(novc, h, [vc("a", gpu=8), vc("b", gpu=8)]).las_thresholds == static
    # with two tenants EASY stays; FIFO with backfill keeps its backfill with any VCs
    assert adapt(PRESETS["pasture"], h, [vc("a", gpu=8), vc("b", gpu=8)]).backfill is Backfill.EASY
    assert adapt(PRESETS["fifo-backfill"], h, []).backfill is Backfill.EASY


def test_adapt_keeps_static_values_until_enough_jobs_finished():
    few = History(tuple(float(i) for i in range(20)), tuple(float(i) for i in range(20)))
    two = [vc("a", gpu=8), vc("b", gpu=8)]
    assert adapt(PRESETS["pasture"], few, two) is PRESETS["pasture"]


def test_history_rejects_unsorted_or_negative_samples():
    with pytest.raises(ValueError, match="History.runtimes_s"):
        History((2.0, 1.0), ())
    with pytest.raises(ValueError, match="History.services_gpu_s"):
        History((), (-1.0,))


def test_the_window_keeps_the_last_jobs_only():
    w = HistoryWindow(size=3)
    for i in range(5):
        w.record(float(i), float(10 * i))
    assert w.history() == History((2.0, 3.0, 4.0), (20.0, 30.0, 40.0))
    assert w.history() is w.history()  # cached until the next record
    with pytest.raises(ValueError, match="HistoryWindow.size"):
        HistoryWindow(0)


def test_policy_rejects_a_negative_horizon():
    with pytest.raises(ValueError, match="backfill_horizon_s"):
        Policy(backfill_horizon_s=-1.0)


def _blocked_head(now: float, horizon: float | None):
    # node a is half taken by r (no estimate); "wide" needs all of a; "small" fits node c
    pol = Policy(
        backfill=Backfill.EASY, preemption=(), aging_per_hour=0, backfill_horizon_s=horizon
    )
    pending = [job("wide", gpu=8, submit=0), job("small", gpu=2, submit=1)]
    s = snapshot([node("a"), node("c", gpu=2)], pending, [running(job("r", gpu=4), ["a"])])
    return schedule(s, pol, now)


def test_before_the_horizon_jobs_backfill_around_the_head():
    d = _blocked_head(now=100.0, horizon=3600.0)
    assert [b.job for b in d.binds] == ["small"]


def test_past_the_horizon_nothing_unbounded_starts_around_the_head():
    d = _blocked_head(now=4000.0, horizon=3600.0)
    assert d.binds == ()
    assert d.pending["small"].kind is ReasonKind.RESERVATION
    assert _blocked_head(now=4000.0, horizon=None).binds[0].job == "small"


def test_with_queue_order_preemption_an_unbounded_reservation_holds_nothing():
    # the same blocked head under LAS with preemption: no holds, "small" takes node a
    pol = replace(PRESETS["pasture"], vc_quota=False, adaptive=False)
    pending = [job("wide", gpu=8, submit=0), job("small", gpu=4, submit=1)]
    s = snapshot([node("a")], pending, [running(job("r", gpu=4), ["a"], start=0.0)])
    d = schedule(s, pol, 10.0)
    assert [b.job for b in d.binds] == ["small"]
    held = schedule(s, replace(pol, preemption=()), 10.0)
    assert held.binds == ()
    assert held.pending["small"].kind is ReasonKind.RESERVATION


def test_median_residual_is_the_median_further_run_time_once_ten_ran_as_long():
    h = History(tuple([1500.0] * 50 + [100000.0] * 50), ())
    assert median_residual_s(h, 1000.0) == 500.0  # median of 100 samples above 1,000 s
    assert median_residual_s(h, 10000.0) == 90000.0  # only the long ones ran that long
    assert median_residual_s(h, 100000.0) is None  # nobody ran longer: unknown
    assert median_residual_s(History(tuple([5.0] * 9), ()), 1.0) is None  # too few
    assert median_residual_s(None, 1.0) is None


def _reserve_beside_old_and_young(history: History | None):
    # a holds an old job (started at 0), b a young one (started at 9,000), 4 of 8 GPUs
    # each; "wide" needs a whole node, "small" 4 GPUs. EASY holds the free half of the
    # node the head is planned on; "small" goes to the other node.
    old, young = job("old", gpu=4, submit=0), job("young", gpu=4, submit=0)
    pending = [job("wide", gpu=8, submit=1), job("small", gpu=4, submit=2)]
    s = snapshot(
        [node("a"), node("b")],
        pending,
        [running(old, ["a"], start=0.0), running(young, ["b"], start=9000.0)],
    )
    return schedule(replace(s, history=history), PRESETS["fifo-backfill"], 10000.0)


def test_the_reservation_sits_on_the_node_likeliest_to_free_first():
    # Decreasing hazard: a job that has run 10,000 s will likely run 90,000 s more, one
    # that has run 1,000 s about 500 s more, so the head is planned on b (young job).
    h = History(tuple([1500.0] * 50 + [100000.0] * 50), ())
    d = _reserve_beside_old_and_young(h)
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("small", "a")]
    assert d.pending["wide"].details["reserved_at"] == math.inf
    # Nothing learned yet: oldest first, as before (the head planned on a).
    d = _reserve_beside_old_and_young(None)
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("small", "b")]


def _head_behind(later_start: float):
    # node a: "old" (2 GPUs, started at 0) and "r" (4 GPUs, started at later_start); the
    # head "wide" (8 GPUs, submitted at 5) needs all of a; "small" (2 GPUs) fits beside.
    old, r = job("old", gpu=2, submit=0), job("r", gpu=4, submit=6)
    pending = [job("wide", gpu=8, submit=5), job("small", gpu=2, submit=7)]
    s = snapshot(
        [node("a"), node("c", gpu=2)],
        pending,
        [running(old, ["a"], start=0.0), running(r, ["a"], start=later_start)],
    )
    return schedule(s, PRESETS["fifo-backfill"], 100.0)


def test_backfill_goes_on_while_a_job_from_before_the_head_is_in_its_way():
    # r started at 10, after "wide" became the head (its submit, 5): without r, "wide"
    # would not fit yet (old still holds 2 GPUs of a), so backfill goes on
    d = _head_behind(later_start=10.0)
    assert [b.job for b in d.binds] == ["small"]


def test_a_head_that_would_fit_but_for_backfilled_jobs_is_starved():
    r = job("r", gpu=6, submit=6)
    pending = [job("wide", gpu=8, submit=5), job("small", gpu=2, submit=7)]
    s = snapshot([node("a"), node("c", gpu=2)], pending, [running(r, ["a"], start=10.0)])
    d = schedule(s, PRESETS["fifo-backfill"], 100.0)
    # only r (started around the head) is in its way: strict FIFO behind it from now on
    assert d.binds == ()
    assert d.pending["small"].kind is ReasonKind.RESERVATION
    # the same with r running from before the head: not backfill's fault, EASY goes on
    s = snapshot([node("a"), node("c", gpu=2)], pending, [running(r, ["a"], start=1.0)])
    assert [b.job for b in schedule(s, PRESETS["fifo-backfill"], 100.0).binds] == ["small"]


def _behind_another_vcs_job(
    blocker_vc: str, *later: Job, blocker_priority: int = PriorityClass.NORMAL
):
    # Node a (8 GPUs) half held by "r"; node c has 4 GPUs free. x guarantees 4 GPUs, so
    # "wide" (x, 8 GPUs, the queue's head, which only ever fits on a) borrows and "small"
    # (x, 4 GPUs) does not; y guarantees 8, so y's "r" is guaranteed.
    pol = replace(PRESETS["pasture"], adaptive=False, preemption_min_runtime_s=0.0)
    pending = [job("wide", gpu=8, vc="x", submit=0), job("small", gpu=4, vc="x", submit=1)]
    s = snapshot(
        [node("a"), node("c", gpu=4)],
        [*pending, *later],
        [running(job("r", gpu=4, vc=blocker_vc, priority=blocker_priority), ["a"], start=0.0)],
        vcs=[vc("x", gpu=4), vc("y", gpu=8)],
    )
    return schedule(s, pol, 10.0)


def test_an_unbounded_reservation_holds_where_no_rank_can_clear_the_way():
    # r is y's guaranteed job: no LAS rank lets wide preempt it, so nothing but a drain
    # ever frees node a for wide. Its reservation holds a's free half: small goes to c,
    # small2 (borrowing: x's guarantee is used by small) waits behind the reservation.
    d = _behind_another_vcs_job("y", job("small2", gpu=4, vc="x", submit=2))
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("small", "c")]
    assert d.pending["small2"].kind is ReasonKind.RESERVATION
    assert d.pending["wide"].message.endswith("; holding what frees on a for it")
    # r of wide's own VC: wide's rank clears the way once r has run long enough, so
    # nothing is held (the LAS argument) and both later jobs start
    d = _behind_another_vcs_job("x", job("small2", gpu=4, vc="x", submit=2))
    assert sorted(b.job for b in d.binds) == ["small", "small2"]
    # r of wide's VC but of a higher priority class: no LAS rank puts it below wide
    later = job("small2", gpu=4, vc="x", submit=2)
    d = _behind_another_vcs_job("x", later, blocker_priority=PriorityClass.HIGH)
    assert d.pending["small2"].kind is ReasonKind.RESERVATION


def test_a_job_within_its_guarantee_takes_a_borrowing_heads_holds():
    # wide borrows: its holds are opportunistic, and y's g is within y's guarantee (4 + 4
    # of 8; lending protection admitted wide on that promise), so once small has taken c
    # g starts on the held half of a
    d = _behind_another_vcs_job("y", job("g", gpu=4, vc="y", submit=3))
    assert {b.job: b.placements[0].node for b in d.binds} == {"small": "c", "g": "a"}


def test_the_fifo_starvation_guard_does_not_apply_to_a_reservation_kept_under_las():
    # wide's reservation is kept on a (r: y's guaranteed job). r2 (y) started on b after
    # wide became the head, and without it wide would fit: that is when EASY's FIFO guard
    # lets nothing unbounded start around the head. Under LAS the order is not FIFO, and
    # the guard would make x's small wait on y's jobs; small starts on c.
    pol = replace(PRESETS["pasture"], preemption_min_runtime_s=0.0)  # adaptive: guard live
    r2 = running(job("r2", gpu=8, vc="y", submit=1), ["b"], start=5.0)
    pending = [job("wide", gpu=8, vc="x", submit=0), job("small", gpu=4, vc="x", submit=2)]
    s = snapshot(
        [node("a"), node("b"), node("c", gpu=4)],
        pending,
        [running(job("r", gpu=4, vc="y"), ["a"], start=0.0), r2],
        vcs=[vc("x", gpu=1), vc("y", gpu=16)],
    )
    d = schedule(s, pol, 10.0)
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("small", "c")]
    # the same reservation without queue-order preemption (EASY proper): the guard holds
    fifo = schedule(s, replace(pol, preemption=()), 10.0)
    assert fifo.binds == ()
    assert fifo.pending["small"].kind is ReasonKind.RESERVATION
