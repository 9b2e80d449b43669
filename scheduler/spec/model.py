"""The pasture job spec (pydantic v2 models) and its conversion to the core's types.

Shape (YAML or JSON)::

    name: mnist-ddp            # [a-z0-9-], 1..63 chars, unique in the cluster
    vc: default                # virtual cluster charged (must exist)
    priority: normal           # int 0..100 or opportunistic|low|normal|high|critical
    image: localhost/pasture-base:bookworm   # default image of every role
    roles:                     # declaration order = rank order
      ps:     {replicas: 1, resources: {cpu: 1, memory: 1Gi}, command: "python3 ps.py"}
      worker: {replicas: 2, resources: {cpu: 2, memory: 4Gi, gpu: 1}, command: "...",
               completion: {min_succeeded: 1}, max_task_retries: 2, shm: 1Gi,
               depends_on: [ps]}
    min_available: 2           # job-wide gang minimum (Volcano spec.minAvailable)
    min_succeeded: 2           # job succeeds once this many tasks (any role) succeeded
    retry: {max_attempts: 3, retry_on_exit_codes: [...] | fail_on_exit_codes: [...]}
    policies: {on_task_failure: restart_job | fail_job, completion: {role: worker, when: all},
               on_events: [{event: task_completed, action: complete_job, role: worker}]}
    mounts: [{source: datasets/mnist, target: /data}]   # share paths; read_only: false to write
    code_dir: code/mnist       # share dir copied into each task's working dir ./code
    env: {KEY: value}
    mpi: false                 # write an MPI hostfile
    mpi_host: {master: m, worker: w}   # tasks of m get MPI_HOST = w's hosts (Volcano mpi)
    ssh: false                 # ssh between the job's tasks (implied by mpi)
    preemptible: true          # false: no waiting job preempts it (VC reclaim still may)
    checkpoint_interval_s: 1800  # it saves and resumes its state every 1800 s of running
                               # (null: undeclared, a preemption loses the whole attempt)
    estimated_duration_s: 7200 # run-time estimate (backfill, SRTF policies)
    ttl_after_finished: 86400  # seconds after the job ended before its records go
    secrets: {TOKEN: value}    # or [TOKEN] + `job submit --secret TOKEN=...`; stored as
                               # names, values sealed; tasks see $PASTURE_SECRET_TOKEN

Units after validation: cpu in millicores, memory and shm in bytes, gpu whole devices.
Unknown fields are errors. See :func:`scheduler.spec.load_job_spec` for parsing text and
docs/compat.md for what each field means at run time and which format fields map to it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from scheduler.core.model import Job, PriorityClass, TaskRole
from scheduler.core.resources import Resources
from scheduler.jobref import job_key
from scheduler.spec.errors import pattern_rule
from scheduler.spec.policies import (
    MAX_COMMAND,
    MountSpec,
    MpiHostSpec,
    PoliciesSpec,
    RetrySpec,
    RoleCompletionSpec,
    VolumeSpec,
    check_env,
    check_name,
    check_share_path,
    check_text,
)
from scheduler.spec.quantity import format_cpu, parse_cpu, parse_memory
from scheduler.spec.secrets import MAX_SECRETS
from scheduler.spec.secrets import NAME_RE as SECRET_NAME_RE

# Limits beyond which a request is a typo rather than a machine (per task).
MAX_CPU_M = 1024 * 1000  # 1024 cores
MAX_MEMORY = 64 * 2**40  # 64 TiB
MAX_GPU = 64
MAX_REPLICAS = 10_000
MAX_ROLES = 64
MAX_MOUNTS = 32
MAX_TTL_S = 366 * 86400
NAME_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
ROLE_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"
VC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
PORT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")
IMAGE_RE = re.compile(r"[^\s]{1,512}")
LABEL_RE = re.compile(r"[A-Za-z0-9._/-]{1,253}")
LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9._-]{0,63}")
MAX_ARGS = 1024
MAX_PATH = 1024
EXECUTOR_LABEL = "pasture.io/executor"
"""Node label naming the agent's executor kind (process, container, kubernetes)."""
ENTRYPOINT_LABEL = "pasture.io/image-entrypoint"
"""Node label (value ``"true"``) that agents whose executor can run an image's own
ENTRYPOINT (container, kubernetes) register with; an ``entrypoint: true`` role's core view
selects it, so the core's ``node-selector`` filter, the submit-time fit check
(spec/fit.py) and the pending reasons all apply to it (Nomad's driver attributes)."""


