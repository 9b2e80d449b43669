"""The simulator driving the real core: conservation, hand-computed baselines, bounds."""

from __future__ import annotations

import random

import pytest

from scheduler.core.model import Resources, VirtualCluster
from scheduler.core.presets import ORACLE_ESTIMATES, PRESETS
from scheduler.sim.bounds import jct_mean_lower_bound, makespan_lower_bound
from scheduler.sim.cluster import homogeneous, synthesised_node, vc_guarantees
from scheduler.sim.engine import Simulator
from scheduler.sim.metrics import summarise
from scheduler.sim.trace import TraceJob

ALL = list(PRESETS)


def run(nodes, jobs, policy, vcs=None, **kw):
    shapes = list(nodes)
    vcs = vcs if vcs is not None else vc_guarantees(jobs, shapes)
    sim = Simulator(
        [s.to_node() for s in shapes],
        vcs,
        jobs,
        PRESETS[policy],
        oracle_estimates=policy in ORACLE_ESTIMATES,
        **kw,
    )
    return sim.run()


def ends(result) -> dict[str, float]:
    return {r.trace.name: r.end for r in result.records}


def random_trace(seed: int, n: int) -> list[TraceJob]:
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    for i in range(n):
        t += rng.expovariate(1 / 300)
        g = rng.choice([1, 1, 1, 1, 2, 4, 8, 16])
        p = rng.lognormvariate(7, 1.5)
        jobs.append(TraceJob(f"j{i:03d}", round(t, 1), round(p, 1) + 1, g, vc=rng.choice("abc")))
    return jobs


@pytest.mark.parametrize("policy", ALL)
def test_work_is_conserved(policy: str) -> None:
    jobs = random_trace(7, 80)
    shapes = homogeneous(3, 8)
    result = run(shapes, jobs, policy, restart_cost_s=60.0, checkpoint_s=900.0)
    assert [r.completions for r in result.records] == [1] * len(jobs)
    served = sum(r.gpus * r.run_s for r in result.records)
    work = sum(j.gpus * j.duration_s for j in jobs)
    lost = sum(r.lost_gpu_s for r in result.records)
    assert served == pytest.approx(work + lost, rel=1e-9)
    assert result.gpu_busy_s == pytest.approx(served, rel=1e-9)
    for r in result.records:
        assert r.first_start >= r.trace.submit_s
        assert r.end - r.first_start >= r.trace.duration_s - 1e-6
        assert (r.preemptions == 0) == (r.lost_gpu_s == 0)
    m = summarise(result)
    assert m.jct_mean_s >= jct_mean_lower_bound(jobs, 24) - 1e-6
    assert m.makespan_s >= makespan_lower_bound(jobs, 24) - 1e-6


def test_preemption_cost_is_charged() -> None:
    # one 1-GPU node; L runs, S arrives and preempts it under SRTF (oracle)
    jobs = [TraceJob("L", 0, 1000, 1), TraceJob("S", 10, 100, 1, checkpoint_s=4.0)]
    res = run(homogeneous(1, 1), jobs, "srtf-oracle", restart_cost_s=60.0)
    # L preempted at 10 (ran 10 s, no checkpoint interval: keeps its progress), S 10-110,
    # L resumes at 110 with 990 + 60 s left
    assert ends(res) == {"L": 1160.0, "S": 110.0}
    rec = {r.trace.name: r for r in res.records}
    assert rec["L"].preemptions == 1 and rec["L"].lost_gpu_s == 60.0


def test_checkpoint_loss() -> None:
    jobs = [TraceJob("L", 0, 1000, 1, checkpoint_s=4.0), TraceJob("S", 10, 100, 1)]
    res = run(homogeneous(1, 1), jobs, "srtf-oracle", restart_cost_s=5.0)
    # L ran 10 s, checkpointed at 8: loses 2 s + 5 s restart; 997 s left at 110
    assert ends(res) == {"L": 1107.0, "S": 110.0}
    assert {r.trace.name: r.lost_gpu_s for r in res.records}["L"] == 7.0


def two_nodes():
    return [synthesised_node("big", 4), synthesised_node("small", 2)]


BACKFILL_JOBS = [
    TraceJob("J1", 0, 10, 4),
    TraceJob("J2", 1, 10, 4),  # waits for "big" until 10
    TraceJob("J3", 2, 2, 1),  # fits "small" at once
]


def test_fifo_hand_schedule() -> None:
    # strict FIFO: J3 waits behind J2 although "small" is idle; starts when J2 starts
    assert ends(run(two_nodes(), BACKFILL_JOBS, "fifo")) == {"J1": 10, "J2": 20, "J3": 12}


def test_fifo_backfill_hand_schedule() -> None:
    # EASY: J2 reserves "big" at 10; J3 (no estimate) uses "small", which J2 does not need
    assert ends(run(two_nodes(), BACKFILL_JOBS, "fifo-backfill")) == {"J1": 10, "J2": 20, "J3": 4}


@pytest.mark.parametrize("policy", ["capacity", "pasture"])
def test_vc_reclaim_hand_schedule(policy: str) -> None:
    vcs = (VirtualCluster("a", Resources(0, 0, 2)), VirtualCluster("b", Resources(0, 0, 2)))
    jobs = [
        TraceJob("A1", 0, 10, 2, vc="a"),
        TraceJob("A2", 0, 10, 2, vc="a"),  # borrows b's guarantee
        TraceJob("B1", 1, 5, 2, vc="b"),  # b reclaims it
    ]
    res = run(homogeneous(1, 4), jobs, policy, vcs=vcs, restart_cost_s=0.0)
    e = ends(res)
    assert e["B1"] == 6.0
    # one A job was preempted at 1 (ran 1 s), resumes at 6 with 9 s left
    assert sorted([e["A1"], e["A2"]]) == [10.0, 15.0]
    fifo = ends(run(homogeneous(1, 4), jobs, "fifo", vcs=vcs))
    assert fifo["B1"] == 15.0  # without quotas b waits for a's jobs


