"""The pasture job spec (pydantic v2 models) and its conversion to the core's types.

Shape (YAML or JSON)::

    name: mnist-ddp            # [a-z0-9-], 1..63 chars, unique in the cluster
    vc: default                # virtual cluster charged
    priority: normal           # int 0..100 or opportunistic|low|normal|high|critical
    image: localhost/pasture-base:bookworm   # default image of every role
    roles:                     # declaration order = rank order
      ps:     {replicas: 1, resources: {cpu: 1, memory: 1Gi}, command: "python3 ps.py"}
      worker: {replicas: 2, resources: {cpu: 2, memory: 4Gi, gpu: 1}, command: "..."}
    retry: {max_attempts: 3, retry_on_exit_codes: [...] | fail_on_exit_codes: [...]}
    policies: {on_task_failure: restart_job | fail_job, completion: {role: worker, when: all},
               on_events: [{event: task_completed, action: complete_job, role: worker}]}
    ttl_after_finished: 3600   # seconds a finished job's records are kept (default: settings)
    # per role: completion: {min_succeeded: 1, min_failed: 2}, max_task_retries: 3,
    #           depends_on: [ps]   (see docs/jobs.md, "Lifecycle")
    mounts: [{source: datasets/mnist, target: /data}]   # paths inside the cluster share
    env: {KEY: value}
    mpi: false

Units after validation: cpu in millicores, memory in bytes, gpu whole devices.
Unknown fields are errors. See :func:`scheduler.spec.load_job_spec` for parsing text.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from scheduler.core.model import Job, PriorityClass, Resources, TaskRole
from scheduler.spec.quantity import format_cpu, parse_cpu, parse_memory

# Limits beyond which a request is a typo rather than a machine (per task).
MAX_CPU_M = 1024 * 1000  # 1024 cores
MAX_MEMORY = 64 * 2**40  # 64 TiB
MAX_GPU = 64
MAX_REPLICAS = 10_000
MAX_TTL_S = 10 * 365 * 86400  # ttl_after_finished: ten years
NAME_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
ROLE_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResourceSpec(_Model):
    """Per-task request: cpu (millicores), memory (bytes), gpu (devices), gpu_model."""

    cpu: int = Field(1000, description="millicores; accepts 2, 0.5, '500m'")
    memory: int = Field(2**30, description="bytes; accepts '4Gi', '4096M', 1073741824")
    gpu: int = Field(0, description="whole GPU devices on one node")
    gpu_model: str | None = None

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, v: object) -> int:
        return parse_cpu(v)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: object) -> int:
        return parse_memory(v)

    @field_validator("cpu")
    @classmethod
    def _cpu_range(cls, v: int) -> int:
        if v <= 0 or v > MAX_CPU_M:
            raise ValueError(
                f"expected more than 0 and at most {MAX_CPU_M // 1000} cores, got {v} millicores"
            )
        return v

    @field_validator("memory")
    @classmethod
    def _memory_range(cls, v: int) -> int:
        if v <= 0 or v > MAX_MEMORY:
            raise ValueError(f"expected more than 0 and at most 64Ti bytes, got {v} bytes")
        return v

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected a whole number of GPUs, got {v!r}")
        if v < 0 or v > MAX_GPU:
            raise ValueError(f"expected 0..{MAX_GPU} GPUs per task, got {v}")
        return v

    @field_serializer("cpu")
    def _dump_cpu(self, v: int) -> str:
        # '2' / '500m': dumping and validating again gives the same millicores.
        return format_cpu(v)

    def to_core(self) -> Resources:
        return Resources(cpu_m=self.cpu, memory=self.memory, gpu=self.gpu)


class RoleCompletionSpec(_Model):
    """When this role's tasks end the job (OpenPAI v2 ``completion.minSucceededInstances`` /
    ``minFailedInstances``, v1 ``minSucceededTaskCount`` / ``minFailedTaskCount``; the
    FrameworkController completion policy).

    min_succeeded: the job succeeds as soon as this many tasks of the role succeeded (its
        other tasks are stopped). None: no early success; the job succeeds when every task
        of every role has ended within its failure tolerance.
    min_failed: the job's attempt fails as soon as this many tasks of the role failed
        (then ``retry`` decides). None: 1.
    """

    min_succeeded: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    min_failed: int | None = Field(None, ge=1, le=MAX_REPLICAS)


class RoleSpec(_Model):
    """One task role: ``replicas`` tasks each requesting ``resources`` and running ``command``.

    Lifecycle fields (semantics in :mod:`scheduler.lifecycle`): ``completion`` (see
    :class:`RoleCompletionSpec`), ``max_task_retries`` (a failed task of this role is
    restarted in place up to this many times before its failure counts; None = 0, or
    ``retry.max_attempts - 1`` for an ``on_events`` ``restart_task`` rule) and
    ``depends_on`` (roles whose tasks must all be running before this role's tasks start).
    """

    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    resources: ResourceSpec = ResourceSpec()
    command: str = Field(min_length=1)
    image: str | None = None
    min_available: int | None = Field(None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    ports: list[str] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    completion: RoleCompletionSpec | None = None
    max_task_retries: int | None = Field(None, ge=0, le=100)
    depends_on: list[str] = Field(default_factory=list)

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: object) -> object:
        if isinstance(v, list):  # a list of lines runs as one shell script
            return "\n".join(str(x) for x in v)
        return v

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]*$", name):
                raise ValueError(f"port names must be identifiers, got {name!r}")
        if len(set(v)) != len(v):
            raise ValueError(f"port names must be unique, got {v}")
        return v

    @model_validator(mode="after")
    def _min_available(self) -> RoleSpec:
        if self.min_available is not None and self.min_available > self.replicas:
            raise ValueError(
                f"min_available ({self.min_available}) exceeds replicas ({self.replicas})"
            )
        c = self.completion
        for what in ("min_succeeded", "min_failed"):
            n = getattr(c, what) if c is not None else None
            if n is not None and n > self.replicas:
                raise ValueError(
                    f"completion.{what}: expected at most replicas ({self.replicas}), got {n}"
                )
        return self


class RetrySpec(_Model):
    """Retry policy of a job attempt that failed.

    max_attempts: attempts that may fail before the job fails (1 = no retry).
    retry_on_exit_codes: when given, only these exit codes are retried.
    fail_on_exit_codes: these exit codes fail the job at once (ignored when
        retry_on_exit_codes is given). Node loss is always retryable.
    retry_on: when given, only failures of these diagnosis classes are retried
        (``[node_lost, nccl_error]``; see scheduler/diagnosis_rules.yaml and
        docs/operations.md); a failure also retries when retry_on_exit_codes names its code.
    """

    max_attempts: int = Field(1, ge=1, le=100)
    retry_on_exit_codes: list[int] | None = None
    fail_on_exit_codes: list[int] = Field(default_factory=list)
    retry_on: list[str] | None = None

    def retryable(self, exit_code: int | None, diagnosis: str | None = None) -> bool:
        """Whether a failure with ``exit_code`` (None = infrastructure failure) and
        diagnosis class ``diagnosis`` (:mod:`scheduler.diagnosis`) may retry."""
        if exit_code is None:
            return True
        if self.retry_on is not None:
            return diagnosis in self.retry_on or exit_code in (self.retry_on_exit_codes or [])
        if self.retry_on_exit_codes is not None:
            return exit_code in self.retry_on_exit_codes
        return exit_code not in self.fail_on_exit_codes


class CompletionSpec(_Model):
    """The job succeeds when ``all`` / ``any`` task(s) of ``role`` succeeded; the rest are
    stopped."""

    role: str
    when: Literal["all", "any"] = "all"


EventName = Literal["task_completed", "task_failed", "task_evicted", "unknown"]
ActionName = Literal["complete_job", "restart_job", "restart_task", "fail_job", "terminate_job"]


class EventPolicySpec(_Model):
    """One Volcano-style lifecycle policy: when ``event`` happens to a task of ``role`` (any
    role when None), take ``action`` (Volcano Job ``policies``: TaskCompleted, PodFailed,
    PodEvicted, Unknown -> CompleteJob, RestartJob, RestartTask, AbortJob, TerminateJob).
    Semantics of each event and action: :mod:`scheduler.lifecycle`."""

    event: EventName
    action: ActionName
    role: str | None = None


class PoliciesSpec(_Model):
    """on_task_failure: restart_job (stop the gang; retry per ``retry``) or fail_job (fail at
    once, no retry). completion: see :class:`CompletionSpec` (default: every task of every
    role must succeed). on_events: see :class:`EventPolicySpec`; the first rule that matches
    an event wins over the defaults. min_succeeded: successes over all roles that end the
    job (Volcano ``minSuccess``)."""

    on_task_failure: Literal["restart_job", "fail_job"] = "restart_job"
    completion: CompletionSpec | None = None
    on_events: list[EventPolicySpec] = Field(default_factory=list, max_length=64)
    min_succeeded: int | None = Field(
        None,
        ge=1,
        le=MAX_REPLICAS,
        description="the job succeeds once this many of its tasks (any roles) succeeded "
        "(Volcano spec.minSuccess)",
    )


class MountSpec(_Model):
    """A directory of the cluster share mounted into a task's container at ``target``
    (container executor; the process executor reads the share at PASTURE_SHARE_DIR)."""

    source: str = ""
    target: str

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"expected a path relative to the share without '..', got {v!r}")
        return v

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"expected an absolute path, got {v!r}")
        return v


_PRIORITY_NAMES = {p.name.lower(): int(p) for p in PriorityClass}


def _no_dependency_cycle(roles: dict[str, RoleSpec]) -> None:
    """Raise ValueError naming a cycle in the roles' ``depends_on``."""
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name) :] + [name]
            raise ValueError(f"roles: depends_on has a cycle: {' -> '.join(cycle)}")
        state[name] = 1
        for dep in roles[name].depends_on:
            visit(dep, path + [name])
        state[name] = 2

    for name in roles:
        visit(name, [])


