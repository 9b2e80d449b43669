"""Domain types of the scheduler core: what goes in (a Snapshot) and what comes out (a Decision).

Everything here is a frozen dataclass with no behaviour beyond arithmetic and validation, so
that the same values can be built by the service (from Redis), the simulator (from a trace)
and the tests (from factories), and compared for determinism.

Units, everywhere in the core:
    cpu     millicores (1 core = 1000)
    memory  bytes
    gpu     whole devices (a task's GPUs always sit on one node)
    time    seconds, as a float; the current time is always an argument, never read

:class:`~scheduler.core.resources.Resources` (and ``ZERO``) live in ``resources.py``, the
home of all resource arithmetic, and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import Any

from scheduler.core.history import History
from scheduler.core.resources import ZERO, Resources, Triple

EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    # dataclasses refuse an unhashable default (mappingproxy); share one read-only empty map.
    return EMPTY_LABELS


class PriorityClass(IntEnum):
    """Named priorities (larger runs first). Jobs may also carry any int in between."""

    OPPORTUNISTIC = 0
    LOW = 25
    NORMAL = 50
    HIGH = 75
    CRITICAL = 100


class NodeState(StrEnum):
    """Schedulable state of a node.

    READY: takes new tasks. CORDONED: keeps running tasks, takes no new ones. DRAINING: like
    cordoned, and its running tasks are being moved off. LOST: heartbeat timed out; takes
    nothing, its tasks are failed by the service.
    """

    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Node:
    """A machine that runs tasks.

    Attributes:
        name: unique node name.
        capacity: total allocatable resources.
        allocated: resources held by tasks bound to this node (from the ledger, not the agent).
        labels: free-form key/value labels matched by node selectors.
        gpu_model: model of this node's GPUs (e.g. "A100"), None when it has none / unknown.
        state: see :class:`NodeState`.
    """

    name: str
    capacity: Resources
    allocated: Resources = ZERO
    labels: Mapping[str, str] = field(default_factory=_empty)
    gpu_model: str | None = None
    state: NodeState = NodeState.READY

    @property
    def free(self) -> Resources:
        return (self.capacity - self.allocated).clamp_min_zero()


@dataclass(frozen=True, slots=True)
class TaskRole:
    """One role of a job (ps, worker, actor, learner...).

    Attributes:
        name: role name, unique within the job.
        replicas: number of tasks of this role (>= 1).
        resources: per-task request.
        command: command line run by the agent (opaque to the core).
        image: container image, None for the job default / process executor.
        min_available: how many of the replicas must be placed together for the gang to
            start (Volcano ``minAvailable``); None means all replicas. 0 (a job-wide minimum
            spread over the roles left none for this one) puts none of them in the gang:
            they are placed with it when they fit, else later (grow); at least one role of
            a job has a minimum of 1 or more.
        node_selector: labels a node must carry (all key/value pairs must match).
        gpu_model: required GPU model, None for any.
        elastic: the role is elastic (issue 29, :mod:`scheduler.core.elastic`):
            ``replicas`` is its maximum and ``min_available`` its minimum; the elastic
            stage may stop its replicas above the minimum (highest index first) to start
            waiting jobs and grows it back toward the maximum as GPUs are idle. False (the
            default): the role is never shrunk.
    """

    name: str
    replicas: int
    resources: Resources
    command: str = ""
    image: str | None = None
    min_available: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=_empty)
    gpu_model: str | None = None
    elastic: bool = False

    @property
    def gang_min(self) -> int:
        return self.replicas if self.min_available is None else self.min_available


@dataclass(frozen=True, slots=True)
class Job:
    """A pending job as the core sees it.

    Attributes:
        name: unique job id.
        vc: virtual cluster the job is charged to.
        roles: task roles, in declaration order.
        priority: int, larger first (see :class:`PriorityClass`).
        submit_time: seconds, when the job (re-)entered the queue the first time; queue order
            uses it, so a retried or preempted job keeps its place.
        user: submitting user (for fairness and display only).
        attempt: 1 for the first run, incremented on retry and on preemption.
        estimated_duration_s: optional user/oracle runtime estimate (backfill, SRTF).
        attained_service: GPU-seconds (cpu-core-seconds for CPU-only jobs) already received
            in earlier attempts; used by least-attained-service ordering (Tiresias).
        preemptible: False protects the job from priority preemption (VC reclaim still
            applies to borrowed capacity).
        executed_s: seconds the job has held an allocation over all its attempts so far
            (Tiresias' executed time; 0 = never ran); with ``requeued_at``, the input of
            the starvation rule (:mod:`scheduler.core.starvation`).
        requeued_at: seconds, when its last attempt ended (it was preempted) and the job
            re-entered the queue; None = never preempted.
        scaling: for a job with elastic roles, its throughput at n replicas of its elastic
            roles relative to one replica, ``scaling[n - 1]`` (so ``scaling[0] == 1.0``);
            beyond the table the last step's gain repeats; empty = linear (n). Read by
            the elastic stage's sizing policy (:mod:`scheduler.core.elastic`).
        checkpoint_interval_s: seconds of running between the job's checkpoints, each
            loaded when it starts again: a preemption loses at most that much of the
            attempt. 0 = its progress is always saved (the simulator's free checkpoints);
            None = not declared, so a preemption loses the whole attempt. Read by the
            starvation rule (:func:`scheduler.core.starvation.saved_s`).
    """

    name: str
    vc: str
    roles: tuple[TaskRole, ...]
    priority: int = PriorityClass.NORMAL
    submit_time: float = 0.0
    user: str = ""
    attempt: int = 1
    estimated_duration_s: float | None = None
    attained_service: float = 0.0
    preemptible: bool = True
    executed_s: float = 0.0
    requeued_at: float | None = None
    scaling: tuple[float, ...] = ()
    checkpoint_interval_s: float | None = None

    def total_request(self) -> Resources:
        """Sum of every replica's request (the job's full size)."""
        total = ZERO
        for role in self.roles:
            total = total + role.resources * role.replicas
        return total

    def gang_request(self) -> Resources:
        """Sum of the minimum gang's request (min_available of each role)."""
        total = ZERO
        for role in self.roles:
            total = total + role.resources * role.gang_min
        return total


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """One task bound to one node.

    Attributes:
        role: task role name.
        index: replica index within the role, 0-based.
        node: node name.
        resources: what the task holds on that node.
    """

    role: str
    index: int
    node: str
    resources: Resources


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding an allocation (scheduled or running).

    Attributes:
        job: the job as submitted.
        start_time: seconds, when the allocation was made.
        placements: its tasks' placements.
        releasing: the job is already on its way out (preempted or stopped, its tasks not
            yet ended, so its allocation is still held). The core never chooses it as a
            victim again, leaves it out of its VC's usage and of the guaranteed/borrowing
            classification, and treats its capacity as coming free: a blocked job that
            fits once it is released waits for it (PREEMPTING, nominated) instead of
            preempting more. Default False (the simulator releases victims at once).
        resized_at: seconds, when replicas of it were last stopped by an elastic resize
            (None: never); ``Policy.regrow_cooldown_s`` counts from it.
    """

    job: Job
    start_time: float
    placements: tuple[TaskPlacement, ...]
    releasing: bool = False
    resized_at: float | None = None

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def vc(self) -> str:
        return self.job.vc

    def held(self) -> Triple:
        """(cpu_m, memory bytes, GPUs) summed over its placements, as plain ints for the
        core's per-cycle loops."""
        c = m = g = 0
        for p in self.placements:
            r = p.resources
            c += r.cpu_m
            m += r.memory
            g += r.gpu
        return c, m, g

    def allocated(self) -> Resources:
        """:meth:`held` as :class:`Resources`."""
        return Resources(*self.held())


@dataclass(frozen=True, slots=True)
class VirtualCluster:
    """A tenant queue (OpenPAI virtual cluster / YARN capacity queue).

    Attributes:
        name: VC name.
        guarantee: resources the VC always gets back when it has pending work.
        max: hard cap on what the VC may hold including borrowed capacity; None = no cap.
        can_borrow: whether the VC may use idle capacity beyond its guarantee.
    """

    name: str
    guarantee: Resources = ZERO
    max: Resources | None = None
    can_borrow: bool = True


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the core may look at in one scheduling cycle.

    Attributes:
        nodes: all nodes, any state.
        vcs: virtual clusters; a job whose VC is missing is left pending with a reason.
        pending: jobs waiting for placement (any order; the policy orders them).
        running: jobs holding allocations.
        version: opaque store version the Decision will be committed against.
        nominations: the previous Decision's ``nominations`` (pending job -> the placement
            its preemption freed or is freeing for it), passed back unchanged. Capacity
            nominated for a job is held for it until the cycle reaches it, so a job ahead
            in queue order cannot take what was preempted for another and make it preempt
            again (Kubernetes' nominated node). Entries of jobs that are not pending, or
            on unknown nodes, are ignored. Empty by default.
        history: finished jobs observed so far (:class:`scheduler.core.history.History`),
            the learned input of ``Policy.adaptive`` policies; None = nothing learned
            (static thresholds). The loop / simulator keeps it; the core only reads it.
    """

    nodes: tuple[Node, ...]
    vcs: tuple[VirtualCluster, ...] = ()
    pending: tuple[Job, ...] = ()
    running: tuple[RunningJob, ...] = ()
    version: int = 0
    nominations: Mapping[str, tuple[TaskPlacement, ...]] = field(default_factory=_empty)
    history: History | None = None


class ReasonKind(StrEnum):
    """Machine-readable kind of a pending reason (used for metrics and filtering)."""

    NO_FIT_EVER = "no-fit-ever"  # no node of the cluster could ever hold a task
    INSUFFICIENT_RESOURCES = "insufficient-resources"  # would fit an empty cluster, not now
    GANG_INCOMPLETE = "gang-incomplete"  # some tasks fit, not min_available of every role
    VC_MAX = "vc-max"  # the VC's max cap would be exceeded
    VC_QUOTA = "vc-quota"  # beyond guarantee and borrowing not possible / not allowed
    UNKNOWN_VC = "unknown-vc"
    RESERVATION = "reservation"  # would delay the reservation of a blocked higher job
    QUEUE_ORDER = "queue-order"  # a higher job in the queue is blocked (strict FIFO)
    PREEMPTING = "preempting"  # victims chosen, waiting for them to release
    RESIZING = "resizing"  # elastic jobs shrunk for it, waiting for their replicas to stop
    CYCLE_LIMIT = "cycle-limit"  # not looked at this cycle


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job is still pending, for a person and for metrics.

    Attributes:
        kind: see :class:`ReasonKind`.
        message: one sentence a user can read, e.g.
            "needs 8 GPUs on one node; largest free block is 4 (node-7)".
        details: structured extras (numbers, node names) for the API.
    """

    kind: ReasonKind
    message: str
    details: Mapping[str, object] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class Bind:
    """Placement of a whole gang.

    Attributes:
        job: job name.
        placements: one per placed task (>= min_available of every role).
        scores: per-stage scores of the chosen nodes, ``{node: {stage: score}}``, kept for
            explanations.
    """

    job: str
    placements: tuple[TaskPlacement, ...]
    scores: Mapping[str, Mapping[str, float]] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running job chosen as a victim.

    Attributes:
        job: the victim's name.
        for_job: the pending job it makes room for (kept for the loop and the simulator;
            never shown to the victim's owner when it is of another VC).
        reason: the reason stored on the victim, worded for the victim's VC ("preempted for
            a job of VC research: reclaiming vc research's guarantee from borrowers";
            ``reasons.preempted_reason``).
    """

    job: str
    for_job: str
    reason: str


@dataclass(frozen=True, slots=True)
class Shrink:
    """Replicas of a running elastic job to stop while the job goes on (a resize, not a
    preemption: the job keeps its place, attempt and attained service; issue 29).

    Attributes:
        job: the shrunk job's name.
        placements: the placements to release (its highest-index replicas above the
            role's minimum).
        for_job: the pending job the room is made for.
        reason: human-readable reason.
    """

    job: str
    placements: tuple[TaskPlacement, ...]
    for_job: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """Output of one scheduling cycle.

    Attributes:
        binds: gangs to commit, in the order they were decided.
        preemptions: running jobs to stop and requeue.
        pending: a reason for every pending job not bound this cycle.
        version: the snapshot version the decision was computed from.
        nominations: for every job reported PREEMPTING, the what-if placement of its gang
            on the capacity its victims (this cycle's, or releasing ones) free. Give it
            back as the next Snapshot's ``nominations``.
        grows: placements added to running jobs bound at ``min_available``: replicas that
            did not fit at bind time, with their own replica indexes
            (:mod:`scheduler.core.grow`); for elastic jobs, replicas the elastic stage adds
            toward the maximum (:mod:`scheduler.core.elastic`).
        shrinks: replicas of running elastic jobs to stop (:class:`Shrink`); the jobs
            they make room for are reported RESIZING with a nomination.
    """

    binds: tuple[Bind, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: Mapping[str, PendingReason] = field(default_factory=dict)
    version: int = 0
    nominations: Mapping[str, tuple[TaskPlacement, ...]] = field(default_factory=dict)
    grows: tuple[Bind, ...] = ()
    shrinks: tuple[Shrink, ...] = ()


def per_node(placements: Iterable[TaskPlacement], id_of: dict[str, int]) -> dict[int, list[int]]:
    """{node id: [cpu_m, memory, gpu]} summed over ``placements`` (a running job's, or a
    nomination's); placements on nodes ``id_of`` does not know are skipped."""
    out: dict[int, list[int]] = {}
    for p in placements:
        i = id_of.get(p.node)
        if i is None:
            continue
        v = out.get(i)
        if v is None:
            v = out[i] = [0, 0, 0]
        r = p.resources
        v[0] += r.cpu_m
        v[1] += r.memory
        v[2] += r.gpu
    return out
