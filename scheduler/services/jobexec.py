"""What ``pasture job exec`` needs to run a command in a running task: the task's sshd
(address and ``ssh`` port) and the job attempt's key, handed to the job's owner only.

A job with ``ssh: true`` (or ``mpi: true``) runs an sshd in every task, on the task's
``ssh`` port, that accepts the job attempt's key and presents it as its host key
(:mod:`scheduler.agent.ssh`). Exec reuses that door and opens no other: no agent endpoint,
no shell on the node. The key already belongs to the job (its tasks read it from the
share), so giving it to the user who submitted the job (or an admin) grants nothing that
user's own job code could not read; a user of the same VC who did not submit it gets 403.
A job without ssh has no such door and is refused (409, naming ``ssh: true``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler import sharefs
from scheduler.services.errors import ConflictError, ForbiddenError, NotFoundError
from scheduler.services.principal import Principal, require_role
from scheduler.states import JobState, TaskState
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.services.jobs import JobService

MAX_KEY_BYTES = 16 * 1024  # a job key is ~300 bytes of PEM; anything larger is not one


def job_key_path(share_dir: Path, job: str, attempt: int) -> Path:
    """Where the agents keep the job attempt's private key (the layout of
    :func:`scheduler.agent.ssh.job_key_path` under ``<share>/jobs/<job>``)."""
    return share_dir / "jobs" / job / ".ssh" / f"attempt-{attempt}.key"


def exec_access(
    jobs: JobService, principal: Principal, share_dir: Path, name: str, role: str, index: int
) -> dict[str, Any]:
    """The way into task ``role-index`` of job ``name``.

    Returns:
        ``{"job", "role", "index", "attempt", "node", "address", "port", "key"}``: the
        task's node address and sshd port, and the attempt's private key (PEM), which is
        also the only host key to accept.
    Raises:
        NotFoundError: unknown job or task (or one the caller may not see).
        ForbiddenError: the caller is neither the job's submitter nor an admin.
        ConflictError: the job was not submitted with ssh, or the task is not running.
    """
    require_role(principal, TokenRole.ADMIN, TokenRole.USER)
    job = jobs.get(principal, name)
    if principal.role is not TokenRole.ADMIN and job.get("user") != principal.name:
        raise ForbiddenError(
            f"job {name!r} was submitted by {job.get('user')!r}; only its submitter or an"
            " admin may exec into its tasks"
        )
    spec = job.get("spec") or {}
    if not (spec.get("ssh") or spec.get("mpi")):
        raise ConflictError(
            f"job {name!r} has no sshd in its tasks: exec needs a job submitted with 'ssh: true'"
        )
    task = next(
        (t for t in job.get("tasks") or [] if t.get("role") == role and t.get("index") == index),
        None,
    )
    if task is None:
        raise NotFoundError(f"job {name!r} has no task {role}-{index}")
    if job.get("state") != JobState.RUNNING or task.get("state") != TaskState.RUNNING:
        raise ConflictError(
            f"task {role}-{index} of job {name!r} is {task.get('state')} (job"
            f" {job.get('state')}); exec needs a running task"
        )
    port = (task.get("ports") or {}).get("ssh")
    if not port or not task.get("address"):
        raise ConflictError(f"task {role}-{index} of job {name!r} has no ssh port yet")
    attempt = int(task.get("attempt") or job.get("attempt") or 1)
    path = job_key_path(share_dir, name, attempt)
    try:
        # through sharefs: the job's tasks can write its directory, and a link planted at
        # the key's path must not hand the caller another file (docs/api.md "Reading the
        # share")
        with sharefs.open_file(share_dir, path.relative_to(share_dir)) as f:
            key = f.read(MAX_KEY_BYTES + 1)
    except sharefs.UnsafePathError:
        raise ForbiddenError(
            f"job {name!r}: the key file of attempt {attempt} is a link or hard link, refused"
        ) from None
    except OSError:
        raise ConflictError(f"job {name!r} attempt {attempt} has no key yet") from None
    if len(key) > MAX_KEY_BYTES:
        raise ConflictError(f"job {name!r}: its key file is not a key")
    return {
        "job": name,
        "role": role,
        "index": index,
        "attempt": attempt,
        "node": task.get("node", ""),
        "address": task["address"],
        "port": int(port),
        "key": key.decode(),
    }
