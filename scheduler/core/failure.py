"""Pending reasons for a gang that does not fit: the sentence a user reads and its kind.

Pure (reads the cycle's :class:`~scheduler.core.index.NodeIndex` and placer; changes
nothing). Split out of :mod:`scheduler.core.scheduler` (issue 14 item 5).
"""

from __future__ import annotations

from scheduler.core.gang import GangFailure, Placer
from scheduler.core.index import NodeIndex
from scheduler.core.model import Job, PendingReason, ReasonKind
from scheduler.core.reasons import fmt_gpu, fmt_request, fmt_selector, reason
from scheduler.core.resources import Triple


def failure_reason(
    index: NodeIndex, placer: Placer, job: Job, failure: GangFailure
) -> PendingReason:
    """Why ``job``'s gang does not fit now, from the placer's ``failure``: NO_FIT_EVER (no
    node of the cluster could hold a task), INSUFFICIENT_RESOURCES (free capacity, GPU
    blocks, cordoned nodes) or GANG_INCOMPLETE (some tasks fit, not the gang)."""
    role = failure.role
    c, m, g = role.resources.triple()
    # Could this task fit some node of the cluster at all (ignoring node state)?
    any_state = placer.classes_for(role, ignore_state=True)
    biggest: Triple | None = None
    biggest_node = None
    ever = False
    for cid in any_state:
        for cap, i in index.classes[cid].capacities.items():
            if cap[2] >= g and cap[0] >= c and cap[1] >= m:
                ever = True
                break
            if biggest is None or _gcm(cap) > _gcm(biggest):
                biggest, biggest_node = cap, index.names[i]
        if ever:
            break
    what = fmt_request(c, m, g)
    if not ever:
        if not any_state:
            parts = []
            if role.gpu_model is not None:
                parts.append(f"GPU model {role.gpu_model}")
            if role.node_selector:
                parts.append(f"selector {fmt_selector(role.node_selector)}")
            return reason(
                ReasonKind.NO_FIT_EVER,
                f"role {role.name}: no node matches {' and '.join(parts) or 'its filters'}",
                role=role.name,
            )
        assert biggest is not None
        return reason(
            ReasonKind.NO_FIT_EVER,
            f"role {role.name} needs {what} on one node; the largest node has "
            f"{fmt_request(*biggest)} ({biggest_node})",
            role=role.name,
            largest_node=biggest_node,
        )
    ready = placer.classes_for(role)
    if not any(
        cap[2] >= g and cap[0] >= c and cap[1] >= m
        for cid in ready
        for cap in index.classes[cid].capacities
    ):
        return reason(
            ReasonKind.INSUFFICIENT_RESOURCES,
            f"role {role.name} needs {what} on one node; every node that could hold it "
            "is cordoned, draining or lost",
            role=role.name,
        )
    # A single task fits somewhere now, but not the whole gang.
    if failure.fit > 0:
        return reason(
            ReasonKind.GANG_INCOMPLETE,
            f"gang needs {failure.needed} tasks of role {role.name} ({what} each); "
            f"only {failure.fit} fit now",
            role=role.name,
            needed=failure.needed,
            fit=failure.fit,
        )
    if g > 0:
        gi = index.largest_free(ready)
        if gi is None:
            block, where = 0, "no ready node"
        else:
            block, where = index.free_gpu[gi], index.names[gi]
        if block < g or gi is None:  # (gi is None: block is 0)
            return reason(
                ReasonKind.INSUFFICIENT_RESOURCES,
                f"needs {fmt_gpu(g)} on one node; largest free block is {max(block, 0)} ({where})",
                role=role.name,
                largest_free_gpu=max(block, 0),
                node=where,
            )
        return reason(
            ReasonKind.INSUFFICIENT_RESOURCES,
            f"role {role.name} needs {what} on one node; nodes with {fmt_gpu(g)} free lack "
            f"the cpu or memory (e.g. {where}: {fmt_request(*_free(index, gi))} free)",
            role=role.name,
            node=where,
        )
    j = index.largest_free(ready, by_cpu=True)
    where = index.names[j] if j is not None else "no ready node"
    free_c = max(index.free_cpu[j], 0) if j is not None else 0
    free_m = max(index.free_mem[j], 0) if j is not None else 0
    return reason(
        ReasonKind.INSUFFICIENT_RESOURCES,
        f"role {role.name} needs {what} on one node; the most free cpu is "
        f"{fmt_request(free_c, free_m, 0)} ({where})",
        role=role.name,
        node=where,
    )


def _gcm(r: Triple) -> Triple:
    return (r[2], r[0], r[1])


def _free(index: NodeIndex, i: int) -> Triple:
    return (max(index.free_cpu[i], 0), max(index.free_mem[i], 0), 0)


def invalid_job(job: Job) -> str | None:
    """What makes a job unplaceable by construction (the spec layer should have refused
    it; the core reports instead of raising so one bad job cannot stop a cycle)."""
    if not job.roles:
        return "it has no task roles"
    for r in job.roles:
        if r.replicas < 1:
            return f"role {r.name} has {r.replicas} replicas (expected >= 1)"
        # 0 is allowed: a job-wide minimum (Volcano spec.minAvailable smaller than the
        # number of roles) leaves some roles nothing in the gang; they start as they fit
        if not 0 <= r.gang_min <= r.replicas:
            return (
                f"role {r.name} has min_available {r.gang_min} "
                f"(expected 0..{r.replicas}, its replicas)"
            )
        if not r.resources.is_nonnegative():
            return f"role {r.name} requests negative resources"
    if sum(r.gang_min for r in job.roles) < 1:
        return "its gang is empty (every role has min_available 0; expected at least 1 task)"
    return None
