"""Tiresias' STARVELIMIT (scheduler/core/starvation.py): a preempted job that has waited
``starve_limit`` times its run time so far is promoted to the highest LAS queue for one attempt."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.core import Policy, schedule
from scheduler.core.presets import PRESETS
from scheduler.core.queue import QUEUE_ORDERS, OrderContext, full_key
from scheduler.core.starvation import promoted, promotion_time, saved_after, saved_s
from tests.factories import job, las_policy, node, running, snapshot

LAS = las_policy(starve_limit=1.0)


def preempted(
    name: str, *, ran: float, at: float, attained: float, gpu: int = 8, ckpt: float | None = 0.0
):
    """A job that has run ``ran`` s in all (its executed time) and was preempted at ``at``;
    ``ckpt`` its checkpoint interval (0: its progress is always saved)."""
    return replace(
        job(name, gpu=gpu, attained=attained, submit=0.0),
        attempt=2,
        executed_s=ran,
        requeued_at=at,
        checkpoint_interval_s=ckpt,
    )


def test_promotion_time_is_the_requeue_plus_limit_times_the_executed_time():
    j = preempted("j", ran=500.0, at=1000.0, attained=4000.0)
    assert promotion_time(j, 1.0) == 1500.0
    assert promotion_time(j, 2.0) == 2000.0
    assert promotion_time(j, None) is None  # rule off
    assert promotion_time(job("fresh"), 1.0) is None  # never preempted: nothing to promote


def test_a_starved_job_preempts_a_served_job_only_after_limit_times_its_executed_time():
    hog = preempted("hog", ran=500.0, at=1000.0, attained=500.0 * 8 * 2)  # level 1
    other = running(job("other", gpu=8, attained=9000.0, submit=5.0), ["a"], start=1000.0)
    s = snapshot([node("a")], [hog], [other])
    # waited 499 s < 1 x 500 s: both in level 1, FIFO inside a level, no preemption
    assert schedule(s, LAS, 1499.0).preemptions == ()
    # waited 500 s: promoted to level 0, outranks the served job and preempts it
    d = schedule(s, LAS, 1500.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("other", "hog")]
    # Tiresias-LAS without the rule: never
    assert schedule(s, replace(LAS, starve_limit=None), 1e9).preemptions == ()


def test_a_promoted_attempt_is_ranked_by_its_own_seconds_since_the_promotion():
    hog = preempted("hog", ran=500.0, at=1000.0, attained=8000.0)
    fresh = job("fresh", gpu=8, submit=2000.0)
    # started promoted at 1500 (>= 1000 + 1 x 500): served anew, in seconds of this attempt:
    # 3,500 s < 3,600 (while 3,500 s x 8 GPUs would be far past it): still level 0
    s = snapshot([node("a")], [fresh], [running(hog, ["a"], start=1500.0)])
    assert schedule(s, LAS, 5000.0).preemptions == ()
    # 3,700 s: level 1, the fresh job preempts it
    assert [p.job for p in schedule(s, LAS, 5200.0).preemptions] == ["hog"]
    # started before its promotion time: ranked by its attained service, preempted at once
    s = snapshot([node("a")], [fresh], [running(hog, ["a"], start=1400.0)])
    assert [p.job for p in schedule(s, LAS, 1401.0).preemptions] == ["hog"]


def test_a_promoted_attempt_leaves_the_first_queue_only_with_its_threshold_saved():
    """Its seconds count up to its last checkpoint: with checkpoints every 1,000 s it is
    demoted at the first checkpoint past the 3,600-s threshold (4,000 s), and a job that
    declares no checkpoints, which a preemption would throw back to the start, keeps the
    first queue for the whole attempt."""
    fresh = job("fresh", gpu=8, submit=2000.0)

    def victims(ckpt: float | None, now: float) -> list[str]:
        hog = preempted("hog", ran=500.0, at=1000.0, attained=8000.0, ckpt=ckpt)
        s = snapshot([node("a")], [fresh], [running(hog, ["a"], start=1500.0)])
        return [p.job for p in schedule(s, LAS, now).preemptions]

    assert victims(1000.0, 1500.0 + 3999.0) == []  # 3,000 s saved: level 0
    assert victims(1000.0, 1500.0 + 4000.0) == ["hog"]  # 4,000 s saved: level 1
    assert victims(None, 1500.0 + 1e7) == []  # nothing saved, ever
    assert victims(0.0, 1500.0 + 3601.0) == ["hog"]  # always saved: the threshold itself


@given(ran=st.floats(0.0, 1e7), c=st.floats(1.0, 1e5))
def test_saved_seconds_are_the_last_checkpoint_and_saved_after_is_the_next(ran, c):
    j = replace(job("j"), checkpoint_interval_s=c)
    kept = saved_s(j, ran)
    assert 0.0 <= kept <= ran and ran - kept < c * (1 + 1e-9)
    after = saved_after(j, ran) if ran > 0 else None
    if after is not None:
        assert after >= ran and saved_s(j, after) >= ran and after - ran <= c
    assert saved_s(replace(j, checkpoint_interval_s=0.0), ran) == ran
    assert saved_s(replace(j, checkpoint_interval_s=None), ran) == 0.0
    assert saved_after(replace(j, checkpoint_interval_s=None), 3600.0) is None


@given(
    ran=st.floats(1.0, 1e6),
    wait=st.floats(0.0, 1e7),
    limit=st.floats(0.1, 100.0),
    attained=st.floats(3600.0, 1e9),
)
def test_promoted_exactly_when_the_wait_reaches_limit_times_the_executed_time(
    ran, wait, limit, attained
):
    at = 1000.0
    j = preempted("j", ran=ran, at=at, attained=attained, gpu=1)
    now = at + wait
    policy = replace(LAS, starve_limit=limit)
    ctx = OrderContext(now=now, policy=policy, vc_share=lambda vc: 0.0)
    level = full_key(QUEUE_ORDERS["las"], j, ctx)[1]
    expect = now >= at + limit * ran
    assert promoted(j, now, limit, None) is expect
    assert level == (0 if expect else 1)


def test_policy_rejects_a_non_positive_limit():
    with pytest.raises(ValueError, match="starve_limit"):
        Policy(starve_limit=0.0)


def test_the_rule_is_on_in_pasture_only():
    # issue 36: pasture enables it with the limit fitted on syn-16gpu (scheduler/sim/
    # README.md, "STARVELIMIT"); the baselines stay plain (Tiresias-LAS is the yardstick)
    assert PRESETS["pasture"].starve_limit == 2.0
    assert all(p.starve_limit is None for n, p in PRESETS.items() if n != "pasture")


def test_pasture_promotes_a_starved_wide_gang_that_tiresias_leaves_waiting():
    """The starvation the suite showed (syn-16gpu, syn-big-gangs: p99 14.5x / 6.9x the best
    baseline's): a whole-node gang demoted after a short attempt waits behind every job
    that has less service. Under pasture, once it has waited twice its run time so far it
    is promoted and takes the node back; Tiresias-LAS leaves it waiting."""
    gang = preempted("gang", ran=600.0, at=1000.0, attained=600.0 * 8)  # 4,800 GPU-s: level 1
    served = running(job("served", gpu=8, attained=4000.0, submit=5.0), ["a"], start=1000.0)
    s = snapshot([node("a")], [gang], [served])
    pasture = PRESETS["pasture"]
    assert schedule(s, pasture, 2199.0).preemptions == ()  # waited 1,199 s < 2 x 600 s
    d = schedule(s, pasture, 2200.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("served", "gang")]
    assert schedule(s, PRESETS["tiresias-las"], 2200.0).preemptions == ()  # both level 1
