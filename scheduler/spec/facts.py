"""Facts derived from a job spec, read by the store's commit, the loop and the agent alike.

Each is a function of a :class:`scheduler.spec.model.JobSpec` (and a role name) only: the
ports a task gets and whether it wants sshd (:mod:`scheduler.rules.discovery` builds the env
from them), the ``desired`` of a newly bound task, and the completion and retry counts the
job lifecycle (:mod:`scheduler.rules.lifecycle`) applies. A role's name inside environment
variable names is :func:`scheduler.spec.model.env_name`.
"""

from __future__ import annotations

from scheduler.spec.model import JobSpec

WAIT = "wait"
"""``TaskRecord.desired`` of a task bound but held back until its role's dependencies run
(the agent starts only ``desired: run`` tasks)."""


def wants_ssh(spec: JobSpec) -> bool:
    """Whether the job's tasks get sshd, a key pair and host aliases: job-level ``ssh`` or
    ``mpi``."""
    return spec.ssh or spec.mpi


def port_names(spec: JobSpec, role: str) -> list[str]:
    """The named ports every task of ``role`` gets, in order: the role's declared ports
    (``main`` when none), plus ``ssh`` when :func:`wants_ssh` and not declared. The first
    is the main port. The loop assigns one port of the node's range per name."""
    names = list(spec.roles[role].ports) or ["main"]
    if wants_ssh(spec) and "ssh" not in names:
        names.append("ssh")
    return names


def initial_desired(spec: JobSpec, role: str) -> str:
    """``desired`` of a newly bound task of ``role``: ``wait`` when it has dependencies."""
    return WAIT if spec.roles[role].depends_on else "run"


def role_target(spec: JobSpec, role: str) -> int:
    """Replicas of ``role`` the attempt must hold to be whole: ``replicas``, or for an
    elastic role (``replicas: {min, max}``) its minimum, since the scheduler may shrink it
    there at any time (then the job ends when the replicas it holds have ended)."""
    r = spec.roles[role]
    return (r.min_available or 1) if r.elastic else r.replicas


def task_retry_limit(spec: JobSpec, role: str, explicit: bool) -> int:
    """In-place restarts a task of ``role`` may have: ``max_task_retries``; when the role
    sets none, 0 by default and ``retry.max_attempts - 1`` for an explicit ``restart_task``
    rule."""
    limit = spec.roles[role].max_task_retries
    if limit:
        return limit
    return spec.retry.max_attempts - 1 if explicit else 0


def min_succeeded(spec: JobSpec, role: str) -> int | None:
    """Successes of ``role`` that end the job early (role ``completion.min_succeeded``, or
    the legacy ``policies.completion`` of that role), None when none."""
    r = spec.roles[role]
    if r.completion is not None and r.completion.min_succeeded is not None:
        return r.completion.min_succeeded
    legacy = spec.policies.completion
    if legacy is not None and legacy.role == role:
        return 1 if legacy.when == "any" else r.replicas
    return None


def min_failed(spec: JobSpec, role: str) -> int:
    """Failures of ``role`` that end the attempt (role ``completion.min_failed``, default 1;
    -1: never, OpenPAI's -1)."""
    c = spec.roles[role].completion
    return c.min_failed if c is not None and c.min_failed is not None else 1
