"""Job- and role-level policy models of the pasture spec: retry, completion, event rules,
mounts and the shared string checks (caps on names, env, commands, paths).

Shapes (YAML)::

    retry: {max_attempts: 3, retry_on_exit_codes: [1] | fail_on_exit_codes: [2]}
    policies:
      on_task_failure: restart_job | fail_job
      completion: {role: worker, when: all | any}      # job-level shorthand (kept)
      on_events:                                        # Volcano-style event -> action rules
        - {event: task_completed, action: complete_job, role: worker}
    roles:
      worker:
        completion: {min_succeeded: 1, min_failed: 1}   # OpenPAI v2 per-role completion
    mounts: [{source: datasets/mnist, target: /data}]

Semantics of the rules are documented in docs/compat.md ("Spec fields for other formats");
the loop implements them.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_NAME = 63
MAX_ENV_VARS = 256
MAX_ENV_KEY = 128
MAX_ENV_VALUE = 32 * 1024
MAX_ENV_TOTAL = 256 * 1024
MAX_COMMAND = 64 * 1024
MAX_EXIT_CODES = 256
MAX_PATH = 1024
MAX_RULES = 64

ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")
"""Control characters a command or environment value may not hold: every C0 character
but tab, newline and carriage return (a script legitimately has those), and DEL. NUL above
all: no ``execve`` argument or environment string can hold it, so a task with one could
never start (issue 25)."""
_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_text(value: str, what: str) -> str:
    """A command, argument or environment value: refuses NUL and the other control
    characters of :data:`_CONTROL` (tab, newline and carriage return are allowed), naming
    the first one and its offset. Raises ValueError."""
    m = _CONTROL.search(value)
    if m:
        where = f"{what}: " if what else ""
        raise ValueError(
            f"{where}control character {m.group()!r} at offset {m.start()}; only tab, "
            "newline and carriage return may appear (NUL can never be passed to a process)"
        )
    return value


def check_name(value: str, what: str) -> str:
    """A one-line name or reference (image, GPU model...): no control character at all
    (tab and newline included). Raises ValueError."""
    m = _NAME_CONTROL.search(value)
    if m:
        raise ValueError(f"{what}: control character {m.group()!r} at offset {m.start()}")
    return value


class StrictModel(BaseModel):
    """Base of every spec model: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


