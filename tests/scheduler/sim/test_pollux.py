"""The Pollux-like baseline (issue 36; scheduler/sim/pollux.py): goodput model, capacity,
and a hand-built case where co-adaptive sizing beats FIFO."""

from __future__ import annotations

import pytest

from scheduler.core.model import Node, Snapshot
from scheduler.core.resources import Resources
from scheduler.sim import pollux
from scheduler.sim.cluster import homogeneous, vc_guarantees
from scheduler.sim.engine import Simulator, build_elastic_job
from scheduler.sim.profiles import PROFILES, profile_of
from scheduler.sim.scenario import SIM_BASELINES, Scenario, parse_policies, run_policy
from scheduler.sim.suite import ratios
from scheduler.sim.trace import TraceJob
from tests.scheduler.sim.test_engine import random_trace


def test_efficiency_is_the_gradient_noise_scale_form():
    # adaptdl GoodputFunction.efficiency: (PGNS + M0) / (PGNS + M)
    assert pollux.efficiency(1000.0, 100.0, 100.0) == 1.0
    assert pollux.efficiency(1000.0, 100.0, 1100.0) == pytest.approx(1100.0 / 2100.0)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_goodput_is_at_least_the_fixed_batch_speedup_and_picks_a_measured_range_batch(profile):
    for n in (1, 2, 3, 8, 16):
        g, m = pollux.goodput(profile, n)
        assert g >= profile.speedup(n) - 1e-12  # the reference batch is among the choices
        model = profile.name.partition("-bsz")[0]
        sizes = [
            int(x.partition("-bsz")[2]) for x in (p.name for p in PROFILES) if x.startswith(model)
        ]
        assert min(sizes) <= m <= max(sizes)
    assert pollux.goodput(profile, 0) == (0.0, 0)


def test_a_small_batch_job_is_co_adapted_to_a_larger_batch_as_it_grows():
    small = next(p for p in PROFILES if p.name == "cifar10-bsz32")
    g1, m1 = pollux.goodput(small, 1)
    g8, m8 = pollux.goodput(small, 8)
    # sync time is amortised over a larger local batch: goodput far above fixed-batch speedup
    assert m8 > 32 and g8 > 3 * small.speedup(8)
    assert g8 > g1


def _snapshot(nodes: int, gpus: int, jobs: list[TraceJob]) -> Snapshot:
    shapes = homogeneous(nodes, gpus)
    pending = tuple(build_elastic_job(tj, False)[0] for tj in jobs)
    return Snapshot(nodes=tuple(s.to_node() for s in shapes), pending=pending)


def test_targets_never_exceed_the_cluster_and_respect_each_maximum():
    jobs = [TraceJob(f"j{i}", float(i), 100.0, g) for i, g in enumerate((1, 2, 4, 8, 1, 3))]
    snap = _snapshot(2, 4, jobs)  # 8 GPUs, 6 jobs wanting up to 2 x their GPUs each
    want = pollux.targets(snap.pending, set(), 8)
    assert sum(want.values()) == 8  # work-conserving: the greedy hands out every GPU
    assert all(want[j.name] <= j.roles[0].replicas for j in snap.pending)
    assert all(v >= 1 for v in want.values())  # 6 jobs, 8 GPUs: everybody runs


def test_decide_binds_within_each_nodes_free_room():
    jobs = [TraceJob(f"j{i}", float(i), 100.0, 4) for i in range(5)]
    snap = _snapshot(2, 4, jobs)
    busy = Node("busy", Resources(cpu_m=10**9, memory=10**12, gpu=4), Resources(gpu=3))
    snap = Snapshot(nodes=(*snap.nodes, busy), pending=snap.pending)
    d = pollux.decide(snap, pollux.POLICY, 0.0)
    used: dict[str, int] = {}
    for b in d.binds:
        idx = [p.index for p in b.placements]
        assert len(set(idx)) == len(idx)
        for p in b.placements:
            used[p.node] = used.get(p.node, 0) + p.resources.gpu
    free = {n.name: n.capacity.gpu - n.allocated.gpu for n in snap.nodes}
    assert all(used[n] <= free[n] for n in used)
    assert sum(used.values()) == 9  # every free GPU, the busy node's last one included


def test_every_job_completes_once_without_overcommit_in_the_replay():
    jobs = random_trace(5, 80)
    shapes = homogeneous(3, 8)
    policy, decide, rate = SIM_BASELINES[pollux.NAME]
    sim = Simulator(
        [s.to_node() for s in shapes],
        vc_guarantees(jobs, shapes),
        jobs,
        policy,
        elastic=True,
        decide=decide,
        rate=rate,
    )  # the engine raises on any overcommit, double bind or bad resize
    res = sim.run()
    assert all(r.completions == 1 and r.preemptions == 0 for r in res.records)


def test_it_beats_fifo_on_a_hand_built_burst():
    # one 8-GPU node, eight 8-GPU jobs of one hour arriving a second apart: FIFO runs them
    # one after another; Pollux shares the node and co-adapts batch sizes
    jobs = [TraceJob(f"burst-{i}", float(i), 3600.0, 8) for i in range(8)]
    shapes = homogeneous(1, 8)
    sc = Scenario("burst", jobs, shapes, vc_guarantees(jobs, shapes), 8, 1.0)
    fifo = run_policy(sc, "fifo")
    px = run_policy(sc, pollux.NAME)
    assert fifo.jct_mean_s == pytest.approx(sum(3600.0 * (k + 1) - k for k in range(8)) / 8)
    assert px.jct_mean_s < 0.8 * fifo.jct_mean_s
    assert {profile_of(j.name).name for j in jobs}  # profiles come from the fixed rule


def test_it_is_registered_for_the_suite():
    assert pollux.NAME in parse_policies(None)
    assert parse_policies("fifo,pollux-like") == ["fifo", "pollux-like"]
    pol = {
        "tiresias-las": {"mean": 2.0, "p99": 4.0},
        "elastic": {"mean": 1.5, "p99": 3.0},
        "pollux-like": {"mean": 1.0, "p99": 2.0},
    }
    r = ratios(pol)
    assert r["pollux_like_vs_tiresias"] == 0.5 and r["elastic_vs_pollux_like"] == 1.5