def test_the_next_core_call_gets_the_nominations_and_binds_the_nominator_there() -> None:
    from scheduler.core.scheduler import schedule

    calls = []

    def decide(snapshot, policy, now):
        d = schedule(snapshot, policy, now)
        calls.append((dict(snapshot.nominations), d))
        return d

    vcs = (VirtualCluster("a", Resources(0, 0, 2)), VirtualCluster("b", Resources(0, 0, 2)))
    jobs = [
        TraceJob("A1", 0, 10, 2, vc="a"),
        TraceJob("A2", 0, 10, 2, vc="a"),
        TraceJob("B1", 1, 5, 2, vc="b"),
    ]
    shapes = homogeneous(1, 4)
    Simulator([s.to_node() for s in shapes], vcs, jobs, PRESETS["pasture"], decide=decide).run()
    k = next(i for i, (_, d) in enumerate(calls) if d.preemptions)
    nominated = calls[k][1].nominations["B1"]
    assert calls[k + 1][0] == {"B1": nominated}
    bound = {b.job: b.placements for b in calls[k + 1][1].binds}
    assert [p.node for p in bound["B1"]] == [p.node for p in nominated]


def test_drf_hand_schedule() -> None:
    jobs = [TraceJob(f"A{i}", 0, 10, 1, vc="a") for i in range(4)]
    jobs += [TraceJob(f"B{i}", 0, 10, 1, vc="b") for i in range(4)]
    e = ends(run(homogeneous(1, 4), jobs, "drf"))
    # DRF alternates VCs: two of each run first
    assert {n for n, t in e.items() if t == 10} == {"A0", "A1", "B0", "B1"}
    f = ends(run(homogeneous(1, 4), jobs, "fifo"))
    assert {n for n, t in f.items() if t == 10} == {"A0", "A1", "A2", "A3"}


def test_tiresias_las_hand_schedule() -> None:
    # L reaches 3600 GPU-s (queue 1) at t=3600; S arrives at 5000 in queue 0 and preempts it
    jobs = [TraceJob("L", 0, 10000, 1), TraceJob("S", 5000, 100, 1)]
    assert ends(run(homogeneous(1, 1), jobs, "tiresias-las")) == {"S": 5100, "L": 10160}
    assert ends(run(homogeneous(1, 1), jobs, "fifo")) == {"L": 10000, "S": 10100}


def test_tiresias_demotion_happens_between_arrivals() -> None:
    # S arrives while L is still in queue 0 (FIFO inside a queue: S waits); at t=3600 L is
    # demoted with no arrival or completion then: the simulator must call the core anyway
    jobs = [TraceJob("L", 0, 10000, 1), TraceJob("S", 1000, 100, 1)]
    assert ends(run(homogeneous(1, 1), jobs, "tiresias-las")) == {"S": 3700, "L": 10160}


def test_the_makespan_ends_at_the_last_completion_not_at_a_later_las_event() -> None:
    # J's crossing of the 3,600 GPU-s threshold is pushed when it starts, for t=3600; it
    # ends at 100, and the replay's end is that completion (it was 3600, the last event)
    result = run(homogeneous(1, 1), [TraceJob("J", 0, 100, 1)], "tiresias-las")
    assert result.end == 100
    assert summarise(result).makespan_s == 100


def test_srtf_oracle_hand_schedule() -> None:
    jobs = [TraceJob("L", 0, 1000, 1), TraceJob("S", 10, 100, 1)]
    assert ends(run(homogeneous(1, 1), jobs, "srtf-oracle")) == {"S": 110, "L": 1160}


def test_only_srtf_oracle_gets_durations() -> None:
    seen: dict[str, set] = {}

    from scheduler.sim.engine import _default_decide

    schedule = _default_decide()

    def spy(name):
        def decide(snap, policy, now):
            for j in snap.pending:
                seen.setdefault(name, set()).add(j.estimated_duration_s)
            return schedule(snap, policy, now)

        return decide

    jobs = random_trace(3, 20)
    for name in ("pasture", "fifo-backfill", "tiresias-las", "srtf-oracle"):
        shapes = homogeneous(2, 8)
        Simulator(
            [s.to_node() for s in shapes],
            vc_guarantees(jobs, shapes),
            jobs,
            PRESETS[name],
            oracle_estimates=name in ORACLE_ESTIMATES,
            decide=spy(name),
        ).run()
    assert seen["pasture"] == seen["fifo-backfill"] == seen["tiresias-las"] == {None}
    assert None not in seen["srtf-oracle"]


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"restart_cost_s": -1.0}, "restart_cost_s: expected seconds >= 0, got -1.0"),
        ({"restart_cost_s": float("nan")}, "restart_cost_s: expected seconds >= 0, got nan"),
        ({"checkpoint_s": 0.0}, "checkpoint_s: expected seconds > 0, got 0.0"),
        ({"checkpoint_s": float("inf")}, "checkpoint_s: expected seconds > 0, got inf"),
    ],
)
def test_the_engine_refuses_a_restart_cost_or_checkpoint_interval_out_of_range(kw, message):
    # the one check the sim CLI's flags also use (scheduler.sim.engine.check_*)
    with pytest.raises(ValueError) as exc:
        run(homogeneous(1, 8), [TraceJob("j", 0.0, 60.0, 1)], "fifo", **kw)
    assert str(exc.value) == message
