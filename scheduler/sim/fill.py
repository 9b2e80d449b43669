"""Fill experiment: the GPU allocation ratio a placement reaches as the cluster fills.

After "Beware of Fragmentation" (Weng et al., ATC'23, FGD), section 6: the cluster starts
empty; tasks drawn from the trace (in trace order, cycling) arrive one at a time and never
leave; each is placed at once by the core or fails (and is not retried). Arrivals stop when
the GPUs requested so far reach the cluster's GPUs. The curve reports, at each arrived
fraction of capacity, the fraction of GPUs actually allocated: the gap to the diagonal is
capacity lost to fragmentation (GPUs free but in pieces no arriving task can use).

The core allocates whole GPUs, so openb's fractional-GPU pods take one whole GPU here
(FGD's own experiments share GPUs); what this measures is multi-GPU and CPU/memory
fragmentation under the policy's scorers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from scheduler.core.model import Node, RunningJob, Snapshot, VirtualCluster
from scheduler.core.policy import Policy
from scheduler.sim.engine import Decide, _default_decide, build_job
from scheduler.sim.trace import TraceJob

DEFAULT_POINTS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)


@dataclass(frozen=True, slots=True)
class FillResult:
    """Outcome of a fill.

    Attributes:
        curve: (arrived GPUs / cluster GPUs, allocated GPUs / cluster GPUs) at each point.
        arrived: tasks that arrived.
        failed: tasks that could not be placed on arrival.
        first_failure_alloc: allocated fraction when the first task failed (None if none).
    """

    curve: tuple[tuple[float, float], ...]
    arrived: int
    failed: int
    first_failure_alloc: float | None


def fill(
    nodes: Sequence[Node],
    jobs: Sequence[TraceJob],
    policy: Policy,
    *,
    points: Sequence[float] = DEFAULT_POINTS,
    decide: Decide | None = None,
) -> FillResult:
    """Run the fill experiment (see the module docstring).

    Args:
        nodes: the cluster, empty.
        jobs: task templates, used in order and cycled.
        policy: placement policy (its filters and scorers matter; preemption is turned
            off, and all tasks share one VC "fill" that may borrow everything).
        points: arrived fractions of capacity at which to sample, ascending, last <= 1.

    Raises:
        ValueError: no jobs or no GPUs.
    """
    decide = decide or _default_decide()
    policy = replace(policy, preemption=())  # placement only: nothing is ever evicted
    gpus = sum(n.capacity.gpu for n in nodes)
    if not jobs or gpus < 1:
        raise ValueError(f"fill needs jobs and GPUs, got {len(jobs)} jobs and {gpus} GPUs")
    max_node = max(n.capacity.gpu for n in nodes)
    by_name = {n.name: n for n in nodes}
    vcs = (VirtualCluster("fill"),)
    running: list[RunningJob] = []
    arrived_gpus = alloc_gpus = arrived = failed = 0
    first_failure = None
    curve: list[tuple[float, float]] = []
    want = list(points)
    i = 0
    while want and arrived_gpus < gpus:
        tj = jobs[i % len(jobs)]
        i += 1
        template, g = build_job(tj, max_node, estimate=False)
        job = replace(template, name=f"{tj.name}#{i}", vc="fill", submit_time=float(i))
        arrived += 1
        arrived_gpus += g
        snap = Snapshot(tuple(by_name.values()), vcs, (job,), tuple(running))
        decision = decide(snap, policy, float(i))
        if decision.binds:
            placements = decision.binds[0].placements
            for p in placements:
                n = by_name[p.node]
                by_name[p.node] = replace(n, allocated=n.allocated + p.resources)
            alloc_gpus += g
            running.append(RunningJob(job, float(i), placements))
        else:
            failed += 1
            if first_failure is None:
                first_failure = alloc_gpus / gpus
        while want and arrived_gpus / gpus >= want[0]:
            curve.append((want.pop(0), alloc_gpus / gpus))
    return FillResult(tuple(curve), arrived, failed, first_failure)
