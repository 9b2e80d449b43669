"""EASY backfill's two guarantees, as properties of whole replays through the real core.

1. Exact estimates: no backfilled job delays the reserved head past its reservation (the
   first shadow time the core reports for a job is an upper bound on its start).
2. No estimates, horizon H (``Policy.backfill_horizon_s``): once a job has been the head of
   the FIFO queue for H, nothing else starts around it, so it starts at most one longest
   run time later: start <= head_since + H + max duration.
3. No estimates, adaptive (``reservation.starved``, no horizon): once the head would fit
   but for jobs started around it, nothing more starts around it, so it starts within two
   longest run times of becoming the head.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import schedule
from scheduler.core.history import History
from scheduler.core.presets import PRESETS
from scheduler.sim.cluster import homogeneous, vc_guarantees
from scheduler.sim.engine import Simulator
from scheduler.sim.trace import TraceJob

GPUS_PER_NODE = 4


@st.composite
def traces(draw):
    nodes = draw(st.integers(2, 3))
    n = draw(st.integers(2, 12))
    gaps = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))
    durations = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    t = 0
    jobs = []
    for i in range(n):
        t += gaps[i]
        g = min(sizes[i], nodes * GPUS_PER_NODE)
        jobs.append(TraceJob(f"j{i:02d}", float(t), float(durations[i]), g))
    return homogeneous(nodes, GPUS_PER_NODE), jobs


def _replay(shapes, jobs, policy, *, oracle: bool, decide=schedule):
    sim = Simulator(
        [s.to_node() for s in shapes],
        vc_guarantees(jobs, shapes),
        jobs,
        policy,
        oracle_estimates=oracle,
        restart_cost_s=0.0,
        decide=decide,
    )
    return {r.trace.name: r for r in sim.run().records}


@settings(max_examples=60, deadline=None)
@given(traces())
def test_with_exact_estimates_no_backfilled_job_delays_the_reservation(case):
    shapes, jobs = case
    reserved: dict[str, float] = {}

    def recording(snapshot, policy, now):
        d = schedule(snapshot, policy, now)
        for name, why in d.pending.items():
            t = why.details.get("reserved_at")
            if t is not None and t != float("inf"):
                reserved[name] = min(t, reserved.get(name, t))
        return d

    policy = replace(PRESETS["fifo-backfill"], adaptive=False)
    records = _replay(shapes, jobs, policy, oracle=True, decide=recording)
    for name, t in reserved.items():
        assert records[name].first_start <= t + 1e-6, (name, t, records[name].first_start)


def _with_history(runtimes):
    """The core entry point with a learned history of these run times (s) in every snapshot."""
    learned = History(tuple(sorted(float(r) for r in runtimes)), ())

    def decide(snapshot, policy, now):
        return schedule(replace(snapshot, history=learned), policy, now)

    return decide


def _assert_each_head_starts_within(jobs, records, horizon, runs):
    """Each job starts by ``horizon`` s plus ``runs`` x the longest run after it became the
    head (its submit, or the first start of the last job ahead of it, if later)."""
    longest = max(j.duration_s for j in jobs)
    for i, j in enumerate(jobs):
        head_since = max([j.submit_s] + [records[e.name].first_start for e in jobs[:i]])
        bound = head_since + horizon + runs * longest
        assert records[j.name].first_start <= bound + 1e-6, (j.name, bound)


@settings(max_examples=60, deadline=None)
@given(traces(), st.integers(0, 600))
def test_without_estimates_the_head_starts_within_horizon_plus_longest_job(case, horizon):
    shapes, jobs = case
    policy = replace(PRESETS["fifo-backfill"], adaptive=False, backfill_horizon_s=float(horizon))
    records = _replay(shapes, jobs, policy, oracle=False)
    _assert_each_head_starts_within(jobs, records, horizon, 1)


@settings(max_examples=60, deadline=None)
@given(
    traces(),
    st.integers(0, 600),
    st.lists(st.integers(1, 2000), min_size=10, max_size=49),
)
def test_the_bound_holds_when_reservations_follow_learned_residual_run_times(
    case, horizon, runtimes
):
    # A learned history (fewer than 50 jobs: the horizon stays the drawn one) reorders the
    # running jobs a reservation expects to end first (scheduler.core.reservation); the
    # starvation bound must not depend on that guess being right.
    shapes, jobs = case
    policy = replace(PRESETS["fifo-backfill"], backfill_horizon_s=float(horizon))
    records = _replay(shapes, jobs, policy, oracle=False, decide=_with_history(runtimes))
    _assert_each_head_starts_within(jobs, records, horizon, 1)


@settings(max_examples=60, deadline=None)
@given(traces(), st.lists(st.integers(1, 2000), min_size=0, max_size=49))
def test_adaptive_easy_starts_the_head_within_two_longest_runs(case, runtimes):
    # No horizon: only the "blocked by backfill" rule bounds the wait; a learned history
    # (random, possibly empty) reorders the reservation's guess and must not matter.
    shapes, jobs = case
    policy = PRESETS["fifo-backfill"]
    assert policy.adaptive and policy.backfill_horizon_s is None
    records = _replay(shapes, jobs, policy, oracle=False, decide=_with_history(runtimes))
    _assert_each_head_starts_within(jobs, records, 0, 2)