def env_name(name: str) -> str:
    """A role name as it appears inside environment variable names (``a-b`` -> ``A_B``):
    two roles whose names give the same ``env_name`` are refused."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def check_image(v: str | None) -> str | None:
    """An image reference (a role's or the job's): non-empty, no whitespace, <= 512 chars.

    Raises ValueError naming what was given."""
    if v is not None and not IMAGE_RE.fullmatch(v):
        raise ValueError(f"expected an image reference without spaces, got {v!r}")
    return None if v is None else check_name(v, "image")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResourceSpec(_Model):
    """Per-task request: cpu (millicores), memory (bytes), gpu (devices), gpu_model."""

    cpu: int = Field(1000, description="millicores; accepts 2, 0.5, '500m'")
    memory: int = Field(2**30, description="bytes; accepts '4Gi', '4096M', 1073741824")
    gpu: int = Field(0, description="whole GPU devices on one node")
    gpu_model: str | None = Field(None, min_length=1, max_length=253)

    @field_validator("gpu_model")
    @classmethod
    def _gpu_model(cls, v: str | None) -> str | None:
        return None if v is None else check_name(v, "gpu_model")

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


class RoleSpec(_Model):
    """One task role: ``replicas`` tasks each requesting ``resources`` and running ``command``.

    Besides the basics: ``min_available`` (gang minimum of this role: the job starts when
    this many of its tasks fit; the rest start when they fit), ``completion`` (per-role
    success/failure counts, :class:`RoleCompletionSpec`), ``max_task_retries`` (a failed task
    of this role is restarted alone up to this many times before the failure counts),
    ``shm`` (bytes of /dev/shm), ``depends_on`` (roles whose tasks must all be running
    before this role's tasks start).

    ``command`` is a shell script run by ``/bin/sh -c`` (the image's ENTRYPOINT is not
    run). ``entrypoint: true`` instead runs the image's own ENTRYPOINT (Kubernetes: a
    container without ``command``) with ``args`` (replacing the image's CMD; omitted = the
    image's CMD). Only container and kubernetes executor nodes can run such a role: they
    carry the label :data:`ENTRYPOINT_LABEL`, which the role's core view selects.
    ``working_dir``: directory the task starts in (default: the job's directory; for an
    entrypoint role, the image's WORKDIR).
    """

    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    resources: ResourceSpec = ResourceSpec()
    entrypoint: bool = False
    command: str | None = Field(None, min_length=1, max_length=MAX_COMMAND, validate_default=True)
    args: list[str] | None = Field(None, max_length=MAX_ARGS)
    working_dir: str | None = Field(None, min_length=1, max_length=MAX_PATH)
    image: str | None = Field(None, min_length=1, max_length=512)
    min_available: int | None = Field(None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    ports: list[str] = Field(default_factory=list, max_length=16)
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=32)
    completion: RoleCompletionSpec | None = None
    max_task_retries: int | None = Field(None, ge=0, le=100)
    shm: int | None = Field(None, description="bytes of /dev/shm; accepts '64Mi'")
    depends_on: list[str] = Field(default_factory=list, max_length=64)
    elastic: bool = False
    throughput: dict[int, float] | None = Field(None, max_length=64)

    @model_validator(mode="before")
    @classmethod
    def _elastic_range(cls, data: object) -> object:
        """``replicas: {min: M, max: N}`` (issue 29): an elastic role of at most N and at
        least M replicas; stored as ``replicas: N, min_available: M, elastic: true``."""
        if not isinstance(data, dict) or not isinstance(data.get("replicas"), dict):
            return data
        rng = data["replicas"]
        if set(rng) != {"min", "max"}:
            raise ValueError(f"replicas: expected an int or {{min: M, max: N}}, got {rng!r}")
        lo, hi = rng["min"], rng["max"]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi)):
            raise ValueError(f"replicas: min and max must be integers, got {rng!r}")
        if not 1 <= lo <= hi:
            raise ValueError(f"replicas: expected 1 <= min <= max, got min {lo}, max {hi}")
        if data.get("min_available") is not None:
            raise ValueError("replicas: {min, max} already sets the minimum; drop min_available")
        return {**data, "replicas": hi, "min_available": lo, "elastic": True}

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: object) -> object:
        if isinstance(v, list):  # a list of lines runs as one shell script
            return "\n".join(str(x) for x in v)
        return v

    @field_validator("command")
    @classmethod
    def _command_or_entrypoint(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            check_text(v, "")
        entrypoint = info.data.get("entrypoint", False)
        if entrypoint and v is not None:
            raise ValueError(
                "give either command (a shell script) or entrypoint: true (the image's own "
                "ENTRYPOINT, with args), not both"
            )
        if not entrypoint and v is None:
            raise ValueError(
                "a role needs a command, or entrypoint: true to run its image's ENTRYPOINT"
            )
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return check_image(v)

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and sum(len(a) for a in v) > MAX_COMMAND:
            raise ValueError(f"args: at most {MAX_COMMAND} characters in all")
        for i, a in enumerate(v or ()):
            check_text(a, f"args[{i}]")
        return v

    @field_validator("working_dir")
    @classmethod
    def _working_dir(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or any(ord(c) < 32 for c in v)):
            raise ValueError(f"expected an absolute path without control characters, got {v!r}")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[str]) -> list[str]:
        for name in v:
            if not PORT_RE.fullmatch(name):
                raise ValueError(f"port names must be identifiers (<= 63 chars), got {name!r}")
        mangled = [n.upper() for n in v]
        if len(set(mangled)) != len(v):
            raise ValueError(f"port names must be unique (ignoring case), got {v}")
        return v

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not LABEL_RE.fullmatch(key) or not LABEL_VALUE_RE.fullmatch(value):
                raise ValueError(
                    f"node_selector: expected label key/value of [A-Za-z0-9._/-], got {key!r}: "
                    f"{value!r}"
                )
        return v

    @field_validator("shm", mode="before")
    @classmethod
    def _shm(cls, v: object) -> object:
        return None if v is None else parse_memory(v)

    @field_validator("shm")
    @classmethod
    def _shm_range(cls, v: int | None) -> int | None:
        if v is not None and not 0 < v <= MAX_MEMORY:
            raise ValueError(f"expected more than 0 and at most 64Ti bytes, got {v} bytes")
        return v

    @model_validator(mode="after")
    def _counts(self) -> RoleSpec:
        if self.args is not None and not self.entrypoint:
            raise ValueError(
                "args: only with entrypoint: true (they replace the image's CMD); put a "
                "command's arguments in command"
            )
        if self.min_available is not None and self.min_available > self.replicas:
            raise ValueError(
                f"min_available ({self.min_available}) exceeds replicas ({self.replicas})"
            )
        tp = self.throughput
        if tp is not None:
            if not self.elastic:
                raise ValueError(
                    "throughput: only for an elastic role (replicas: {min, max}); got it on "
                    f"a role of {self.replicas} fixed replicas"
                )
            if 1 not in tp:
                raise ValueError(
                    f"throughput: expected the rate at 1 replica among the keys, got {sorted(tp)}"
                )
            for k, x in tp.items():
                if not 1 <= k <= self.replicas:
                    raise ValueError(
                        f"throughput: expected replica counts 1..{self.replicas} as keys, got {k}"
                    )
                if not (x > 0 and math.isfinite(x)):
                    raise ValueError(
                        f"throughput: expected a finite rate > 0 at {k} replicas, got {x!r}"
                    )
        c = self.completion
        for what, n in (
            ("min_succeeded", c.min_succeeded if c else None),
            ("min_failed", c.min_failed if c else None),
        ):
            if n is not None and n > self.replicas:
                raise ValueError(f"completion.{what} ({n}) exceeds replicas ({self.replicas})")
        return self


_PRIORITY_NAMES = {p.name.lower(): int(p) for p in PriorityClass}


def speedup_table(rates: Mapping[int, float]) -> tuple[float, ...]:
    """The core's ``Job.scaling`` from rates (steps or samples per second, > 0) at some
    replica counts (``{replicas: rate}``, counts >= 1): ``(speedup(1), ..., speedup(K))``,
    K the largest count, speedup(n) = rate(n) / rate(1), linear between the counts given.
    Without a rate at 1 replica, rate(1) = the smallest rate(n) / n (the job is taken to
    scale linearly below the smallest count measured; one count alone gives the linear
    table). () for no rates.
    """
    if not rates:
        return ()
    pts = sorted(rates.items())
    base = rates[1] if 1 in rates else min(x / n for n, x in pts)
    if pts[0][0] != 1:
        pts.insert(0, (1, base))
    out: list[float] = []
    for (n0, x0), (n1, x1) in zip(pts, pts[1:], strict=False):
        for n in range(n0, n1):
            out.append((x0 + (x1 - x0) * (n - n0) / (n1 - n0)) / base)
    out.append(pts[-1][1] / base)
    return tuple(out)


class JobSpec(_Model):
    """A job as submitted (see the module docstring for the shape)."""

    name: str = Field(pattern=NAME_RE)
    vc: str = "default"
    priority: int = int(PriorityClass.NORMAL)
    image: str | None = Field(None, min_length=1, max_length=512)
    roles: dict[str, RoleSpec] = Field(min_length=1, max_length=MAX_ROLES)
    min_available: int | None = Field(None, ge=1)
    min_succeeded: int | None = Field(None, ge=1)
    retry: RetrySpec = RetrySpec()
    policies: PoliciesSpec = PoliciesSpec()
    mounts: list[MountSpec] = Field(default_factory=list, max_length=MAX_MOUNTS)
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=MAX_MOUNTS)
    code_dir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    mpi: bool = False
    mpi_host: MpiHostSpec | None = None
    ssh: bool = False
    preemptible: bool = True
    estimated_duration_s: float | None = Field(None, gt=0, le=10 * 366 * 86400)
    checkpoint_interval_s: float | None = Field(None, gt=0, le=10 * 366 * 86400)
    ttl_after_finished: int | None = Field(None, ge=0, le=MAX_TTL_S)
    # names only: the values are split off at parse time and sealed (spec/secrets.py)
    secrets: list[str] = Field(default_factory=list, max_length=MAX_SECRETS)

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(SECRET_NAME_RE, name):
                raise ValueError(f"expected secret names of [A-Za-z0-9_], got {name!r}")
        return sorted(set(v))

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

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: list[VolumeSpec]) -> list[VolumeSpec]:
        names = [x.name for x in v]
        if len(set(names)) != len(names):
            raise ValueError(f"volume names must be unique, got {names}")
        return v

    @field_validator("vc")
    @classmethod
    def _vc(cls, v: str) -> str:
        if not VC_RE.fullmatch(v):
            raise ValueError(f"expected a VC name of [A-Za-z0-9_.-] (<= 63 chars), got {v!r}")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return check_image(v)

    @field_validator("code_dir")
    @classmethod
    def _code_dir(cls, v: str | None) -> str | None:
        return None if v is None else check_share_path(v, "code_dir")

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: dict[str, RoleSpec]) -> dict[str, RoleSpec]:
        seen: dict[str, str] = {}
        for name in v:
            if not re.fullmatch(ROLE_RE, name):
                raise ValueError(f"role names are {pattern_rule(ROLE_RE)}; got {name!r}")
            key = env_name(name)
            if key in seen:
                raise ValueError(
                    f"roles {seen[key]!r} and {name!r} give the same environment variable "
                    f"names (…_{key}_…); rename one"
                )
            seen[key] = name
        total = sum(r.replicas for r in v.values())
        if total > MAX_REPLICAS:
            raise ValueError(f"at most {MAX_REPLICAS} tasks per job, got {total}")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    def scaling(self) -> tuple[float, ...]:
        """The core's ``Job.scaling`` from the elastic role's declared ``throughput``
        (issue 36): ``(speedup(1), ..., speedup(K))`` with K its largest declared replica
        count, speedup(n) = rate(n) / rate(1), linear between declared counts (the core
        repeats the last step beyond K). () when no role declares it: the core then
        treats the job as scaling linearly."""
        for r in self.roles.values():
            if r.throughput:
                return speedup_table(r.throughput)
        return ()

    @model_validator(mode="after")
    def _references(self) -> JobSpec:
        roles = list(self.roles)
        declared = [n for n, r in self.roles.items() if r.throughput]
        if len(declared) > 1:
            raise ValueError(
                "throughput: expected it on one elastic role (the job's speedup table), got "
                f"it on {declared}"
            )
        c = self.policies.completion
        if c is not None and c.role not in self.roles:
            raise ValueError(
                f"policies.completion.role: unknown role {c.role!r}; roles are {roles}"
            )
        for i, rule in enumerate(self.policies.on_events):
            if rule.role is not None and rule.role not in self.roles:
                raise ValueError(
                    f"policies.on_events[{i}].role: unknown role {rule.role!r}; roles are {roles}"
                )
        for name, role in self.roles.items():
            if role.entrypoint and not (role.image or self.image):
                raise ValueError(
                    f"roles.{name}.entrypoint: runs an image's ENTRYPOINT, so the role (or the "
                    "job) needs an image"
                )
            for dep in role.depends_on:
                if dep not in self.roles or dep == name:
                    raise ValueError(
                        f"roles.{name}.depends_on: expected other roles of {roles}, got {dep!r}"
                    )
        self._no_cycle()
        if self.mpi_host is not None and self.mpi_host.worker not in self.roles:
            raise ValueError(
                f"mpi_host.worker: unknown role {self.mpi_host.worker!r}; roles are {roles}"
            )
        if self.min_succeeded is not None and self.min_succeeded > self.task_count():
            raise ValueError(
                f"min_succeeded: {self.min_succeeded} exceeds the job's {self.task_count()} tasks"
            )
        if self.min_available is not None:
            floor = sum(r.min_available or 0 for r in self.roles.values())
            if self.min_available > self.task_count():
                raise ValueError(
                    f"min_available: {self.min_available} exceeds the job's "
                    f"{self.task_count()} tasks: write at most {self.task_count()}"
                )
            if self.min_available < floor:
                raise ValueError(
                    f"min_available: {self.min_available} is below the roles' own minima "
                    f"({floor} in all): write at least {floor}"
                )
        return self

    def _no_cycle(self) -> None:
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                raise ValueError(
                    f"roles.{name}.depends_on: forms a cycle: {' -> '.join([*path, name])}"
                )
            state[name] = 1
            for dep in self.roles[name].depends_on:
                visit(dep, [*path, name])
            state[name] = 2

        for name in self.roles:
            visit(name, [])

    def role_image(self, role: str) -> str | None:
        """The role's image, else the job's."""
        return self.roles[role].image or self.image

    def task_count(self) -> int:
        """Number of tasks the spec declares (the sum of its roles' replicas)."""
        return sum(r.replicas for r in self.roles.values())

    def role_minima(self) -> dict[str, int | None]:
        """Each role's gang minimum as the core sees it (``TaskRole.min_available``; None =
        all replicas).

        Without a job-wide ``min_available`` these are the roles' own. With one (Volcano's
        ``spec.minAvailable``: the job starts once that many of its tasks, of any roles, can
        run), it is spread over the roles: each role first gets its own minimum, then each
        role without one gets 1 task in declaration order while the count lasts (a role
        may get 0: none of its tasks is in the gang), then the remainder fills roles up to
        their replicas in declaration order. This is one of the task sets Volcano would
        accept; the job starts when that set fits, and the remaining replicas start as room
        frees up (scheduler/core/grow.py)."""
        if self.min_available is None:
            return {name: r.min_available for name, r in self.roles.items()}
        budget = self.min_available  # >= the roles' own minima (validated)
        out = {name: r.min_available or 0 for name, r in self.roles.items()}
        budget -= sum(out.values())
        for name, r in self.roles.items():  # then one task of each other role, in order
            if r.min_available is None and budget > 0:
                out[name] = 1
                budget -= 1
        for name, r in self.roles.items():
            extra = min(r.replicas - out[name], budget)
            out[name] += extra
            budget -= extra
        return {name: out[name] for name in self.roles}

    def to_core(
        self,
        *,
        submit_time: float = 0.0,
        user: str = "",
        attempt: int = 1,
        attained_service: float = 0.0,
    ) -> Job:
        """The core's view of this job (resources in millicores / bytes / devices), named
        by its key (:func:`scheduler.jobref.job_key`: the store's name of the job)."""
        minima = self.role_minima()
        return Job(
            name=job_key(self.vc, self.name),
            vc=self.vc,
            roles=tuple(
                TaskRole(
                    name=name,
                    replicas=r.replicas,
                    resources=r.resources.to_core(),
                    command=r.command or "",
                    image=r.image or self.image,
                    min_available=minima[name],
                    node_selector=(
                        {**r.node_selector, ENTRYPOINT_LABEL: "true"}
                        if r.entrypoint
                        else dict(r.node_selector)
                    ),
                    gpu_model=r.resources.gpu_model,
                    elastic=r.elastic,
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
            scaling=self.scaling(),
            checkpoint_interval_s=self.checkpoint_interval_s,
        )
