"""Response schemas of the API (what OpenAPI documents).

They name the fields clients rely on and allow extra ones, so that a field the store adds
later reaches clients without an API change. Units: ``cpu_m`` millicores, ``memory``
bytes, ``gpu`` devices, times in seconds since the epoch (Redis' clock).

The CLI parses every answer with these same models (:mod:`scheduler.cli.client`), so a
field renamed here or in the store fails a test instead of printing blanks. The module
imports pydantic only (``scheduler.api`` loads FastAPI lazily): the CLI's start-up pays
for the models, not for the server.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from scheduler.states import JobState, TaskState

# A VC name as the settings allow it (``virtual_clusters[].name``), at most 64 characters.
VC_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResourcesOut(_Open):
    cpu_m: int = Field(description="millicores")
    memory: int = Field(description="bytes")
    gpu: int = Field(description="devices")


class PendingReasonOut(_Open):
    kind: str = Field(description="machine-readable kind, e.g. insufficient-resources")
    message: str = Field(description="one sentence for people")


class TaskOut(_Open):
    role: str
    index: int
    attempt: int
    node: str
    address: str = ""
    ports: dict[str, int] = {}
    state: TaskState = Field(
        description="scheduled | running | succeeded | failed | stopped | lost"
    )
    exit_code: int | None = None
    message: str = ""
    restarts: int = Field(0, description="in-place restarts of this task (max_task_retries)")
    cause: str = Field(
        "",
        description="'' when the task ended by itself; else the infrastructure fault that "
        "ended it (node_lost | fenced | agent_restart | evicted | node_shutdown | "
        "admission_rejected | not_started): its attempt is not charged",
    )
    diagnosis: dict[str, Any] | None = Field(
        None,
        description="failure diagnosis {kind, summary, retry, hint} (scheduler.rules.diagnosis)",
    )
    cpu_m: int = Field(0, description="millicores it holds")
    memory: int = Field(0, description="bytes it holds")
    gpu: int = Field(0, description="devices it holds")
    usage: dict[str, Any] | None = Field(
        None,
        description="what it used, recorded at its end: {cpu_s (CPU seconds), max_rss"
        " (bytes)}; null while it runs or when its agent could not measure it",
    )


class AttemptOut(_Open):
    attempt: int
    state: str = Field(description="what the attempt ended in (queued: requeued)")
    reason: str = ""
    cause: str = Field(
        "",
        description="'' (the task's own outcome) | node_lost | fenced | agent_restart | "
        "evicted | node_shutdown | admission_rejected | not_started | preempted | drained",
    )
    charged: bool = Field(description="whether it used an attempt of retry.max_attempts")
    nodes: list[str] = []
    started: float | None = None
    ended: float | None = None
    # and, when its agents recorded them, usage: {"<role>-<index>": {node, cpu_s (CPU
    # seconds), max_rss (bytes)}} (an extra field: absent from attempts without figures)


class JobDeleteOut(_Open):
    name: str = Field(description="the job's name within its VC")
    vc: str = ""
    deleted: bool = Field(description="true: its records are gone; false: stopping first")
    state: str = Field(description="the job's state when the request was answered")


class JobOut(_Open):
    name: str = Field(description="the job's name within its VC")
    key: str = Field(
        "",
        description="the job's key, <name> (VC default) or <name>.<vc>: its directory "
        "on the share (jobs/<key>) and PASTURE_JOB_NAME (scheduler/jobref.py)",
    )
    uid: str = Field(
        "",
        description="this submission's own id (32 hex digits; '' for a job stored before "
        "uids): a job deleted or replaced and submitted again under the name gets a new one",
    )
    vc: str
    user: str
    priority: int
    state: JobState = Field(
        description="submitted | queued | scheduled | running | succeeded | "
        "failed | stopped | preempted (scheduler/states.py)"
    )
    reason: str = Field("", description="why it entered its state")
    attempt: int = 1
    created: float = 0.0
    scheduled_time: float | None = Field(None, description="when its current attempt was placed")
    start_time: float | None = Field(None, description="when its current attempt started")
    end_time: float | None = Field(None, description="when it ended")
    pending_reason: PendingReasonOut | None = None
    stop_requested: str = ""
    exit_code: int | None = None
    spec: dict[str, Any] = {}
    attempts: list[AttemptOut] = Field([], description="ended attempts, oldest first")
    tasks: list[TaskOut] | None = Field(None, description="GET /jobs/{name} only")


class JobSubmitOut(JobOut):
    """The stored job, as ``POST /jobs`` answers it."""

    warnings: list[str] = Field([], description="fields accepted without effect")
    jobs: list[str] | None = Field(None, description="every job stored (a MARO schedule)")


class PlacementOut(BaseModel):
    role: str
    index: int
    node: str


class DryRunJobOut(BaseModel):
    """Where one job of a dry run would go now, or why it would wait."""

    name: str
    vc: str
    priority: int
    placed: bool = Field(description="true: the scheduler would place it in its next cycle")
    placements: list[PlacementOut] = Field([], description="task -> node, when placed")
    pending_reason: PendingReasonOut | None = Field(None, description="why not, when not placed")
    rejected: dict[str, dict[str, int]] = Field(
        {}, description="role -> {filter: nodes it rejected} (scheduler.core.explain)"
    )
    nodes: int = Field(description="nodes judged")


class DryRunOut(BaseModel):
    """``POST /jobs:dry-run``: the spec as a submit would validate it; nothing stored."""

    format: str = Field(description="pasture | openpai-v1 | openpai-v2 | maro | volcano")
    warnings: list[str] = Field([], description="fields accepted without effect")
    jobs: list[DryRunJobOut] = Field(description="one per job the submit would store")


class ExecAccessOut(BaseModel):
    """``POST /jobs/{name}/tasks/{role}/{index}/exec``: the way into a running task's sshd
    (scheduler/services/jobexec.py); for the job's submitter or an admin only."""

    job: str
    role: str
    index: int
    attempt: int
    node: str
    address: str = Field(description="the task's address")
    port: int = Field(description="the task's sshd port")
    key: str = Field(description="the submission's private key (PEM), also its host key")
    user: str = Field("", description="the Unix user the task runs as on nodes with task_users: vc")
    login: str = Field(
        "",
        description="the user name the task's sshd accepts (as its node's agent registered"
        " it); empty when unknown",
    )
    host_key: str = Field(
        "", description="the task's host key as an OpenSSH public key line (the key's public half)"
    )


