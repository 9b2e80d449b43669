"""Reasons never tell one tenant another tenant's job names (issue 25): a preemption
across VCs names the other side as "a job of VC <vc>" in both jobs' reasons, inside a VC
by name."""

from __future__ import annotations

from scheduler.core import Policy, PreemptionMode, ReasonKind, schedule
from tests.factories import job, node, running, snapshot, vc

RECLAIM = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)
PRIO = Policy(preemption=(PreemptionMode.PRIORITY,), aging_per_hour=0)


def test_a_reclaim_names_neither_job_to_the_other_vc():
    held = [running(job("bob-borrow", gpu=8, vc="research"), ["a"], start=0.0)]
    s = snapshot(
        [node("a")],
        [job("alice-reclaim", gpu=8, vc="default")],
        held,
        [vc("default", gpu=8), vc("research", gpu=0)],
    )
    d = schedule(s, RECLAIM, 100.0)
    [p] = d.preemptions
    assert (p.job, p.for_job) == ("bob-borrow", "alice-reclaim")  # the facts are kept
    assert "alice-reclaim" not in p.reason
    assert p.reason.startswith("preempted for a job of VC default: reclaiming vc default's")
    pending = d.pending["alice-reclaim"]
    assert pending.kind is ReasonKind.PREEMPTING
    assert "bob-borrow" not in pending.message
    assert pending.message.startswith("preempting a job of VC research (reclaiming")


def test_inside_one_vc_the_jobs_are_named():
    held = [
        running(job("low-1", gpu=4, priority=1), ["a"], start=0.0),
        running(job("low-2", gpu=4, priority=1), ["a"], start=0.0),
    ]
    s = snapshot([node("a")], [job("urgent", gpu=8, priority=90)], held)
    d = schedule(s, PRIO, 100.0)
    assert sorted(p.job for p in d.preemptions) == ["low-1", "low-2"]
    assert all(
        p.reason.startswith("preempted for job urgent: a priority 90 job") for p in d.preemptions
    )
    assert d.pending["urgent"].message.startswith("preempting job low-1 and job low-2 (")


def test_victims_of_other_vcs_are_counted_per_vc():
    held = [
        running(job("theirs-1", gpu=4, vc="research"), ["a"], start=0.0),
        running(job("theirs-2", gpu=2, vc="research"), ["a"], start=0.0),
        running(job("ops-1", gpu=2, vc="ops"), ["a"], start=0.0),
    ]
    s = snapshot(
        [node("a")],
        [job("urgent", gpu=8)],
        held,
        [vc("default", gpu=8), vc("research", gpu=0), vc("ops", gpu=0)],
    )
    d = schedule(s, RECLAIM, 100.0)
    assert len(d.preemptions) == 3
    msg = d.pending["urgent"].message
    assert msg.startswith("preempting a job of VC ops and 2 jobs of VC research ("), msg
    assert all("urgent" not in p.reason for p in d.preemptions)
    assert all(p.reason.startswith("preempted for a job of VC default:") for p in d.preemptions)
