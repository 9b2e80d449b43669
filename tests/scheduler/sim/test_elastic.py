"""Elastic trace jobs in the simulator (issue 29): resizes follow the core's shrinks and
grows, progress follows the profile's speedup, nothing is lost at a resize."""

from __future__ import annotations

import pytest

from scheduler.core.presets import ORACLE_ESTIMATES, PRESETS
from scheduler.sim.cluster import homogeneous, vc_guarantees
from scheduler.sim.engine import Simulator
from scheduler.sim.profiles import PROFILES, profile_of
from scheduler.sim.trace import TraceJob
from tests.scheduler.sim.test_engine import random_trace


def run(nodes: int, gpus: int, jobs: list[TraceJob], policy: str = "elastic"):
    shapes = homogeneous(nodes, gpus)
    sim = Simulator(
        [s.to_node() for s in shapes],
        vc_guarantees(jobs, shapes),
        jobs,
        PRESETS[policy],
        oracle_estimates=policy in ORACLE_ESTIMATES,
        elastic=True,
    )
    return sim.run()


def test_profiles_fit_the_measured_four_gpu_speedup():
    for p in PROFILES:
        assert p.speedup(1) == 1.0
        assert 1.0 < p.speedup(4) <= 4.0
    assert profile_of("job-7") is profile_of("job-7")  # stable rule


def test_alone_a_job_grows_to_its_maximum_and_ends_by_its_speedup():
    a = TraceJob("a", 0.0, 100.0, 2)
    (rec,) = run(1, 4, [a]).records
    p = profile_of("a")
    assert rec.end == pytest.approx(100.0 * p.speedup(2) / p.speedup(4))


def test_arrival_shrinks_the_running_job_and_starts_at_once():
    a = TraceJob("a", 0.0, 100.0, 2)
    b = TraceJob("b", 10.0, 10.0, 1)
    res = run(1, 4, [a, b])
    ra, rb = res.records
    assert rb.first_start == 10.0 and rb.preemptions == 0 and ra.preemptions == 0
    pa, pb = profile_of("a"), profile_of("b")
    assert rb.end == pytest.approx(20.0)  # 1 replica: the node's other 3 GPUs are a's
    # a ran 10 s on 4, 10 s on 3, then on 4 again: no work lost at either resize
    left = 100.0 * pa.speedup(2) - 10.0 * pa.speedup(4) - 10.0 * pa.speedup(3)
    assert ra.end == pytest.approx(20.0 + left / pa.speedup(4))
    assert pb.speedup(1) == 1.0


@pytest.mark.parametrize("policy", ["elastic", "afs-like", "afs-las"])
def test_every_job_completes_once_without_overcommit(policy: str):
    jobs = random_trace(11, 60)
    res = run(3, 8, jobs, policy)  # the engine raises on any overcommit or bad resize
    assert [r.completions for r in res.records] == [1] * len(jobs)
    assert res.gpu_busy_s <= res.gpus * (res.end - res.start) + 1e-6