RESERVED_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
"""Variables a job may not set: the executor gives each task its own GPUs through them
(on a node with the NVIDIA runtime, ``NVIDIA_VISIBLE_DEVICES=all`` in a task would expose
every GPU of the node, other tenants' included: the NVIDIA device plugin's documented
warning)."""


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Validate an environment mapping: at most 256 names matching ``[A-Za-z_][A-Za-z0-9_]*``
    of at most 128 characters, values of at most 32 KiB, 256 KiB in all, none of
    :data:`RESERVED_ENV`. Raises ValueError naming the variable."""
    if len(env) > MAX_ENV_VARS:
        raise ValueError(f"at most {MAX_ENV_VARS} environment variables, got {len(env)}")
    total = 0
    for key, value in env.items():
        if len(key) > MAX_ENV_KEY or not ENV_RE.fullmatch(key):
            raise ValueError(
                "environment variable names must match [A-Za-z_][A-Za-z0-9_]* "
                f"(at most {MAX_ENV_KEY} characters), got {key[:140]!r}"
            )
        if key.upper() in RESERVED_ENV:
            raise ValueError(
                f"environment variable {key}: set by pasture to the task's own GPUs; "
                f"a job may not set it (expected no {key}, got {value[:40]!r})"
            )
        check_text(value, f"environment variable {key}")
        if len(value) > MAX_ENV_VALUE:
            raise ValueError(
                f"environment variable {key}: at most {MAX_ENV_VALUE} characters, got {len(value)}"
            )
        total += len(key) + len(value)
    if total > MAX_ENV_TOTAL:
        raise ValueError(f"environment: at most {MAX_ENV_TOTAL} characters in all, got {total}")
    return env


def check_share_path(v: str, what: str) -> str:
    """A path relative to the cluster share: no leading '/', no '..', no ':' ',' or control
    characters (they would change a container runtime's ``-v`` option). Raises ValueError."""
    if len(v) > MAX_PATH:
        raise ValueError(f"{what}: at most {MAX_PATH} characters, got {len(v)}")
    if v.startswith("/") or ".." in v.split("/"):
        raise ValueError(f"{what}: expected a path relative to the share without '..', got {v!r}")
    _no_option_chars(v, what)
    return v


def _no_option_chars(v: str, what: str) -> None:
    bad = sorted({c for c in v if c in ":," or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(f"{what}: must not contain {bad!r} (':' ',' or control characters)")


class RetrySpec(StrictModel):
    """Retry policy of a job attempt that failed.

    max_attempts: attempts that may fail before the job fails (1 = no retry).
    retry_on_exit_codes: when given, only these exit codes are retried.
    fail_on_exit_codes: these exit codes fail the job at once (ignored when
        retry_on_exit_codes is given). Node loss is always retryable.
    Exit-code lists hold at most 256 codes, each 0..255.
    retry_on: when given, only failures of these diagnosis classes are retried
        (``[node_lost, nccl_error]``: scheduler/rules/diagnosis_rules.yaml, docs/operations.md);
        a failure also retries when retry_on_exit_codes names its code (issue 19).
    """

    max_attempts: int = Field(1, ge=1, le=100)
    retry_on_exit_codes: list[int] | None = Field(None, max_length=MAX_EXIT_CODES)
    fail_on_exit_codes: list[int] = Field(default_factory=list, max_length=MAX_EXIT_CODES)
    retry_on: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]] | None = Field(
        None, max_length=64
    )

    @field_validator("retry_on_exit_codes", "fail_on_exit_codes")
    @classmethod
    def _codes(cls, v: list[int] | None) -> list[int] | None:
        for code in v or ():
            if not 0 <= code <= 255:
                raise ValueError(f"exit codes are 0..255, got {code}")
        return v

    def retryable(self, exit_code: int | None, diagnosis: str | None = None) -> bool:
        """Whether a failure with ``exit_code`` (None = infrastructure failure) and
        diagnosis class ``diagnosis`` (:mod:`scheduler.rules.diagnosis`) may retry."""
        if exit_code is None:
            return True
        if self.retry_on is not None:
            return diagnosis in self.retry_on or exit_code in (self.retry_on_exit_codes or [])
        if self.retry_on_exit_codes is not None:
            return exit_code in self.retry_on_exit_codes
        return exit_code not in self.fail_on_exit_codes


class CompletionSpec(StrictModel):
    """Job-level shorthand: the job succeeds when ``all`` / ``any`` task(s) of ``role``
    succeeded; the rest are stopped. (``any`` equals the role's
    ``completion: {min_succeeded: 1}``.)"""

    role: str
    when: Literal["all", "any"] = "all"


class RoleCompletionSpec(StrictModel):
    """Per-role completion counts (OpenPAI v2 ``completion``; FrameworkLauncher's
    ApplicationCompletionPolicy).

    min_succeeded: the job succeeds (remaining tasks are stopped) as soon as this many
        tasks of the role succeeded. None: every task of every role must succeed.
    min_failed: the job fails (subject to ``retry``) as soon as this many tasks of the role
        failed. None: 1 (the first failure). -1: failures of this role never fail the job
        (OpenPAI's -1); the job then ends when every task has ended.
    """

    min_succeeded: int | None = Field(None, ge=1)
    min_failed: int | None = Field(None, ge=-1)

    @field_validator("min_failed")
    @classmethod
    def _min_failed(cls, v: int | None) -> int | None:
        if v == 0:
            raise ValueError("expected -1 (never) or at least 1, got 0")
        return v


EventName = Literal["task_completed", "task_failed", "task_evicted", "unknown"]
ActionName = Literal[
    "complete_job", "restart_job", "restart_task", "restart_role", "fail_job", "terminate_job"
]


MAX_AFTER_S = 30 * 86400.0
"""The longest ``EventRule.after_s`` (30 days, s)."""


class EventRule(StrictModel):
    """``on_events`` entry: when ``event`` happens to a task (of ``role``, or of any role),
    do ``action`` (Volcano ``LifecyclePolicy``: event -> action).

    Events: task_completed (a task exited 0), task_failed (exited non-zero),
    task_evicted (preempted, drained or its node lost), unknown (its state cannot be known).
    Actions: complete_job (succeed the job, stop the rest), restart_job (restart every task,
    one attempt of ``retry``), restart_task (restart only that task, within the role's
    ``max_task_retries``), restart_role (restart every task of that task's role in place,
    running ones included; one retry of ``retry`` like restart_job), fail_job (fail now, no
    retry), terminate_job (stop every task; the job ends stopped).
    ``after_s``: the action happens once the event has lasted this long (seconds since the
    task ended; for task_completed, since the role's last task ended), Volcano's policy
    ``timeout``; the job is held meanwhile (an event says until when). None: at once.
    """

    event: EventName
    action: ActionName
    role: str | None = None
    after_s: float | None = Field(default=None, gt=0, le=MAX_AFTER_S)


class PoliciesSpec(StrictModel):
    """on_task_failure: restart_job (stop the gang; retry per ``retry``) or fail_job (fail at
    once, no retry). completion: see :class:`CompletionSpec` (default: every task of every
    role must succeed). on_events: :class:`EventRule` list, first match wins; a matching
    rule overrides ``on_task_failure`` for that event."""

    on_task_failure: Literal["restart_job", "fail_job"] = "restart_job"
    completion: CompletionSpec | None = None
    on_events: list[EventRule] = Field(default_factory=list, max_length=MAX_RULES)


class MountSpec(StrictModel):
    """A directory of the cluster share mounted into a task's container at ``target``
    (container executor; the process executor reads the share at PASTURE_SHARE_DIR).
    ``source`` is relative to the share; ``target`` absolute; neither may hold ``..``,
    ``:``, ``,`` or control characters. Declared data is read-only unless ``read_only:
    false``: ``:ro`` for containers, ``readOnly: true`` on Kubernetes, a read-only bind
    mount in the process executor's mount namespace (where tasks run as their VC's user);
    a write there fails with EROFS (docs/jobs.md, "Mounts")."""

    source: str = ""
    target: str
    read_only: bool = True

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return check_share_path(v, "source")

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        return check_target(v)


class VolumeSpec(StrictModel):
    """A fresh directory of the job on the cluster share (Volcano ``volumeClaim``: a new
    PersistentVolumeClaim per job): ``jobs/<job>/volumes/<uid>/<name>`` (:func:`volume_dir`),
    created empty when a task of the job first starts, mounted at ``target`` (container
    executors) and named by ``PASTURE_VOLUME_<NAME>`` in every task's environment;
    removed when the loop deletes the finished job (its ttl) unless ``keep``. ``size``
    (bytes) is what the claim asked for: the share is one file system without per-directory
    quotas, so it is recorded, not enforced. ``name``: [a-z0-9-], 1..63."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    target: str
    size: int | None = Field(default=None, ge=0)
    keep: bool = False

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        return check_target(v)


def check_target(v: str) -> str:
    """A mount target inside a task: absolute, no ``..``, at most MAX_PATH characters and
    nothing a runtime would read as an option.

    Raises:
        ValueError: names what was expected and what was given.
    """
    if not v.startswith("/"):
        raise ValueError(f"expected an absolute path, got {v!r}")
    if ".." in v.split("/") or len(v) > MAX_PATH:
        raise ValueError(f"expected a path without '..' of at most {MAX_PATH} chars")
    _no_option_chars(v, "target")
    return v


def volume_dir(job: str, name: str, uid: str = "") -> str:
    """The share-relative directory of volume ``name`` of the submission ``uid`` of
    ``job``: ``jobs/<job>/volumes/<uid>/<name>`` (``jobs/<job>/volumes/<name>`` for a job
    stored before uids existed). The uid makes a claim fresh per submission: a job deleted
    and submitted again under its name, by anyone, never sees the old claim's files. A job
    name and a volume name are [a-z0-9-] and a uid is hex, so the path holds nothing else."""
    if uid and not re.fullmatch(r"[0-9a-f]{1,64}", uid):
        raise ValueError(f"job uid: expected hex digits, got {uid!r}")
    return f"jobs/{job}/volumes/{uid}/{name}" if uid else f"jobs/{job}/volumes/{name}"


class MpiHostSpec(StrictModel):
    """Volcano's mpi plugin (volcano-sh/volcano pkg/controllers/job/plugins/
    distributed-framework/mpi/mpi.go, ``OnPodCreate``): every task of role ``master`` gets
    ``MPI_HOST``, the comma-separated hosts of role ``worker``'s tasks, for ``mpiexec
    --host ${MPI_HOST}``. Volcano writes ``<job>-<worker>-<i>.<job>`` DNS names; pasture has
    no cluster DNS, so the hosts are the tasks' addresses (as in ``VC_<TASK>_HOSTS``), which
    the job's ssh configuration reaches."""

    master: str = "master"
    worker: str = "worker"
