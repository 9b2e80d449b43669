"""The simulator under Tiresias' STARVELIMIT (Policy.starve_limit): a job preempted by a
stream of short jobs is promoted once it has waited limit x its run time so far (all
attempts), at that instant
(an engine event, no arrival or completion needed)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.presets import PRESETS
from scheduler.sim.cluster import homogeneous, vc_guarantees
from scheduler.sim.engine import Simulator
from scheduler.sim.trace import TraceJob

# L (1 GPU, 10,000 s) is in LAS queue 1 from t=3600; from t=5000 one short job (100 s) arrives
# every 100 s until t=19,900, so that queue-0 work always waits for the one GPU.
JOBS = [TraceJob("L", 0, 10_000, 1)] + [
    TraceJob(f"S{i:03d}", 5000 + 100 * i, 100, 1) for i in range(150)
]


def replay(policy, checkpoint_s=None):
    nodes = homogeneous(1, 1)
    sim = Simulator(
        [n.to_node() for n in nodes],
        vc_guarantees(JOBS, nodes),
        JOBS,
        policy,
        checkpoint_s=checkpoint_s,
    )
    return {r.trace.name: r for r in sim.run().records}


def test_without_the_rule_the_long_job_waits_for_the_whole_stream():
    r = replay(PRESETS["tiresias-las"])["L"]
    assert r.preemptions == 1
    assert r.end == 20_000 + 5000 + 60  # after the last short job; 60 s restart cost


def test_a_preempted_job_is_promoted_after_waiting_limit_x_its_executed_time():
    for limit in (1.0, 0.5):
        recs = replay(replace(PRESETS["tiresias-las"], starve_limit=limit))
        r = recs["L"]
        # preempted at 5000 after a 5000 s run; promoted at 5000 + limit x 5000, it starts
        # then (ahead of every short job, FIFO in queue 0; the short job running then ends
        # at that instant), is served anew and back in queue 1 after 3600 s of this attempt,
        # where the next short job preempts it; promoted again limit x (5000 + 3600) s later
        # (its whole run time, not the last attempt's), it runs the rest:
        # 5000 + 60 - 3600 + 60 = 1520 s
        first = 5000 + limit * 5000
        second = first + 3600 + limit * (5000 + 3600)
        assert r.preemptions == 2
        assert r.end == second + 1520
        # it waited for running jobs to end: no short job was preempted for it
        assert all(rec.preemptions == 0 for name, rec in recs.items() if name != "L")


def test_an_elastic_job_of_fixed_width_is_promoted_as_a_rigid_one():
    """One start/stop path (issue 33): on one GPU every elastic trace job runs 1 replica at
    speedup 1, so the elastic replay must give the rigid replay's figures exactly, the
    promoted attempt's LAS crossing (served anew, in seconds) included: L, promoted at
    10,000, is demoted 3,600 s later, when X (arrived at 10,050 behind it in queue 0) takes
    the GPU; no arrival or completion happens then, only the crossing event."""
    jobs = (
        [TraceJob("L", 0, 10_000, 1)]
        + [TraceJob(f"S{i:03d}", 5000 + 100 * i, 100, 1) for i in range(50)]
        + [TraceJob("X", 10_050, 100, 1)]
    )
    nodes = homogeneous(1, 1)
    policy = replace(PRESETS["tiresias-las"], starve_limit=1.0)
    out = []
    for elastic in (False, True):
        sim = Simulator(
            [n.to_node() for n in nodes], vc_guarantees(jobs, nodes), jobs, policy, elastic=elastic
        )
        out.append({r.trace.name: (r.end, r.preemptions, r.run_s) for r in sim.run().records})
    rigid, elastic_ = out
    assert rigid["X"][0] == 10_000 + 3600 + 100
    assert rigid["L"][1] == 2
    assert elastic_ == rigid


def test_a_promoted_attempt_is_demoted_only_at_a_checkpoint_and_never_without_one():
    """The replay's jobs declare its checkpoint interval to the core, which counts a
    promoted attempt's seconds only up to its last checkpoint (scheduler.core.starvation)."""
    policy = replace(PRESETS["tiresias-las"], starve_limit=1.0)
    # every 1,000 s: preempted at 5,000 (on a checkpoint) and promoted at 10,000, L is
    # demoted at the first checkpoint past 3,600 s, 4,000 s in, and preempted there again:
    # both preemptions cost only the restart (with the 3,600-s demotion: 60 + 600 s)
    recs = replay(policy, checkpoint_s=1000.0)
    assert recs["L"].preemptions == 2
    assert recs["L"].lost_gpu_s == 2 * 60
    # never (an interval longer than any run): the first preemption loses the 5,000 s run;
    # promoted at 10,000, L keeps the first queue until it ends, 10,060 s later
    recs = replay(policy, checkpoint_s=1e9)
    assert recs["L"].preemptions == 1
    assert recs["L"].end == 10_000 + 10_000 + 60
    assert all(rec.preemptions == 0 for name, rec in recs.items() if name != "L")
