"""Reclaim ping-pong damping: queue-order preemption of other VCs' borrowers, releasing jobs,
nominated capacity, and idle capacity held only for guarantees that could use it."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, PreemptionMode, ReasonKind, TaskPlacement, schedule
from tests.factories import job, las_policy, node, res, running, snapshot, vc

LAS = las_policy(vc_quota=True)
PRIO = Policy(preemption=(PreemptionMode.PRIORITY,), aging_per_hour=0)
RECLAIM = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)


def _nodes_of(decision, name):
    return sorted({p.node for b in decision.binds if b.job == name for p in b.placements})


# -- queue-order preemption may take other VCs' borrowed capacity --------------------------


def _las_case(y_borrower_attained):
    """x is at its guarantee (8 GPUs on node a); y holds b (guaranteed) and c (borrowing),
    both long-served (LAS level 1) unless said otherwise; x2 (level 0, borrowing) waits."""
    held = [
        running(job("x-run", gpu=8, vc="x"), ["a"], start=990.0),
        running(job("y-guar", gpu=8, vc="y", attained=50_000.0), ["b"], start=0.0),
        running(job("y-borrow", gpu=8, vc="y", attained=y_borrower_attained), ["c"], start=995.0),
    ]
    pending = [job("x2", gpu=8, vc="x", submit=995.0)]
    return snapshot(
        [node("a"), node("b"), node("c")], pending, held, [vc("x", gpu=8), vc("y", gpu=8)]
    )


def test_queue_order_preemption_takes_another_vcs_borrower_ranked_after_the_job():
    d = schedule(_las_case(50_000.0), LAS, 1000.0)
    # y-guar ranks after x2 too, but it is within y's guarantee: protected
    assert [(p.job, p.for_job) for p in d.preemptions] == [("y-borrow", "x2")]
    assert d.pending["x2"].kind is ReasonKind.PREEMPTING
    assert [p.node for p in d.nominations["x2"]] == ["c"]


def test_queue_order_preemption_spares_a_borrower_ranked_level_with_the_job():
    # y-borrow has run only 5 s x 8 GPUs (level 0, like x2): equal rank, no eviction,
    # and y's guaranteed job is never a queue-order victim of another VC.
    d = schedule(_las_case(0.0), LAS, 1000.0)
    assert d.preemptions == ()
    assert d.pending["x2"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_queue_order_preemption_stays_inside_the_vc_for_guaranteed_jobs_of_others():
    # Same, but y is guaranteed 16: both y jobs are guaranteed, nothing may be taken.
    s = _las_case(50_000.0)
    s = replace(s, vcs=(vc("x", gpu=8), vc("y", gpu=16)))
    assert schedule(s, LAS, 1000.0).preemptions == ()


# -- releasing jobs ------------------------------------------------------------------------


def _releasing(rj):
    return replace(rj, releasing=True)


def test_a_releasing_job_is_not_chosen_again_and_its_capacity_goes_to_one_waiter():
    held = [
        _releasing(running(job("going", gpu=8, priority=25), ["a"], start=0.0)),
        running(job("low", gpu=8, priority=25), ["b"], start=0.0),
    ]
    pending = [
        job("urgent", gpu=8, priority=75, submit=1.0),
        job("urgent2", gpu=8, priority=75, submit=2.0),
    ]
    d = schedule(snapshot([node("a"), node("b")], pending, held), PRIO, 100.0)
    # urgent waits for the releasing job instead of preempting it (or anyone) again ...
    assert d.pending["urgent"].kind is ReasonKind.PREEMPTING
    assert "waiting for job going to release" in d.pending["urgent"].message
    assert [p.node for p in d.nominations["urgent"]] == ["a"]
    # ... and urgent2 cannot count on the same releasing capacity: it preempts low.
    assert [(p.job, p.for_job) for p in d.preemptions] == [("low", "urgent2")]
    assert [p.node for p in d.nominations["urgent2"]] == ["b"]


def test_without_the_marker_the_same_job_would_be_preempted_twice():
    # The control for the test above: the victim still holding its allocation is, to the
    # core, an ordinary running job, so urgent preempts it once more.
    held = [running(job("going", gpu=8, priority=25), ["a"], start=0.0)]
    d = schedule(snapshot([node("a")], [job("urgent", gpu=8, priority=75)], held), PRIO, 100.0)
    assert [p.job for p in d.preemptions] == ["going"]


def test_a_releasing_job_does_not_count_against_its_vcs_guarantee():
    # x's only running job is releasing: x is back under its guarantee, so x1 (a gang of
    # two whole nodes) may reclaim y's borrower on b, counting a's releasing capacity in.
    held = [
        _releasing(running(job("x-going", gpu=8, vc="x"), ["a"], start=0.0)),
        running(job("y-borrow", gpu=8, vc="y"), ["b"], start=0.0),
    ]
    s = snapshot(
        [node("a"), node("b")],
        [job("x1", gpu=8, replicas=2, vc="x")],
        held,
        [vc("x", gpu=16), vc("y", gpu=0)],
    )
    d = schedule(s, RECLAIM, 100.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("y-borrow", "x1")]
    assert sorted(p.node for p in d.nominations["x1"]) == ["a", "b"]
    # counted as usage, x would be at its guarantee of 16 with x1 and could not reclaim
    s2 = replace(s, running=tuple(replace(rj, releasing=False) for rj in s.running))
    assert schedule(s2, RECLAIM, 100.0).preemptions == ()


def test_a_releasing_borrower_is_not_reclaimed_twice():
    held = [_releasing(running(job("y-going", gpu=8, vc="y"), ["a"], start=0.0))]
    s = snapshot([node("a")], [job("x1", gpu=8, vc="x")], held, [vc("x", gpu=8), vc("y")])
    d = schedule(s, RECLAIM, 100.0)
    assert d.preemptions == ()
    assert d.pending["x1"].kind is ReasonKind.PREEMPTING
    assert d.pending["x1"].details["victims"] == ["y-going"]


# -- nominated capacity --------------------------------------------------------------------


def _nominated_case(nominations):
    # One free node; "early" is ahead of "late" in queue order and fits it too.
    pending = [job("early", gpu=8, submit=0.0), job("late", gpu=8, submit=5.0)]
    s = snapshot([node("a"), node("b", used=res(8, 8, 8))], pending)
    return replace(s, nominations=nominations)


def test_nominated_capacity_goes_to_the_nominator_not_to_a_job_ahead_of_it():
    nom = {"late": (TaskPlacement("worker", 0, "a", res(1, 1, 8)),)}
    d = schedule(_nominated_case(nom), Policy(aging_per_hour=0), 10.0)
    assert [b.job for b in d.binds] == ["late"]
    assert _nodes_of(d, "late") == ["a"]
    assert d.pending["early"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_without_a_nomination_the_job_ahead_takes_it():
    d = schedule(_nominated_case({}), Policy(aging_per_hour=0), 10.0)
    assert [b.job for b in d.binds] == ["early"]


def test_nominations_of_jobs_no_longer_pending_or_on_unknown_nodes_are_ignored():
    nom = {
        "gone": (TaskPlacement("worker", 0, "a", res(1, 1, 8)),),
        "late": (TaskPlacement("worker", 0, "ghost", res(1, 1, 8)),),
    }
    d = schedule(_nominated_case(nom), Policy(aging_per_hour=0), 10.0)
    assert [b.job for b in d.binds] == ["early"]


def test_a_preemption_nominates_the_capacity_it_frees():
    held = [running(job("low", gpu=8, priority=25), ["b"], start=0.0)]
    s = snapshot([node("a", used=res(8, 8, 8)), node("b")], [job("urgent", gpu=8)], held)
    s = replace(s, running=(held[0],))
    d = schedule(s, Policy(preemption=(PreemptionMode.PRIORITY,), aging_per_hour=0), 1.0)
    assert [p.job for p in d.preemptions] == ["low"]
    assert [p.node for p in d.nominations["urgent"]] == ["b"]
    assert d.nominations["urgent"][0].resources.gpu == 8


# -- idle capacity held for guarantees ----------------------------------------------------


def test_fragmented_idle_gpus_are_not_held_for_a_guarantee_that_cannot_use_them():
    # x (guarantee 8) waits with a whole-node job, but no node has 8 GPUs free: the 4 + 4
    # idle GPUs are no use to it, so y may borrow one of them.
    held = [
        running(job("y-a", gpu=4, vc="y"), ["a"], start=0.0),
        running(job("y-b", gpu=4, vc="y"), ["b"], start=0.0),
    ]
    pending = [job("x-wide", gpu=8, vc="x", submit=0.0), job("y-small", gpu=1, vc="y", submit=1.0)]
    s = snapshot([node("a"), node("b")], pending, held, [vc("x", gpu=8), vc("y", gpu=8)])
    d = schedule(s, Policy(preemption=(), aging_per_hour=0), 10.0)
    assert [b.job for b in d.binds] == ["y-small"]
    assert d.pending["x-wide"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_held_idle_capacity_follows_the_free_blocks_as_the_cycle_binds():
    # At the start node a has 8 GPUs free, so x's whole-node job could use idle capacity;
    # w1 (ahead in the queue) takes a, and from then on nothing x could use is idle: y may
    # borrow one of b's 4 idle GPUs.
    held = [running(job("y-run", gpu=4, vc="y"), ["b"], start=0.0)]
    pending = [
        job("w1", gpu=8, vc="w", submit=0.0),
        job("x-wide", gpu=8, vc="x", submit=1.0),
        job("y-small", gpu=1, vc="y", submit=2.0),
    ]
    vcs = [vc("w", gpu=8), vc("x", gpu=8), vc("y", gpu=4)]
    s = snapshot([node("a"), node("b")], pending, held, vcs)
    policy = Policy(preemption=(), aging_per_hour=0, backfill="none")
    d = schedule(s, policy, 10.0)
    assert [b.job for b in d.binds] == ["w1", "y-small"]
    assert d.pending["x-wide"].kind is ReasonKind.INSUFFICIENT_RESOURCES
