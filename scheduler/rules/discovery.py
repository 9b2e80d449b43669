"""Discovery environment of a task, computed from its job's placements.

Every job's tasks get every family below, whatever format the job was written in (the
names do not collide, and a job translated from OpenPAI, MARO or Volcano then finds what it
reads; see docs/runtime-env.md for the full table with sources):

- pasture: PASTURE_JOB_NAME, PASTURE_TASK_ROLE, PASTURE_TASK_INDEX, PASTURE_ATTEMPT,
  PASTURE_ROLES, PASTURE_ROLE_<ROLE>_REPLICAS / _HOSTS, PASTURE_TASK_HOST / _PORT,
  PASTURE_PORT_<NAME>, PASTURE_SHARE_DIR, PASTURE_JOB_DIR, PASTURE_MPI_HOSTFILE,
  PASTURE_CHECKPOINT_INTERVAL_S;
- PyTorch: WORLD_SIZE (every replica the spec declares), RANK (the task's place in the
  spec's layout: replicas of the roles declared before its role, plus its index; fixed by
  the spec, so a replica placed late by ``grow`` never takes an early task's rank, as in
  Volcano's pytorch plugin), LOCAL_RANK (rank among the placed tasks on the same node),
  MASTER_ADDR / MASTER_PORT (the first placed task in rank order, its main port);
- OpenPAI protocol v2, its kube-runtime and protocol v1 (``PAI_*``): :func:`openpai_env`;
- MARO (grass / k8s containers): :func:`maro_env`;
- Volcano env, svc and mpi plugins: :func:`volcano_env` (``MPI_HOST`` on the mpi plugin's
  master tasks) and :func:`volcano_host_files` (in process mode the command's
  ``/etc/volcano/`` paths are rewritten to where the files are: :func:`local_volcano_paths`).

Ports: a role's ports are :func:`port_names` (declared order; ``main`` when none is
declared, plus ``ssh`` when the job asks for ssh). The FIRST is the role's main port: the
one in host lists, PASTURE_TASK_PORT, PAI_CURRENT_CONTAINER_PORT and MASTER_PORT. Records
keep ports as a mapping whose order the store does not preserve, so the order always comes
from the spec.

Names: ``<ROLE>`` in PASTURE_ names is :func:`env_name` (upper-cased, every character
outside ``[A-Za-z0-9]`` -> ``_``); OpenPAI names use the role as written and, when that is
not a shell identifier (e.g. ``worker-gpu``), also :func:`shell_name` (``worker_gpu``, case
kept); Volcano's are its own rule (``-`` -> ``_``, upper-cased for variables). Only placed
tasks count (a gang placed at ``min_available`` has fewer tasks than replicas).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from scheduler.spec.facts import min_failed, min_succeeded, port_names
from scheduler.spec.model import JobSpec, env_name
from scheduler.store.records import TaskRecord

SHELL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def shell_name(role: str) -> str:
    """``worker-a.b`` -> ``worker_a_b``: the role as written with every character a shell
    variable name may not hold replaced by ``_`` (OpenPAI aliases)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", role)


def main_port(spec: JobSpec, t: TaskRecord) -> int:
    """Task ``t``'s main port (the first of :func:`port_names`); 0 when it has none."""
    if t.role in spec.roles:
        for name in port_names(spec, t.role):
            if name in t.ports:
                return t.ports[name]
    return next(iter(t.ports.values()), 0)


def ordered_ports(spec: JobSpec, t: TaskRecord) -> list[tuple[str, int]]:
    """``(name, port)`` of task ``t`` in declaration order (unknown names last, sorted)."""
    declared = port_names(spec, t.role) if t.role in spec.roles else []
    known = [(n, t.ports[n]) for n in declared if n in t.ports]
    return known + sorted((n, p) for n, p in t.ports.items() if n not in declared)


