"""Start the rest of a running gang: replicas beyond ``min_available`` that did not fit
when the gang was bound are placed in later cycles, as they fit (Volcano: a job starts
when ``minAvailable`` tasks can run; its other pending tasks are allocated as resources
come free, pkg/scheduler/actions/allocate).

Runs after the pending jobs of the cycle were considered, on the capacity they left (the
EASY reservation's holds still in force), and charges the job's VC like any placement.
A running job on its way out (``releasing``) is not grown.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from scheduler.core.gang import Placer
from scheduler.core.index import NodeIndex
from scheduler.core.model import Bind, RunningJob, TaskPlacement
from scheduler.core.resources import Triple


def missing_replicas(rj: RunningJob) -> dict[str, list[int]]:
    """``{role: [replica index, ...]}`` of ``rj``'s replicas that hold no placement."""
    placed: dict[str, set[int]] = {}
    for p in rj.placements:
        placed.setdefault(p.role, set()).add(p.index)
    out = {}
    for role in rj.job.roles:
        have = placed.get(role.name, set())
        if len(have) < role.replicas:
            out[role.name] = [i for i in range(role.replicas) if i not in have]
    return out


def growing(running: tuple[RunningJob, ...]) -> list[RunningJob]:
    """Running jobs (not releasing) with replicas still to place."""
    out = []
    for rj in running:  # a plain loop: this runs every cycle over every running job
        if rj.releasing:
            continue
        n = 0
        for r in rj.job.roles:
            n += r.replicas
        if len(rj.placements) < n and missing_replicas(rj):
            out.append(rj)
    return out


def grow(
    jobs: list[RunningJob],
    index: NodeIndex,
    placer: Placer,
    admit: Callable[[RunningJob, Triple], bool],
) -> list[Bind]:
    """Place what fits of each job's missing replicas, oldest job first.

    Args:
        jobs: from :func:`growing`.
        index, placer: the cycle's node index and placer (allocations stay journaled).
        admit: ``admit(job, (cpu_m, memory, gpu))`` True when the job's VC may take one
            more task of that request now (and charges it).

    Returns:
        One :class:`Bind` per job that got tasks, placements carrying the replica indexes
        that were missing (lowest first).
    """
    binds = []
    for rj in sorted(jobs, key=lambda r: (r.start_time, r.name)):
        near: dict[int, int] = {}
        for p in rj.placements:
            i = index.id_of.get(p.node)
            if i is not None:
                near[i] = near.get(i, 0) + 1
        placements: list[TaskPlacement] = []
        scores = {}
        for role in rj.job.roles:
            missing = missing_replicas(rj).get(role.name)
            if not missing:
                continue
            gp = placer.place_extra(role, len(missing), near, partial(admit, rj))
            for (_, node_id), replica in zip(gp.tasks, missing, strict=False):
                name = index.names[node_id]
                placements.append(TaskPlacement(role.name, replica, name, role.resources))
                near[node_id] = near.get(node_id, 0) + 1
            scores.update(gp.scores)
        if placements:
            binds.append(Bind(rj.name, tuple(placements), scores))
    return binds
