"""What ``pasture job exec`` needs to run a command in a running task: the task's sshd
(address and ``ssh`` port) and the submission's key, handed to the job's owner only.

A job with ``ssh: true`` (or ``mpi: true``) runs an sshd in every task, on the task's
``ssh`` port, that accepts the submission's key and presents it as its host key
(:mod:`scheduler.agent.ssh`). Exec reuses that door and opens no other: no agent endpoint,
no shell on the node. The key is the submission's own (:mod:`scheduler.jobkey`: made when
the job was stored, kept in the store, never on the share), so a key handed out for a job
that was deleted opens nothing of a job submitted later under the same name. Giving it to
the user who submitted the job (or an admin) grants nothing that user's own job code could
not use; a user of the same VC who did not submit it gets 403. A job without ssh has no
such door and is refused (409, naming ``ssh: true``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler import jobkey, tenants
from scheduler.services.errors import ConflictError, ForbiddenError, NotFoundError
from scheduler.services.principal import Principal, require_role
from scheduler.states import JobState, TaskState
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.services.jobs import JobService
    from scheduler.store.records import NodeRecord


def exec_access(
    jobs: JobService, principal: Principal, name: str, role: str, index: int
) -> dict[str, Any]:
    """The way into task ``role-index`` of job ``name``.

    Returns:
        ``{"job", "role", "index", "attempt", "node", "address", "port", "key", "user",
        "login"}``: the task's node address and sshd port, the submission's private key
        (PEM), which is also the only host key to accept, the Unix user of the job's VC
        (:func:`scheduler.tenants.user_name`: whom the task runs as on nodes with
        ``task_users: vc``), ``login``: the user name the task's sshd accepts, as its
        node's agent registered it (:func:`task_login`; "" when unknown), and
        ``host_key``: the key's OpenSSH public line, the task's host key (for an
        OpenSSH client's known_hosts).
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
    key = jobs.store.ssh_key(name, str(job.get("uid") or ""))
    if key is None:
        raise ConflictError(
            f"job {name!r} has no ssh key of its own (stored before keys were made per"
            " submission); resubmit it"
        )
    vc_user = tenants.user_name(str(job.get("vc") or spec.get("vc") or "default"))
    try:
        host_key = jobkey.public_line(key)
    except ValueError as exc:
        raise ConflictError(f"job {name!r}: its ssh key is unusable ({exc}); resubmit it") from None
    return {
        "job": name,
        "role": role,
        "index": index,
        "attempt": attempt,
        "node": task.get("node", ""),
        "address": task["address"],
        "port": int(port),
        "key": key,
        "user": vc_user,
        "login": task_login(jobs.store.get_node(str(task.get("node", ""))), vc_user),
        "host_key": host_key,
    }


def task_login(node: NodeRecord | None, vc_user: str) -> str:
    """The user name a task's sshd on ``node`` accepts: the VC's user (``vc_user``) where
    tasks run as their VC's user (process executor, pods), ``root`` where they run as root
    of their VC's user namespace (container executor: scheduler/agent/container.py), the
    agent's user where they run as the agent's and the agent said which (process
    executor); "" when unknown (an agent that did not say, a container or pod whose image
    decides: the CLI then tries its candidates).

    Its sshd runs as the task's user and, not being root, lets in only that user, so one
    name that is right saves ``job exec`` a second SSH handshake."""
    if node is None:
        return ""
    if node.task_users == "vc":
        return "root" if node.executor == "container" else vc_user
    if node.task_users == "agent":
        return node.task_login
    return ""