def spec_rank(spec: JobSpec, role: str, index: int) -> int:
    """Rank of task ``role``/``index`` in the spec's layout: the replicas of every role
    declared before ``role``, plus ``index`` (0 .. ``spec.task_count()`` - 1)."""
    before = 0
    for name, r in spec.roles.items():
        if name == role:
            return before + index
        before += r.replicas
    raise KeyError(f"role {role!r} is not in the job's spec")


def ordered_tasks(spec: JobSpec, tasks: Sequence[TaskRecord]) -> list[TaskRecord]:
    """Tasks in rank order: roles in declaration order, then index."""
    order = {r: i for i, r in enumerate(spec.roles)}
    return sorted(tasks, key=lambda t: (order.get(t.role, len(order)), t.index))


def hosts_with_slots(spec: JobSpec, tasks: Sequence[TaskRecord]) -> list[tuple[str, int]]:
    """``(address, number of the job's tasks there)`` per host, hosts in the rank order of
    their first task."""
    slots: dict[str, int] = {}
    for t in ordered_tasks(spec, tasks):
        slots[t.address] = slots.get(t.address, 0) + 1
    return list(slots.items())


def mpi_hostfile(spec: JobSpec, tasks: Sequence[TaskRecord]) -> str:
    """An Open MPI / MPICH hostfile: ONE ``<address> slots=<n>`` line per host, ``n`` the
    job's tasks on that host (Open MPI 4.1 refuses a host listed twice), hosts in rank
    order. ``ssh <address>`` reaches the first of the job's tasks on that host (see
    :mod:`scheduler.agent.ssh`)."""
    return "".join(f"{host} slots={n}\n" for host, n in hosts_with_slots(spec, tasks))


def _by_role(spec: JobSpec, tasks: Sequence[TaskRecord]) -> dict[str, list[TaskRecord]]:
    by_role: dict[str, list[TaskRecord]] = {}
    for t in ordered_tasks(spec, tasks):
        by_role.setdefault(t.role, []).append(t)
    return {r: by_role[r] for r in spec.roles if r in by_role}


def _completion_counts(spec: JobSpec, role: str) -> tuple[int, int]:
    """(min failed, min succeeded) task counts of ``role`` in OpenPAI's terms (-1: not a
    rule), as :mod:`scheduler.rules.lifecycle` applies them."""
    return min_failed(spec, role), min_succeeded(spec, role) or -1


def _with_shell_alias(env: dict[str, str], name: str, role: str, value: str) -> None:
    """Set ``name`` (holding ``role`` as written) and, when that is not a shell identifier,
    the same name with :func:`shell_name` of the role."""
    env[name] = value
    alias = name.replace(role, shell_name(role))
    if alias != name and SHELL_NAME_RE.match(alias):
        env.setdefault(alias, value)


