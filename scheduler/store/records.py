"""Plain records the store reads and writes (JSON inside Redis hashes).

Units: cpu_m millicores, memory bytes, gpu devices, times seconds since the epoch (Redis
``TIME``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from scheduler.states import (  # noqa: F401  (re-exported: the store's public names)
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
    TaskState,
)


class Cause(StrEnum):
    """Why a task ended when the task itself is not to blame (``TaskRecord.cause``).

    An attempt ended by one of these is requeued without using an attempt of the job's
    retry budget (Kubernetes' podFailurePolicy ``DisruptionTarget`` condition, Slurm's
    ``JobRequeue``); see :attr:`TaskRecord.disrupted`, the one place that decides.

    - ``node_lost``: its node stopped heartbeating (the loop marked it lost).
    - ``fenced``: its agent killed it (or its watchdog did) because the agent could not
      renew its lease in time (docs/faults.md).
    - ``agent_restart``: its agent restarted without a record of it.
    - ``evicted``: Kubernetes evicted its pod (a ``DisruptionTarget`` condition: a drain,
      an AKS Spot auto-drain or upgrade, the taint manager; the kubelet's node-pressure
      eviction).
    - ``node_shutdown``: the kubelet's graceful node shutdown ended its pod.
    - ``admission_rejected``: the kubelet refused its pod at admission
      (``UnexpectedAdmissionError``, ``OutOfcpu``, ``OutOfmemory``...).
    - ``not_started``: its pod was not running at all past the start limit (never
      admitted, its sandbox or volumes never created: ``FailedCreatePodSandBox``, a
      failed Azure Files mount).
    """

    NODE_LOST = "node_lost"
    FENCED = "fenced"
    AGENT_RESTART = "agent_restart"
    EVICTED = "evicted"
    NODE_SHUTDOWN = "node_shutdown"
    ADMISSION_REJECTED = "admission_rejected"
    NOT_STARTED = "not_started"


_CAUSES = frozenset(c.value for c in Cause)


@dataclass
class TaskRecord:
    """One task of one attempt.

    Attributes:
        role, index: identity within the job; ``key`` is ``<role>-<index>``.
        attempt: the job attempt this task belongs to.
        node, address: where it runs and the address tasks reach it at.
        ports: ``{name: port}`` assigned at commit from the node's port range.
        gpus: GPU device indices on the node.
        cpu_m, memory, gpu: what it holds.
        state: see :class:`TaskState`; desired: ``run`` or ``stop`` (set by the loop).
        exit_code: the process' exit code when finished (None when unknown / lost).
        message: human-readable detail of the last change.
        scheduled, started, finished: times (s).
        handle: executor handle reported by the agent (pid or container name).
        cause: '' when the task ended by itself (its exit code counts), else the
            infrastructure fault that ended it (:class:`Cause`).
        restarts: times this task was restarted in place within its attempt (role
            ``max_task_retries``; :mod:`scheduler.rules.lifecycle`).
    """

    role: str
    index: int
    attempt: int
    node: str
    address: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    gpus: list[int] = field(default_factory=list)
    cpu_m: int = 0
    memory: int = 0
    gpu: int = 0
    state: str = TaskState.SCHEDULED
    desired: str = "run"
    exit_code: int | None = None
    message: str = ""
    scheduled: float | None = None
    started: float | None = None
    finished: float | None = None
    handle: str = ""
    cause: str = ""
    restarts: int = 0
    # failure diagnosis {kind, summary, retry, hint} from scheduler.rules.diagnosis (issue 19)
    diagnosis: dict[str, Any] | None = None
    # issue 34: what the task used, recorded at its end by its agent: {cpu_s (CPU
    # seconds), max_rss (bytes)}; None: not measured (Slurm's TotalCPU and MaxRSS)
    usage: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def done(self) -> bool:
        return TaskState(self.state).done

    @property
    def disrupted(self) -> bool:
        """True when the infrastructure ended this task (node lost, fencing, agent
        restart), so that its attempt is requeued without being charged to the job's retry
        budget. The one definition of "not the task's fault": a ``lost`` task always is,
        and so is any task with a :class:`Cause`. Preemption and drains end attempts
        without a task outcome (``ending.preempted``) and are never charged either."""
        return self.state == TaskState.LOST or self.cause in _CAUSES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskRecord:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        # cjson encodes empty tables as {} — normalise the list field.
        if isinstance(known.get("gpus"), dict):
            known["gpus"] = []
        if isinstance(known.get("ports"), list):
            known["ports"] = {}
        return cls(**known)


@dataclass
class JobRecord:
    """A job as stored: the spec (dict, validated at submit) and its lifecycle fields.

    Attributes:
        name, vc, user, priority: identity and accounting.
        uid: this submission's own id (32 hex digits, made at submit; "" for a job
            stored before uids existed). A job deleted or replaced and submitted again
            under the same name gets a new uid; its logs, usage samples and events are
            keyed by it, so nothing of the old job shows under the new one.
        spec: the JobSpec as a dict (``JobSpec.model_validate`` restores it).
        state: see :class:`JobState`; reason: why it entered that state.
        attempt: run number (1 first; +1 on retry and on preemption).
        failures: failed attempts so far (compared with retry.max_attempts).
        created, updated, scheduled_time, start_time, end_time: times (s).
        pending_reason: ``{"kind", "message"}`` from the last cycle that left it pending.
        stop_requested: non-empty reason once a stop was requested.
        ending: ``{"state", "reason"}`` while its tasks are being stopped on the way to that
            state.
        exit_code: the exit code that decided a failure, when any.
        attained_service: GPU-seconds (or core-seconds) its attempts held so far.
        resized_at: when replicas of its elastic roles were last stopped by a resize
            (s, the loop's clock; None: never). The core's regrow cool-down counts from it.
        attempts: one entry per ended attempt, oldest first: ``{attempt, state (what the
            attempt ended in: queued = requeued), reason, cause ('' = the task's own
            outcome, else node_lost | fenced | agent_restart | preempted | drained),
            charged (whether it used an attempt of the retry budget), nodes, started,
            ended, usage}`` (times in s; ``usage``: ``{"<role>-<index>": {node, cpu_s,
            max_rss}}`` of the tasks whose agent recorded totals at their end).
    """

    name: str
    vc: str
    user: str
    priority: int
    spec: dict[str, Any]
    state: str
    reason: str = ""
    attempt: int = 1
    failures: int = 0
    created: float = 0.0
    updated: float = 0.0
    scheduled_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    pending_reason: dict[str, Any] | None = None
    stop_requested: str = ""
    ending: dict[str, Any] | None = None
    exit_code: int | None = None
    attained_service: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    uid: str = ""
    resized_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class NodeRecord:
    """A node as registered by its agent.

    Attributes:
        name, address: identity and where its tasks are reachable.
        cpu_m, memory, gpu, gpu_model: capacity.
        labels: node labels. state: ready | cordoned | draining | lost.
        port_range: (low, high) ports the loop may assign to tasks there.
        heartbeat: last heartbeat time (s, Redis clock); usage: the agent's last report
            ``{cpu_percent, memory_used, memory_total, gpus: [...] }``.
        executor: executor kind of its agent.
        lease_s: the agent's lease (s, its own clock): it stops its tasks when it could not
            renew the lease by a heartbeat within that time. fence_s: seconds (agent clock)
            from a heartbeat's send until its tasks are surely dead when no renewal
            follows (lease + the executor's kill bound). 0 for agents without a lease.
        heartbeat_interval_s: the agent's heartbeat interval (s; 0: unknown, taken as 5).
        gap_from, gap_to: the last heartbeat gap longer than two intervals (s, Redis clock:
            the heartbeat before it and the one that ended it; 0 when none).
        revoked: an operator force-deleted the node while it heartbeated; its lease is
            revoked and the loop declares it lost at ``fence_until`` (s, Redis clock).
        task_users: whose Unix identity its tasks run as: ``vc`` (each VC's own user),
            ``agent`` (the agent's), "" (an agent that did not say).
        task_login: with ``task_users`` ``agent``, the user name its tasks' sshd accepts
            (the agent's user; "" where the task's image decides: containers, pods), for
            ``pasture job exec`` (scheduler/services/jobexec.py).
    """

    name: str
    address: str
    cpu_m: int
    memory: int
    gpu: int = 0
    gpu_model: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    state: str = "ready"
    port_range: tuple[int, int] = (20000, 29999)
    heartbeat: float = 0.0
    registered: float = 0.0
    usage: dict[str, Any] = field(default_factory=dict)
    executor: str = ""
    lease_s: float = 0.0
    fence_s: float = 0.0
    # why the node is in its state (cordoned by whom / by the GPU health probe; issue 19)
    state_reason: str = ""
    # an operator deleted it (``pasture node delete``): lost now, its record removed by the
    # loop once its tasks were requeued (scheduler/rules/health.py)
    deleted: bool = False
    heartbeat_interval_s: float = 0.0
    gap_from: float = 0.0
    gap_to: float = 0.0
    revoked: bool = False
    fence_until: float = 0.0
    task_users: str = ""
    task_login: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Allocation:
    """One ledger entry: a task's hold on a node (the truth about what is allocated)."""

    job: str
    role: str
    index: int
    attempt: int
    node: str
    cpu_m: int
    memory: int
    gpu: int
    gpus: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Allocation:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for k in ("gpus", "ports"):
            if isinstance(known.get(k), dict):
                known[k] = []
        return cls(**known)


@dataclass
class VCUsage:
    """A virtual cluster with what its jobs hold now. Resources as ``{cpu_m, memory, gpu}``.

    borrowed = max(0, used - guarantee) per component.
    """

    name: str
    guarantee: dict[str, int]
    max: dict[str, int] | None
    can_borrow: bool
    used: dict[str, int]
    borrowed: dict[str, int]
    jobs_running: int = 0
    jobs_queued: int = 0


@dataclass(frozen=True)
class Launch:
    """What a node's agent needs to start a job's tasks, from its launch record
    ``node:<n>:launch:<job>`` (written by the commit's binds and grows, deleted by the
    job's release): the job's name, the attempt bound, its spec (dict, as submitted), the
    submitting user, its sealed secrets token ("" when it has none), the job's uid
    (:attr:`JobRecord.uid`; "" for a job stored before uids existed) and the submission's
    ssh private key in PEM (:mod:`scheduler.jobkey`; "" for a job without ssh)."""

    job: str
    attempt: int
    spec: dict[str, Any]
    user: str
    sealed_secrets: str
    uid: str = ""
    ssh_key: str = field(default="", repr=False)  # never in a log line
