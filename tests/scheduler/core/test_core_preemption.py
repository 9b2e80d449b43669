"""Priority and queue-order preemption; transactional what-if; min runtime."""

from __future__ import annotations

from scheduler.core import Policy, PreemptionMode, ReasonKind, schedule
from tests.factories import job, las_policy, node, running, snapshot, vc

PRIO = Policy(preemption=(PreemptionMode.PRIORITY,), aging_per_hour=0)
LAS = las_policy()


def test_priority_preempts_strictly_lower_priority_in_the_same_vc():
    held = [
        running(job("low", gpu=8, priority=25), ["a"], start=0.0),
        running(job("same", gpu=8, priority=75), ["b"], start=10.0),
    ]
    s = snapshot([node("a"), node("b")], [job("urgent", gpu=8, priority=75)], held)
    d = schedule(s, PRIO, 100.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("low", "urgent")]
    assert d.pending["urgent"].kind is ReasonKind.PREEMPTING
    assert "low" in d.pending["urgent"].message


def test_priority_preemption_spares_non_preemptible_and_other_vcs():
    held = [
        running(job("pinned", gpu=8, priority=0, preemptible=False), ["a"]),
        running(job("other-vc", gpu=8, priority=0, vc="other"), ["b"]),
    ]
    s = snapshot([node("a"), node("b")], [job("urgent", gpu=8, priority=100)], held)
    d = schedule(s, PRIO, 100.0)
    assert d.preemptions == ()
    # without VC enforcement VCs are only names: other-vc becomes a candidate
    d = schedule(s, Policy(preemption=(PreemptionMode.PRIORITY,), vc_quota=False), 100.0)
    assert [p.job for p in d.preemptions] == ["other-vc"]


def test_victims_are_the_fewest_needed_most_recent_first():
    # Four 2-GPU jobs on one node; the 4-GPU job needs two of them: the two youngest go.
    held = [running(job(f"r{i}", gpu=2, priority=25), ["a"], start=float(i)) for i in range(4)]
    s = snapshot([node("a")], [job("urgent", gpu=4, priority=75)], held)
    d = schedule(s, PRIO, 100.0)
    assert sorted(p.job for p in d.preemptions) == ["r2", "r3"]


def test_victims_not_needed_for_the_fit_are_given_back():
    # The most recent low job sits on a node that does not help (the task needs a whole
    # node): it is released in the what-if first, then spared.
    held = [
        running(job("helpful", gpu=8, priority=25), ["a"], start=0.0),
        running(job("useless", gpu=2, priority=25), ["b"], start=50.0),
        running(job("blocker", gpu=6, priority=75), ["b"], start=0.0),
    ]
    s = snapshot([node("a"), node("b")], [job("urgent", gpu=8, priority=75)], held)
    assert [p.job for p in schedule(s, PRIO, 100.0).preemptions] == ["helpful"]


def test_nothing_is_preempted_when_even_all_candidates_would_not_make_room():
    held = [
        running(job("low", gpu=4, priority=25), ["a"]),
        running(job("high", gpu=4, priority=75), ["a"]),
    ]
    s = snapshot([node("a")], [job("urgent", gpu=8, priority=75)], held)
    d = schedule(s, PRIO, 100.0)
    assert d.preemptions == ()
    assert d.pending["urgent"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_queue_order_preemption_for_las():
    # the running job has attained 2 h x 8 GPUs: level 1; the new job is level 0
    held = [running(job("hog", gpu=8, submit=0), ["a"], start=0.0)]
    s = snapshot([node("a")], [job("fresh", gpu=8, submit=7000)], held)
    d = schedule(s, LAS, 7200.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("hog", "fresh")]
    assert "queue order" in d.preemptions[0].reason
    # same level: no preemption (FIFO within a level)
    held = [running(job("young", gpu=1, submit=0), ["a"], start=7100.0)]
    s = snapshot([node("a", gpu=1)], [job("fresh", gpu=1, submit=7000)], held)
    assert schedule(s, LAS, 7200.0).preemptions == ()


def test_queue_order_preemption_respects_min_runtime():
    policy = Policy(
        queue_order="srtf",
        preemption=(PreemptionMode.QUEUE_ORDER,),
        vc_quota=False,
        aging_per_hour=0,
        preemption_min_runtime_s=600.0,
    )
    held = [running(job("long", gpu=8, estimate=10_000.0), ["a"], start=0.0)]
    s = snapshot([node("a")], [job("short", gpu=8, estimate=100.0)], held)
    assert schedule(s, policy, 300.0).preemptions == ()  # ran 300 s < 600 s
    assert [p.job for p in schedule(s, policy, 900.0).preemptions] == ["long"]


def test_a_victim_is_chosen_once_per_cycle():
    held = [running(job("low", gpu=8, priority=0), ["a"])]
    pending = [job("u1", gpu=8, priority=75, submit=0), job("u2", gpu=8, priority=75, submit=1)]
    d = schedule(snapshot([node("a")], pending, held), PRIO, 100.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("low", "u1")]
    assert d.pending["u2"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_aging_alone_never_triggers_queue_order_preemption():
    # Same priority, same LAS level; the pending job has waited 10 h (aged far ahead in
    # the queue) but waiting is not a reason to evict a peer.
    policy = Policy(
        queue_order="las",
        preemption=(PreemptionMode.QUEUE_ORDER,),
        aging_per_hour=5.0,
        las_thresholds=(1e9,),
    )
    held = [running(job("peer", gpu=8, submit=35_000), ["a"], start=35_000.0)]
    s = snapshot([node("a")], [job("waited", gpu=8, submit=0)], held)
    assert schedule(s, policy, 36_000.0).preemptions == ()


def test_preemptible_false_is_spared_by_queue_order_but_its_borrowed_capacity_is_reclaimed():
    # docs/jobs.md "What a preemption costs a job": a job that cannot resume sets
    # preemptible: false; a waiting job that outranks it in the LAS queues does not take it,
    # but capacity it borrows beyond its VC's guarantee is still reclaimed.
    for preemptible, victims in ((True, ["hog"]), (False, [])):
        held = [running(job("hog", gpu=8, preemptible=preemptible), ["a"], start=0.0)]
        s = snapshot([node("a")], [job("fresh", gpu=8, submit=7000)], held)
        assert [p.job for p in schedule(s, LAS, 7200.0).preemptions] == victims
    reclaim = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)
    held = [running(job("borrower", gpu=8, vc="y", preemptible=False), ["a"], start=0.0)]
    s = snapshot([node("a")], [job("owner", gpu=8, vc="x")], held, [vc("x", gpu=8), vc("y")])
    assert [(p.job, p.for_job) for p in schedule(s, reclaim, 100.0).preemptions] == [
        ("borrower", "owner")
    ]
