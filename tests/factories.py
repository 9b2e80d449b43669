"""Factories for the scheduler core's domain types, shared by every test package.

Short, keyword-friendly builders with sensible defaults so that a test states only what
matters to it::

    node("n1", gpu=8)                      # 8 GPUs, 32 cores, 256 GiB, ready
    job("j1", gpu=4, replicas=2, vc="a")   # one role "worker" of 2 tasks x 4 GPUs
    running(job("j0", gpu=8), nodes=["n1"], start=0.0)
    las_policy(starve_limit=1.0)           # LAS queues, one threshold at 3,600 GPU-s
    snapshot(nodes=[...], pending=[...], running=[...], vcs=[vc("a", gpu=8)])

Units follow the core: cpu in cores here (converted to millicores), memory in GiB here
(converted to bytes), GPUs as counts, times in seconds.

And one builder above the core, for the loop's tests against a real redis-server::

    store, loop = loop_on_two_nodes(redis_url)   # VC default, nodes n1 and n2
    Clock()                                      # a clock the test plays forward
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import redis

from scheduler.core.model import (
    EMPTY_LABELS,
    Job,
    Node,
    NodeState,
    PriorityClass,
    Resources,
    RunningJob,
    Snapshot,
    TaskPlacement,
    TaskRole,
    VirtualCluster,
)
from scheduler.core.policy import Policy, PreemptionMode
from scheduler.loop import Loop
from scheduler.settings import SchedulerSettings
from scheduler.store import NodeRecord, Store

GiB = 1024**3


def res(cpu: float = 0, mem_gib: float = 0, gpu: int = 0) -> Resources:
    """Resources from cores, GiB and GPUs."""
    return Resources(cpu_m=int(round(cpu * 1000)), memory=int(round(mem_gib * GiB)), gpu=gpu)


def node(
    name: str,
    gpu: int = 8,
    cpu: float = 32,
    mem_gib: float = 256,
    *,
    used: Resources | None = None,
    labels: Mapping[str, str] | None = None,
    gpu_model: str | None = None,
    state: NodeState = NodeState.READY,
) -> Node:
    """A node with the given capacity; ``used`` is its ledger allocation."""
    return Node(
        name=name,
        capacity=res(cpu, mem_gib, gpu),
        allocated=used if used is not None else Resources(),
        labels=MappingProxyType(dict(labels)) if labels else EMPTY_LABELS,
        gpu_model=gpu_model,
        state=state,
    )


def role(
    name: str = "worker",
    replicas: int = 1,
    gpu: int = 1,
    cpu: float = 1,
    mem_gib: float = 1,
    *,
    min_available: int | None = None,
    selector: Mapping[str, str] | None = None,
    gpu_model: str | None = None,
) -> TaskRole:
    """A task role; resources are per task."""
    return TaskRole(
        name=name,
        replicas=replicas,
        resources=res(cpu, mem_gib, gpu),
        command="true",
        min_available=min_available,
        node_selector=MappingProxyType(dict(selector)) if selector else EMPTY_LABELS,
        gpu_model=gpu_model,
    )


def job(
    name: str,
    gpu: int = 1,
    replicas: int = 1,
    *,
    cpu: float = 1,
    mem_gib: float = 1,
    vc: str = "default",
    priority: int = PriorityClass.NORMAL,
    submit: float = 0.0,
    roles: Sequence[TaskRole] | None = None,
    estimate: float | None = None,
    attained: float = 0.0,
    preemptible: bool = True,
    min_available: int | None = None,
    selector: Mapping[str, str] | None = None,
    gpu_model: str | None = None,
    attempt: int = 1,
) -> Job:
    """A job; without ``roles`` it has one role "worker" built from the other arguments."""
    if roles is None:
        roles = (
            role(
                "worker",
                replicas,
                gpu,
                cpu,
                mem_gib,
                min_available=min_available,
                selector=selector,
                gpu_model=gpu_model,
            ),
        )
    return Job(
        name=name,
        vc=vc,
        roles=tuple(roles),
        priority=priority,
        submit_time=submit,
        estimated_duration_s=estimate,
        attained_service=attained,
        preemptible=preemptible,
        attempt=attempt,
    )


def running(j: Job, nodes: Sequence[str], start: float = 0.0) -> RunningJob:
    """``j`` running with its tasks on ``nodes`` (one node name per task, in role order)."""
    placements = []
    names = iter(nodes)
    for r in j.roles:
        for i in range(r.replicas):
            placements.append(TaskPlacement(r.name, i, next(names), r.resources))
    return RunningJob(job=j, start_time=start, placements=tuple(placements))


def las_policy(**changes: Any) -> Policy:
    """Tiresias' LAS queues as the core tests state them: one threshold at 3,600 GPU-s,
    queue-order preemption, no aging, VC quotas off; ``changes`` override any field."""
    fields: dict[str, Any] = {
        "queue_order": "las",
        "preemption": (PreemptionMode.QUEUE_ORDER,),
        "vc_quota": False,
        "aging_per_hour": 0,
        "las_thresholds": (3600.0,),
    }
    return Policy(**{**fields, **changes})


def vc(
    name: str,
    gpu: int = 0,
    cpu: float = 0,
    mem_gib: float = 0,
    *,
    max_gpu: int | None = None,
    can_borrow: bool = True,
) -> VirtualCluster:
    """A virtual cluster guaranteeing the given resources; ``max_gpu`` caps its GPUs."""
    return VirtualCluster(
        name=name,
        guarantee=res(cpu, mem_gib, gpu),
        max=Resources(gpu=max_gpu) if max_gpu is not None else None,
        can_borrow=can_borrow,
    )


def snapshot(
    nodes: Iterable[Node],
    pending: Iterable[Job] = (),
    running: Iterable[RunningJob] = (),
    vcs: Iterable[VirtualCluster] | None = None,
    *,
    charge_running: bool = True,
) -> Snapshot:
    """A snapshot; running jobs' placements are added to their nodes' ``allocated``
    (as the ledger would) unless ``charge_running`` is False. Without ``vcs`` every VC named
    by a job gets an unlimited, guarantee-free VC."""
    nodes = list(nodes)
    running = tuple(running)
    pending = tuple(pending)
    if charge_running:
        extra: dict[str, Resources] = {}
        for rj in running:
            for p in rj.placements:
                extra[p.node] = extra.get(p.node, Resources()) + p.resources
        nodes = [
            Node(n.name, n.capacity, n.allocated + extra[n.name], n.labels, n.gpu_model, n.state)
            if n.name in extra
            else n
            for n in nodes
        ]
    if vcs is None:
        names = sorted({j.vc for j in pending} | {rj.job.vc for rj in running})
        vcs = [VirtualCluster(name=n) for n in names]
    return Snapshot(nodes=tuple(nodes), vcs=tuple(vcs), pending=pending, running=running)


class Clock:
    """A clock the test plays forward: ``clock.t`` seconds (from 1000 s), for a loop's,
    autoscaler's or executor's ``clock`` argument."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def loop_on_two_nodes(
    redis_url: str, *, loop: Mapping[str, Any] | None = None, **settings: Any
) -> tuple[Store, Loop]:
    """A real loop over a real store: VC ``default`` (8 cores and 32 GiB guaranteed) and
    two registered nodes ``n1``, ``n2`` of 4 cores and 16 GiB each (address ``addr-<name>``,
    ports 31000-31099).

    Args:
        redis_url: the test's redis-server (the ``redis_url`` fixture: flushed per test).
        loop: loop settings over the defaults here (``interval_s`` 0.1 s,
            ``heartbeat_timeout_s`` 5 s).
        settings: other top-level scheduler settings (``share_dir=...``).

    Returns:
        (store, loop); the loop's settings are ``loop.settings``.
    """
    config = SchedulerSettings.model_validate(
        {
            "redis": {"url": redis_url},
            "loop": {"interval_s": 0.1, "heartbeat_timeout_s": 5, **(loop or {})},
            "virtual_clusters": [{"name": "default", "guarantee": {"cpu": 8, "memory": "32Gi"}}],
            **settings,
        }
    )
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.apply_vcs(config.virtual_clusters)
    for n in ("n1", "n2"):
        store.register_node(
            NodeRecord(
                name=n,
                address=f"addr-{n}",
                cpu_m=4000,
                memory=16 * GiB,
                port_range=(31000, 31099),
            )
        )
    return store, Loop(store, config)