class BatchItemOut(BaseModel):
    """The outcome of one document of ``POST /jobs:batch``."""

    index: int = Field(description="position of the document in ``jobs``")
    status: int = Field(description="201 stored; else 403, 409 or 422 as a single submit")
    name: str | None = Field(None, description="the job's name, when the document has one")
    names: list[str] = Field([], description="every job stored (several for a MARO schedule)")
    state: str | None = Field(None, description="the stored job's state (submitted)")
    warnings: list[str] = []
    detail: str | list[dict[str, Any]] | None = Field(
        None, description="why it was refused (a sentence, or field problems for 422)"
    )


class BatchOut(BaseModel):
    """The answer of ``POST /jobs:batch``: one item per document, in order."""

    items: list[BatchItemOut]
    created: int = Field(description="documents stored")
    failed: int = Field(description="documents refused")


class JobPage(BaseModel):
    items: list[JobOut]
    total: int = Field(description="jobs matching the filters")
    limit: int
    offset: int


class EventOut(_Open):
    time: float
    state: str
    attempt: int | None = None
    reason: str = ""


class NodeEventOut(EventOut):
    """A node event: an automatic cordon (GPU health) or an operator's action."""

    action: str | None = Field(None, description="cordon | uncordon | drain (operators)")
    by: str | None = Field(None, description="the token name that acted")
    why: str | None = Field(None, description="the operator's reason, '' when none given")
    jobs: list[str] | None = Field(
        None, description="jobs with tasks on the node then (a drain requeues them)"
    )
    other_jobs: int | None = Field(None, description="affected jobs of VCs the caller cannot see")


class ForgottenNodeOut(BaseModel):
    """A node pasture forgot: gone for good (a Kubernetes node scaled down or evicted) or
    deleted by an operator, once its tasks were requeued."""

    time: float = Field(description="when it was forgotten (seconds since the epoch)")
    node: str
    reason: str = Field(description="its state reason then, e.g. why it was lost")


class NodeEventsOut(BaseModel):
    """``GET /nodes/{name}/events``: a node's events, known or forgotten."""

    node: str
    known: bool = Field(description="whether the node has a record now")
    events: list[NodeEventOut] = Field(description="its events while it had a record")
    forgotten: list[ForgottenNodeOut] = Field(description="each time it was forgotten")


class JobEventsOut(BaseModel):
    job: str = Field(description="the job's name within its VC")
    vc: str = ""
    state: str | None
    pending_reason: PendingReasonOut | None
    events: list[EventOut]


class LogFileOut(BaseModel):
    role: str
    index: int
    size: int = Field(description="bytes")


class NodeOut(_Open):
    name: str
    address: str
    cpu_m: int
    memory: int
    gpu: int = 0
    gpu_model: str | None = None
    labels: dict[str, str] = {}
    state: str = Field(description="ready | cordoned | draining | lost")
    heartbeat: float = 0.0
    state_reason: str = Field("", description="why it is in its state (by whom, GPU health)")
    executor: str = ""
    usage: dict[str, Any] = Field({}, description="the agent's last usage report")
    events: list[NodeEventOut] | None = Field(None, description="GET /nodes/{name} only")
    affected_jobs: list[str] | None = Field(
        None,
        description="cordon/drain/uncordon answers: jobs with tasks on the node (a drain "
        "requeues them), as far as the caller may see them",
    )
    affected_other_jobs: int | None = Field(None, description="how many jobs of other VCs")


class VcOut(_Open):
    name: str
    guarantee: ResourcesOut
    max: ResourcesOut | None = None
    can_borrow: bool
    used: ResourcesOut
    borrowed: ResourcesOut = Field(description="max(0, used - guarantee) per resource")
    jobs_running: int = 0
    jobs_queued: int = 0


class StatusOut(_Open):
    cluster: str
    nodes: dict[str, int] = Field(description="nodes by state")
    jobs: dict[str, int] = Field(description="jobs by state")
    capacity: ResourcesOut
    allocated: ResourcesOut


class WhoAmI(BaseModel):
    name: str
    role: str = Field(description="admin | user | agent")
    vcs: list[str]
    operates: list[str] = Field(
        default_factory=list,
        description="VCs where this user token is the operator: it may stop and delete"
        " every job there, not only its own",
    )


class Health(BaseModel):
    status: str


class TokenOut(BaseModel):
    """A token's public facts; the secret is never shown after creation."""

    name: str
    role: str = Field(description="admin | user | agent")
    vcs: list[str]
    created: float = Field(description="seconds since the epoch")
    expires: float = Field(description="seconds since the epoch")
    expired: bool


class RotateIn(BaseModel):
    """Options of a rotation."""

    model_config = ConfigDict(extra="forbid")
    ttl_days: float | None = Field(
        None, gt=0, le=36500, description="lifetime of the new secret; default api.token_ttl_days"
    )


class TokenSecretOut(TokenOut):
    """A token with its new secret: the only time the secret is shown."""

    token: str = Field(description="the secret; send it as 'Authorization: Bearer <token>'")
