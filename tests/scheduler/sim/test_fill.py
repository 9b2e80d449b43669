"""Fill experiment (FGD-style allocation ratio as the cluster fills)."""

from __future__ import annotations

from scheduler.core.presets import PRESETS
from scheduler.sim.cluster import homogeneous
from scheduler.sim.fill import fill
from scheduler.sim.trace import TraceJob


def test_fill_counts_fragmentation() -> None:
    nodes = [s.to_node() for s in homogeneous(1, 2)]
    jobs = [TraceJob("a", 0, 1, 1), TraceJob("b", 1, 1, 2)]
    r = fill(nodes, jobs, PRESETS["pasture"], points=(0.5, 1.0))
    # a takes 1 of 2 GPUs (arrived 0.5, allocated 0.5); b needs 2, fails (arrived 1.5)
    assert r.curve == ((0.5, 0.5), (1.0, 0.5))
    assert (r.arrived, r.failed, r.first_failure_alloc) == (2, 1, 0.5)


def test_fill_packs_whole_cluster_when_shapes_allow() -> None:
    nodes = [s.to_node() for s in homogeneous(3, 2)]
    jobs = [
        TraceJob("a", 0, 1, 1),
        TraceJob("b", 0, 1, 1),
        TraceJob("c", 0, 1, 1),
        TraceJob("d", 0, 1, 2),
    ]
    r = fill(nodes, jobs, PRESETS["pasture"], points=(1.0,))
    assert r.failed == 0 and r.curve == ((1.0, 1.0),)
