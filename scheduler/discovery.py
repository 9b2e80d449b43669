"""Discovery environment of a task, computed from its job's placements.

The variables (see docs/internals/conventions.md, "Discovery environment"):

- identity: PASTURE_JOB_NAME, PASTURE_TASK_ROLE, PASTURE_TASK_INDEX, PASTURE_ATTEMPT
- PASTURE_ROLES (declaration order), PASTURE_ROLE_<ROLE>_REPLICAS,
  PASTURE_ROLE_<ROLE>_HOSTS (``host:port`` of each task's first port, by index)
- PASTURE_TASK_HOST / PASTURE_TASK_PORT, PASTURE_PORT_<NAME>
- PyTorch: WORLD_SIZE, RANK (over roles in declaration order, then index), LOCAL_RANK
  (rank among the job's tasks on the same node), MASTER_ADDR / MASTER_PORT (rank 0)
- OpenPAI aliases with the role name as written: PAI_TASK_ROLE_LIST,
  PAI_CURRENT_TASK_ROLE_NAME, PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX,
  PAI_TASK_ROLE_TASK_COUNT_<role>, PAI_TASK_ROLE_<role>_HOST_LIST, PAI_HOST_IP_<role>_<i>,
  PAI_PORT_LIST_<role>_<i>_<port>
- PASTURE_SHARE_DIR, PASTURE_JOB_DIR, and PASTURE_MPI_HOSTFILE when the job sets mpi.

``<ROLE>`` is the role name upper-cased with every non-alphanumeric character replaced by
``_``. Only placed tasks count (a gang placed at ``min_available`` has fewer tasks than
replicas); REPLICAS reports the placed count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from scheduler.spec.model import JobSpec
from scheduler.store.records import TaskRecord


def env_name(role: str) -> str:
    """``worker-a.b`` -> ``WORKER_A_B``."""
    return re.sub(r"[^A-Za-z0-9]", "_", role).upper()


def _first_port(t: TaskRecord) -> int:
    return next(iter(t.ports.values())) if t.ports else 0


def ordered_tasks(spec: JobSpec, tasks: Sequence[TaskRecord]) -> list[TaskRecord]:
    """Tasks in rank order: roles in declaration order, then index."""
    order = {r: i for i, r in enumerate(spec.roles)}
    return sorted(tasks, key=lambda t: (order.get(t.role, len(order)), t.index))


def mpi_hostfile(spec: JobSpec, tasks: Sequence[TaskRecord]) -> str:
    """An MPI hostfile (``host slots=1`` per task, rank order), as LSF/OpenLava users
    expect."""
    return "".join(f"{t.address} slots=1\n" for t in ordered_tasks(spec, tasks))


def task_env(
    job: str,
    spec: JobSpec,
    tasks: Sequence[TaskRecord],
    me: TaskRecord,
    share_dir: str,
    hostfile: str | None = None,
) -> dict[str, str]:
    """The discovery environment of task ``me`` (shape: see module docstring).

    Args:
        job: job name. spec: the job's spec. tasks: every placed task of the attempt
        (including ``me``). share_dir: the cluster share as seen by the task.
        hostfile: path of the MPI hostfile (set when ``spec.mpi``).
    """
    ranked = ordered_tasks(spec, tasks)
    by_role: dict[str, list[TaskRecord]] = {}
    for t in ranked:
        by_role.setdefault(t.role, []).append(t)
    roles = [r for r in spec.roles if r in by_role]
    job_dir = str(PurePosixPath(share_dir) / "jobs" / job)
    env: dict[str, str] = {
        "PASTURE_JOB_NAME": job,
        "PASTURE_TASK_ROLE": me.role,
        "PASTURE_TASK_INDEX": str(me.index),
        "PASTURE_ATTEMPT": str(me.attempt),
        "PASTURE_ROLES": ",".join(roles),
        "PASTURE_TASK_HOST": me.address,
        "PASTURE_TASK_PORT": str(_first_port(me)),
        "PASTURE_SHARE_DIR": share_dir,
        "PASTURE_JOB_DIR": job_dir,
        "PAI_TASK_ROLE_LIST": ",".join(roles),
        "PAI_CURRENT_TASK_ROLE_NAME": me.role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(me.index),
    }
    for role in roles:
        members = by_role[role]
        hosts = ",".join(f"{t.address}:{_first_port(t)}" for t in members)
        env[f"PASTURE_ROLE_{env_name(role)}_REPLICAS"] = str(len(members))
        env[f"PASTURE_ROLE_{env_name(role)}_HOSTS"] = hosts
        env[f"PAI_TASK_ROLE_TASK_COUNT_{role}"] = str(len(members))
        env[f"PAI_TASK_ROLE_{role}_HOST_LIST"] = hosts
        for t in members:
            env[f"PAI_HOST_IP_{role}_{t.index}"] = t.address
            for pname, port in t.ports.items():
                env[f"PAI_PORT_LIST_{role}_{t.index}_{pname}"] = str(port)
    for pname, port in me.ports.items():
        env[f"PASTURE_PORT_{env_name(pname)}"] = str(port)
    rank = next(i for i, t in enumerate(ranked) if t.role == me.role and t.index == me.index)
    same_node = [t for t in ranked if t.node == me.node]
    env["WORLD_SIZE"] = str(len(ranked))
    env["RANK"] = str(rank)
    env["LOCAL_RANK"] = str(
        next(i for i, t in enumerate(same_node) if t.role == me.role and t.index == me.index)
    )
    env["MASTER_ADDR"] = ranked[0].address
    env["MASTER_PORT"] = str(_first_port(ranked[0]))
    if spec.mpi and hostfile:
        env["PASTURE_MPI_HOSTFILE"] = hostfile
    return env