class JobSpec(_Model):
    """A job as submitted (see the module docstring for the shape)."""

    name: str = Field(pattern=NAME_RE)
    vc: str = "default"
    priority: int = int(PriorityClass.NORMAL)
    image: str | None = None
    roles: dict[str, RoleSpec] = Field(min_length=1)
    retry: RetrySpec = RetrySpec()
    policies: PoliciesSpec = PoliciesSpec()
    mounts: list[MountSpec] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    mpi: bool = False
    preemptible: bool = True
    estimated_duration_s: float | None = Field(None, gt=0)
    ttl_after_finished: int | None = Field(
        None,
        ge=0,
        le=MAX_TTL_S,
        description="seconds a finished job's records are kept; None: the default",
    )

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, v: object) -> object:
        if isinstance(v, str) and v.lower() in _PRIORITY_NAMES:
            return _PRIORITY_NAMES[v.lower()]
        if isinstance(v, str):
            raise ValueError(
                f"expected an int 0..100 or one of {sorted(_PRIORITY_NAMES)}, got {v!r}"
            )
        return v

    @field_validator("priority")
    @classmethod
    def _priority_range(cls, v: int) -> int:
        if not 0 <= v <= 100:
            raise ValueError(f"expected 0..100, got {v}")
        return v

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: dict[str, RoleSpec]) -> dict[str, RoleSpec]:
        for name in v:
            if not re.match(ROLE_RE, name):
                raise ValueError(f"role names must match {ROLE_RE}, got {name!r}")
        total = sum(r.replicas for r in v.values())
        if total > MAX_REPLICAS:
            raise ValueError(f"at most {MAX_REPLICAS} tasks per job, got {total}")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not ENV_RE.match(key):
                raise ValueError(
                    f"environment variable names must match [A-Za-z_][A-Za-z0-9_]*, got {key!r}"
                )
        return v

    @model_validator(mode="after")
    def _completion_role(self) -> JobSpec:
        c = self.policies.completion
        if c is not None and c.role not in self.roles:
            raise ValueError(
                f"policies.completion.role: unknown role {c.role!r}; roles are {list(self.roles)}"
            )
        for i, rule in enumerate(self.policies.on_events):
            if rule.role is not None and rule.role not in self.roles:
                raise ValueError(
                    f"policies.on_events[{i}].role: unknown role {rule.role!r}; "
                    f"roles are {list(self.roles)}"
                )
        for name, role in self.roles.items():
            for dep in role.depends_on:
                if dep not in self.roles or dep == name:
                    raise ValueError(
                        f"roles.{name}.depends_on: expected other roles of this job "
                        f"{[r for r in self.roles if r != name]}, got {dep!r}"
                    )
        _no_dependency_cycle(self.roles)
        n = self.policies.min_succeeded
        if n is not None and n > self.task_count():
            raise ValueError(
                f"policies.min_succeeded: expected at most the job's {self.task_count()} "
                f"tasks, got {n}"
            )
        return self

    def role_image(self, role: str) -> str | None:
        """The role's image, else the job's."""
        return self.roles[role].image or self.image

    def task_count(self) -> int:
        return sum(r.replicas for r in self.roles.values())

    def to_core(
        self,
        *,
        submit_time: float = 0.0,
        user: str = "",
        attempt: int = 1,
        attained_service: float = 0.0,
    ) -> Job:
        """The core's view of this job (resources in millicores / bytes / devices)."""
        return Job(
            name=self.name,
            vc=self.vc,
            roles=tuple(
                TaskRole(
                    name=name,
                    replicas=r.replicas,
                    resources=r.resources.to_core(),
                    command=r.command,
                    image=r.image or self.image,
                    min_available=r.min_available,
                    node_selector=dict(r.node_selector),
                    gpu_model=r.resources.gpu_model,
                )
                for name, r in self.roles.items()
            ),
            priority=self.priority,
            submit_time=submit_time,
            user=user,
            attempt=attempt,
            estimated_duration_s=self.estimated_duration_s,
            attained_service=attained_service,
            preemptible=self.preemptible,
        )