def openpai_env(
    job: str,
    spec: JobSpec,
    tasks: Sequence[TaskRecord],
    me: TaskRecord,
    *,
    user: str,
    dirs: dict[str, str],
) -> dict[str, str]:
    """OpenPAI's runtime variables (protocol v2 and its kube-runtime, protocol v1).

    Sources (microsoft/pai): docs/manual/cluster-user/how-to-use-advanced-job-settings.md
    (v2), the rest-lite / kube-runtime design's "Legacy environment variables" table, and
    docs/job_tutorial.md "Runtime environment" (v1). Table: docs/runtime-env.md.

    Args:
        dirs: ``{"code", "data", "output", "work"}`` -> path as the task sees it.
    Returns:
        ``{name: value}``; role names as written (see :func:`_with_shell_alias`).
    """
    by_role = _by_role(spec, tasks)
    roles = list(by_role)
    role = spec.roles[me.role]
    res = role.resources
    shm_mb = (role.shm or 0) // 2**20 or 64
    mem_mb = res.memory // 2**20
    cpus = max(1, res.cpu // 1000)
    failed, succeeded = _completion_counts(spec, me.role)
    ports = ordered_ports(spec, me)
    env: dict[str, str] = {
        "PAI_JOB_NAME": job,
        "PAI_USER_NAME": user,
        "PAI_USERNAME": user,
        "PAI_DEFAULT_FS_URI": dirs["share"],
        "PAI_TASK_ROLE_COUNT": str(len(roles)),
        "PAI_TASK_ROLES_NUM": str(len(roles)),
        "PAI_TASK_ROLE_LIST": ",".join(roles),
        "PAI_TASKS_NUM": str(len(tasks)),
        "PAI_CURRENT_TASK_ROLE_NAME": me.role,
        "PAI_TASK_ROLE_NAME": me.role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(me.index),
        "PAI_TASK_INDEX": str(me.index),
        "PAI_TASK_ROLE_INDEX": str(me.index),
        "PAI_TASK_ROLE_NO": str(roles.index(me.role)) if me.role in roles else "0",
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": str(len(by_role.get(me.role, []))),
        "PAI_TASK_ROLE_NUM": str(len(by_role.get(me.role, []))),
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": str(cpus),
        "PAI_TASK_CPU_NUM": str(cpus),
        "PAI_CURRENT_TASK_ROLE_MEM_MB": str(mem_mb),
        "PAI_TASK_MEM_MB": str(mem_mb),
        "PAI_CURRENT_TASK_ROLE_SHM_MB": str(shm_mb),
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": str(res.gpu),
        "PAI_TASK_GPU_NUM": str(res.gpu),
        "PAI_GPU_COUNT": str(res.gpu),
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": str(failed),
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": str(succeeded),
        # v1 killAllOnCompletedTaskNumber is translated to the job's min_succeeded
        "PAI_KILL_ALL_ON_COMPLETED_TASK_NUM": str(spec.min_succeeded or 0),
        "PAI_CURRENT_CONTAINER_IP": me.address,
        "PAI_CURRENT_CONTAINER_PORT": str(main_port(spec, me)),
        "PAI_CONTAINER_ID": f"{job}-{me.role}-{me.index}-a{me.attempt}",
        "PAI_CODE_DIR": dirs["code"],
        "PAI_DATA_DIR": dirs["data"],
        "PAI_OUTPUT_DIR": dirs["output"],
        "PAI_WORK_DIR": dirs["work"],
    }
    if "ssh" in me.ports:
        env["PAI_CONTAINER_SSH_PORT"] = str(me.ports["ssh"])
    for pname, port in ports:
        env[f"PAI_CONTAINER_HOST_{pname}_PORT_LIST"] = str(port)
    for i, r in enumerate(roles):
        members = by_role[r]
        rs = spec.roles[r].resources
        r_shm_mb = (spec.roles[r].shm or 0) // 2**20 or 64
        r_failed, r_succeeded = _completion_counts(spec, r)
        hosts = ",".join(f"{t.address}:{main_port(spec, t)}" for t in members)
        env[f"PAI_TASK_ROLE_{i}_HOST_LIST"] = hosts  # v1: by role number
        _with_shell_alias(env, f"PAI_TASK_ROLE_{r}_HOST_LIST", r, hosts)
        _with_shell_alias(env, f"PAI_TASK_ROLE_TASK_COUNT_{r}", r, str(len(members)))
        _with_shell_alias(
            env,
            f"PAI_RESOURCE_{r}",
            r,
            f"{rs.gpu},{max(1, rs.cpu // 1000)},{rs.memory // 2**20},{r_shm_mb}",
        )
        _with_shell_alias(env, f"PAI_MIN_FAILED_TASK_COUNT_{r}", r, str(r_failed))
        _with_shell_alias(env, f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r}", r, str(r_succeeded))
        for t in members:
            _with_shell_alias(env, f"PAI_HOST_IP_{r}_{t.index}", r, t.address)
            for pname, port in ordered_ports(spec, t):
                _with_shell_alias(env, f"PAI_PORT_LIST_{r}_{t.index}_{pname}", r, str(port))
                _with_shell_alias(env, f"PAI_{r}_{t.index}_{pname}_PORT", r, str(port))
    return env


def maro_env(job: str, me: TaskRecord, *, container_name: str) -> dict[str, str]:
    """MARO's container variables (microsoft/maro maro/cli/grass/lib/agents/master_agent.py,
    ``_start_container``): JOB_NAME, JOB_ID, COMPONENT_TYPE / _ID (the role),
    COMPONENT_INDEX, COMPONENT_NAME (``<role>-<index>``), CONTAINER_NAME, NODE_NAME /
    NODE_ID, CLUSTER_NAME / CLUSTER_ID (``pasture``)."""
    return {
        "CLUSTER_NAME": "pasture",
        "CLUSTER_ID": "pasture",
        "NODE_NAME": me.node,
        "NODE_ID": me.node,
        "JOB_NAME": job,
        "JOB_ID": job,
        "COMPONENT_TYPE": me.role,
        "COMPONENT_ID": me.role,
        "COMPONENT_INDEX": str(me.index),
        "COMPONENT_NAME": f"{me.role}-{me.index}",
        "CONTAINER_NAME": container_name,
    }


def volcano_key(role: str) -> str:
    """Volcano's role key: ``-`` -> ``_`` (svc plugin, ``formateENVKey``)."""
    return role.replace("-", "_")


def volcano_env(
    spec: JobSpec, tasks: Sequence[TaskRecord], me: TaskRecord, *, hosts_dir: str
) -> dict[str, str]:
    """Volcano's env plugin (VC_TASK_INDEX, VK_TASK_INDEX) and svc plugin (VC_<TASK>_HOSTS
    comma-separated, VC_<TASK>_NUM; volcano-sh/volcano pkg/controllers/job/plugins/env and
    svc). Hosts are task addresses, not ``<job>-<task>-<i>.<job>`` DNS names (pasture has
    no cluster DNS). PASTURE_VOLCANO_HOSTS_DIR names the directory holding the
    ``<task>.host`` files (mounted at /etc/volcano in containers)."""
    env = {
        "VC_TASK_INDEX": str(me.index),
        "VK_TASK_INDEX": str(me.index),
        "PASTURE_VOLCANO_HOSTS_DIR": hosts_dir,
    }
    by_role = _by_role(spec, tasks)
    for r, members in by_role.items():
        key = volcano_key(r).upper()
        env[f"VC_{key}_HOSTS"] = ",".join(t.address for t in members)
        env[f"VC_{key}_NUM"] = str(len(members))
    mpi = spec.mpi_host
    if mpi is not None and me.role == mpi.master:
        env["MPI_HOST"] = ",".join(t.address for t in by_role.get(mpi.worker, []))
    return env


VOLCANO_DIR = "/etc/volcano"
"""Where Volcano's svc plugin mounts the ``<task>.host`` files in every pod."""


def local_volcano_paths(command: str, hosts_dir: str) -> str:
    """``command`` with each ``/etc/volcano/`` replaced by ``hosts_dir/``: a process-mode
    task cannot have files in the node's ``/etc``, so the agent writes the Volcano host
    files in the job's directory and the command reads them there (the literal path, so it
    works inside quotes and in any language's string, e.g. ``cat /etc/volcano/ps.host`` in
    Volcano's TensorFlow examples that build TF_CONFIG from it). Containers mount the
    files at /etc/volcano instead and keep the command as written."""
    if f"{VOLCANO_DIR}/" not in command or hosts_dir.rstrip("/") == VOLCANO_DIR:
        return command
    return command.replace(f"{VOLCANO_DIR}/", hosts_dir.rstrip("/") + "/")


def volcano_host_files(spec: JobSpec, tasks: Sequence[TaskRecord]) -> dict[str, str]:
    """Volcano svc plugin's ``/etc/volcano/<task>.host`` files: ``{file name: one address
    per line}`` (no trailing newline, as Volcano writes them)."""
    return {
        f"{volcano_key(r)}.host": "\n".join(t.address for t in members)
        for r, members in _by_role(spec, tasks).items()
    }


ELASTIC_MAX_RESTARTS = 100  # PET_MAX_RESTARTS: every scale-down restarts the group once
# torchrun's keep-alive (rdzv_conf keep_alive_interval s x keep_alive_max_attempt): a
# replica stopped by a shrink stays a participant of the rendezvous until its keep-alive
# expires (torch's defaults: 5 s x 3), and the survivors cannot form the next round before
# (the round stays "complete" while it has a participant). 1 s x 5 drops it within about
# 5 s, so the shrunk group re-forms and replicas grown back a few seconds later join it.
ELASTIC_KEEP_ALIVE_S = 1
ELASTIC_KEEP_ALIVE_ATTEMPTS = 5


def elastic_env(
    job: str, spec: JobSpec, tasks: Sequence[TaskRecord], me: TaskRecord
) -> dict[str, str]:
    """torchrun's elastic rendezvous options for a task of an elastic role (issue 29;
    empty for any other task). torchrun reads ``PET_<OPTION>`` for each option it does not
    get on its command line (torch.distributed.run):

    - PET_NNODES ``M:N`` (the role's minimum and maximum replicas), PET_RDZV_BACKEND
      ``c10d``, PET_RDZV_ID ``<job>-<attempt>`` (one rendezvous per attempt; resizes keep
      it);
    - PET_RDZV_ENDPOINT ``<host>:<port>`` of replica 0 of the role: its address and its
      main port. Replica 0 is never stopped by a resize (the minimum is at least 1 and
      shrinking stops the highest indexes), so the endpoint stays put across resizes;
    - PET_RDZV_CONF ``is_host=true`` on replica 0 and ``is_host=false`` on the others, so
      that replica 0's agent always hosts the rendezvous store (torchrun otherwise lets
      whichever agent binds first host it, and a later shrink could stop that one), and
      ``keep_alive_interval`` / ``keep_alive_max_attempt`` (:data:`ELASTIC_KEEP_ALIVE_S`,
      :data:`ELASTIC_KEEP_ALIVE_ATTEMPTS`) so that a replica stopped by a shrink leaves
      the rendezvous within about 5 s (torch's default 15 s kept the survivors from
      re-forming, and a regrow inside that window failed);
    - PET_MAX_RESTARTS :data:`ELASTIC_MAX_RESTARTS`: torchrun counts each scale-down (its
      surviving workers fail and restart) as a restart; scale-ups are not counted;
    - TORCH_DISABLE_SHARE_RDZV_TCP_STORE ``1``: every rendezvous round publishes its
      master address and port (with torch's shared store, rank 0 publishes them only in
      its first round, so an agent joining a later round, a regrow, never gets them).

    A task's own ``env`` wins over these (user env is applied last).
    """
    role = spec.roles.get(me.role)
    if role is None or not role.elastic:
        return {}
    zero = next((t for t in tasks if t.role == me.role and t.index == 0), None)
    if zero is None:  # replica 0 always runs while the job does; be safe
        return {}
    lo = role.min_available or 1
    return {
        "PET_NNODES": f"{lo}:{role.replicas}",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ID": f"{job}-{me.attempt}",
        "PET_RDZV_ENDPOINT": f"{zero.address}:{main_port(spec, zero)}",
        "PET_RDZV_CONF": (
            f"is_host={'true' if me.index == 0 else 'false'},"
            f"keep_alive_interval={ELASTIC_KEEP_ALIVE_S},"
            f"keep_alive_max_attempt={ELASTIC_KEEP_ALIVE_ATTEMPTS}"
        ),
        "PET_MAX_RESTARTS": str(ELASTIC_MAX_RESTARTS),
        # torch's shared rendezvous TCPStore publishes MASTER_ADDR/PORT under a round's
        # keys only in an agent's first round (or when it becomes rank 0): in a later
        # round that a new agent joins (a regrow), rank 0 publishes nothing there, the
        # newcomer waits for MASTER_ADDR until it fails and the others time out on its
        # role_info (torch 2.15, dynamic_rendezvous.next_rendezvous). With the opt-out
        # every round publishes them (a regrow re-forms like a first round).
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }


def task_env(
    job: str,
    spec: JobSpec,
    tasks: Sequence[TaskRecord],
    me: TaskRecord,
    share_dir: str,
    hostfile: str | None = None,
    *,
    user: str = "",
    work_dir: str | None = None,
    code_dir: str | None = None,
    container_name: str = "",
    volcano_hosts_dir: str = "/etc/volcano",
) -> dict[str, str]:
    """The discovery environment of task ``me`` (shape: see module docstring).

    Args:
        job: job name. spec: the job's spec. tasks: every placed task of the attempt
        (including ``me``). share_dir: the cluster share as seen by the task.
        hostfile: path of the MPI hostfile (set when ``spec.mpi``).
        user: the submitting user. work_dir: the task's working directory (default: the
        job directory). code_dir: where the job's code was copied from (default: the
        working directory). container_name: the task's container name (MARO).
        volcano_hosts_dir: where the Volcano ``<task>.host`` files are, as the task sees it.
    """
    ranked = ordered_tasks(spec, tasks)
    by_role = _by_role(spec, tasks)
    roles = list(by_role)
    job_dir = str(PurePosixPath(share_dir) / "jobs" / job)
    work = work_dir or job_dir
    dirs = {
        "share": share_dir,
        "code": code_dir or work,
        # OpenPAI v1 dataDir/outputDir arrive as the job's env PAI_DATA_DIR/PAI_OUTPUT_DIR,
        # which win over these defaults (user env wins over the runtime's variables)
        "data": share_dir,
        "output": f"{job_dir}/output",
        "work": work,
    }
    env: dict[str, str] = {
        "PASTURE_JOB_NAME": job,
        "PASTURE_TASK_ROLE": me.role,
        "PASTURE_TASK_INDEX": str(me.index),
        "PASTURE_ATTEMPT": str(me.attempt),
        "PASTURE_ROLES": ",".join(roles),
        "PASTURE_TASK_HOST": me.address,
        "PASTURE_TASK_PORT": str(main_port(spec, me)),
        "PASTURE_SHARE_DIR": share_dir,
        "PASTURE_JOB_DIR": job_dir,
        "PASTURE_WORK_DIR": work,
    }
    for role in roles:
        members = by_role[role]
        hosts = ",".join(f"{t.address}:{main_port(spec, t)}" for t in members)
        env[f"PASTURE_ROLE_{env_name(role)}_REPLICAS"] = str(len(members))
        env[f"PASTURE_ROLE_{env_name(role)}_HOSTS"] = hosts
    for pname, port in ordered_ports(spec, me):
        env[f"PASTURE_PORT_{env_name(pname)}"] = str(port)
    same_node = [t for t in ranked if t.node == me.node]
    env["WORLD_SIZE"] = str(spec.task_count())
    env["RANK"] = str(spec_rank(spec, me.role, me.index))
    env["LOCAL_RANK"] = str(
        next(i for i, t in enumerate(same_node) if t.role == me.role and t.index == me.index)
    )
    env["MASTER_ADDR"] = ranked[0].address
    env["MASTER_PORT"] = str(main_port(spec, ranked[0]))
    if spec.mpi and hostfile:
        env["PASTURE_MPI_HOSTFILE"] = hostfile
    ckpt = spec.checkpoint_interval_s
    if ckpt is not None:  # whole seconds as an integer, for shell arithmetic
        env["PASTURE_CHECKPOINT_INTERVAL_S"] = str(int(ckpt)) if ckpt.is_integer() else repr(ckpt)
    env.update(elastic_env(job, spec, tasks, me))
    compat = {
        **openpai_env(job, spec, tasks, me, user=user, dirs=dirs),
        **maro_env(job, me, container_name=container_name),
        **volcano_env(spec, tasks, me, hosts_dir=volcano_hosts_dir),
    }
    return {**compat, **env}
