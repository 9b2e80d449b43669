"""A task's start-up: what the agent prepares before the task's command runs.

:func:`prepare` is called by the agent for every task it starts and returns a
:class:`Startup`: the complete environment, the script to run (start-up lines, then the
job's command) and extra mounts. In order:

1. the job directory on the share (``logs/``, ``output/``; owned by the VC's Unix user
   when tasks run as it, :func:`own_job_dir`), what of the share a container or pod sees (the job
   directory, the code dir read-only, the VC's team directory when it exists: never the
   share root; the job's ``mounts`` are added by the agent), the MPI hostfile
   (``hostfile-<attempt>``, when the job sets ``mpi``) and the Volcano host files
   (``volcano-<attempt>/<task>.host``; mounted read-only at ``/etc/volcano`` in
   containers, named by PASTURE_VOLCANO_HOSTS_DIR in both modes);
2. ssh (jobs with ``ssh`` or ``mpi``; see :mod:`scheduler.agent.ssh`): the submission's
   key (from the launch record, never the share) in the task's ssh directory, the sshd
   lines of the script;
3. code dir (job-level ``code_dir``: a directory of the share, relative to it or
   absolute inside it, e.g. one pushed with ``pasture data push``): the script copies its
   content to ``./code`` of a fresh per-task working directory
   ``<job dir>/work/<role>-<index>`` (PAI_WORK_DIR) and runs the command there, so
   OpenPAI's ``python code/x.py`` commands find their files; PAI_CODE_DIR names the source;
4. the environment: discovery (:func:`scheduler.rules.discovery.task_env`), then the job's and
   the role's ``env`` (the user's values win over the OpenPAI / MARO / Volcano aliases),
   then the PASTURE_ variables again (they are the agent's contract) and ssh's.

Executors (process, container) run the returned script as the task's command: nothing
executor-specific here beyond where the task sees its ssh directory. A role with
``entrypoint: true`` has no command: the script holds only the start-up lines and the
executor ends it with ``exec`` of the image's ENTRYPOINT and the role's ``args`` (or the
image's CMD), which only the container and kubernetes executors can resolve.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from scheduler import logpaths
from scheduler.agent import ssh
from scheduler.rules.discovery import (
    local_volcano_paths,
    mpi_hostfile,
    task_env,
    volcano_host_files,
)
from scheduler.spec.facts import wants_ssh
from scheduler.spec.model import JobSpec, env_name
from scheduler.spec.policies import volume_dir
from scheduler.store.records import TaskRecord

CONTAINER_SSH_DIR = "/run/pasture/ssh"
"""Where a container task sees its ssh directory."""
VOLCANO_DIR = "/etc/volcano"
"""Where a container task sees the Volcano host files (Volcano's own mount path)."""


class StartupError(RuntimeError):
    """The task cannot start (bad code_dir, ...): the message says why, for the task record."""


@dataclass
class Startup:
    """What :func:`prepare` returns.

    Attributes:
        env: the task's complete added environment.
        command: the script to run (start-up lines, then the job's command).
        mounts: (host path, path in the task) pairs to add (container executor).
        hostfile: the MPI hostfile path, when written.
        entrypoint: the role runs its image's ENTRYPOINT (``command`` then holds only the
            start-up lines; the executor ends the script with ``exec <entrypoint> <args>``).
        args: the role's ``args`` (replacing the image's CMD), None = the image's CMD.
        working_dir: the role's ``working_dir`` (also a ``cd`` line of ``command``).
        visible: the share paths the task may see (its job directory, its code dir, its
            VC's team directory when it exists); the agent adds the job's mounts.
    """

    env: dict[str, str]
    command: str
    mounts: list[tuple[str, str]] = field(default_factory=list)
    hostfile: str | None = None
    entrypoint: bool = False
    args: list[str] | None = None
    working_dir: str | None = None
    visible: list[str] = field(default_factory=list)


def _atomic_write(path: Path, text: str, tag: str) -> None:
    tmp = path.with_name(f"{path.name}.{tag}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def own_job_dir(share: Path, job_dir: Path, task_dir: Path, owner: tuple[int, int]) -> None:
    """Give the job's directory to the tenant whose task runs now (docs/runtime-env.md
    "Tenants' Unix users"): ``<share>/jobs`` 0711 (no one lists the jobs), the job
    directory and its ``output/`` owned by ``owner`` (uid, gid), the job directory 0750 (the
    tenant's group may read, other tenants may not enter), and the task's node directory
    chain traversable (0711) so the task reaches its own ssh directory and nothing else
    there. Raises OSError when the share does not keep owners (then nothing separates
    tenants on it: the task must not start)."""
    jobs = job_dir.parent
    if jobs.stat().st_uid == os.geteuid():
        os.chmod(jobs, 0o711)
    uid, gid = owner
    for d in (job_dir, job_dir / "output"):
        os.chown(d, uid, gid)
    os.chmod(job_dir, 0o750)
    task_dir.mkdir(parents=True, exist_ok=True)
    for d in (task_dir.parent, task_dir):
        os.chmod(d, 0o711)


def declared_mounts(spec: JobSpec, share: Path) -> list[tuple[str, str]]:
    """The job's declared data (its ``mounts``) as ``(source on the node, target[:ro])``
    pairs, the form of ``TaskLaunch.mounts``: read-only unless declared ``read_only:
    false`` (:class:`scheduler.spec.policies.MountSpec`). Every executor gets these after
    :func:`prepare`'s own mounts."""
    return [
        (str(share / m.source), f"{m.target}:ro" if m.read_only else m.target) for m in spec.mounts
    ]


def code_dir_of(spec: JobSpec, share: Path) -> Path | None:
    """The job's ``code_dir`` as a path on the share (None when the job has none).

    Raises:
        StartupError: the path leaves the share or is not a directory there.
    """
    raw = spec.code_dir
    if not raw:
        return None
    p = PurePosixPath(raw)
    path = Path(p) if p.is_absolute() else share / p
    resolved = path.resolve()
    if resolved != share.resolve() and share.resolve() not in resolved.parents:
        raise StartupError(f"code_dir {raw!r} is outside the cluster share {share}")
    if not resolved.is_dir():
        base = PurePosixPath(raw).name or "code"
        raise StartupError(
            f"code_dir {raw!r}: no such directory on the cluster share ({path}); push the"
            f" code there first: `pasture data push {shlex.quote('./' + base)} {shlex.quote(raw)}`"
        )
    return path


def prepare(
    *,
    job: str,
    user: str,
    spec: JobSpec,
    tasks: Sequence[TaskRecord],
    me: TaskRecord,
    node: str,
    share: Path,
    task_dir: Path,
    task_id: str,
    executor_kind: str,
    ssh_key: str = "",
    owner: tuple[int, int] | None = None,
    job_uid: str = "",
    host_network: bool = True,
    exec_from: Sequence[str] = (),
) -> Startup:
    """Prepare task ``me`` of ``job`` (see the module docstring).

    Args:
        share: the cluster share on this node (tasks see it at the same path).
        task_dir: the node-local directory private to the task (the executor's state_dir).
        task_id: the task's id (container name ``task-<id>``).
        executor_kind: ``process``, ``container`` or ``kubernetes`` (the Volcano mount
            needs container; a kubernetes pod sees the ssh directory as a container does).
        job_uid: the submission's uid (its launch record's): new volume claims are
            directories of this submission (:func:`scheduler.spec.policies.volume_dir`).
        ssh_key: the submission's private key (PEM) from the node's launch record
            (:mod:`scheduler.jobkey`); "" for a job without ssh.
        owner: (uid, gid) of the task's user (:mod:`scheduler.agent.tenant`): owns the
            task's ssh directory; None: the agent's user.
        host_network: containers share the node's network (``task_network: host``), so
            their ssh connections leave from the node's address and the task sshd accepts
            the job key from the job's tasks' addresses only (:func:`ssh.allowed_sources`).
        exec_from: networks (CIDR) the sshd also takes the key from, where the node lets
            ``pasture job exec`` in (agent setting ``ssh_exec_from``).
    Raises:
        OSError: the share or the node's work dir is not writable.
        StartupError: the job's own settings prevent the start (message says which).
    """
    job_dir = logpaths.job_dir(share, job)
    (job_dir / "logs").mkdir(parents=True, exist_ok=True)
    (job_dir / "output").mkdir(exist_ok=True)
    if owner is not None:
        own_job_dir(share, job_dir, task_dir, owner)
    in_container = executor_kind == "container"
    mounts: list[tuple[str, str]] = []
    lines: list[str] = []

    hostfile = None
    if spec.mpi:
        hostfile = str(job_dir / f"hostfile-{me.attempt}")
        _atomic_write(Path(hostfile), mpi_hostfile(spec, tasks), node)
    vdir = job_dir / f"volcano-{me.attempt}"
    vdir.mkdir(exist_ok=True)
    for name, text in volcano_host_files(spec, tasks).items():
        _atomic_write(vdir / name, text, node)
    if in_container:
        mounts.append((str(vdir), f"{VOLCANO_DIR}:ro"))

    volumes: dict[str, str] = {}
    for v in spec.volumes:  # fresh directories of the job (Volcano volumeClaim)
        path = share / volume_dir(job, v.name, job_uid)
        path.mkdir(parents=True, exist_ok=True)
        volumes[f"PASTURE_VOLUME_{env_name(v.name)}"] = str(path)
        if executor_kind in ("container", "kubernetes"):
            mounts.append((str(path), v.target))

    code = code_dir_of(spec, share)
    team = logpaths.team_dir(share, spec.vc)
    visible = [
        str(job_dir),
        *([str(code)] if code else []),
        *([str(team)] if team.is_dir() else []),
    ]
    if executor_kind in ("container", "kubernetes"):
        # what of the share it sees besides its job's directory (container.py, k8s_mounts.py)
        if code:
            mounts.append((str(code), f"{code}:ro"))
        if team.is_dir():
            mounts.append((str(team), str(team)))
    work = str(job_dir / "work" / f"{me.role}-{me.index}") if code else str(job_dir)
    env = task_env(
        job,
        spec,
        tasks,
        me,
        str(share),
        hostfile,
        user=user,
        work_dir=work,
        code_dir=str(code) if code else None,
        container_name=f"task-{task_id}" if in_container else task_id,
        volcano_hosts_dir=VOLCANO_DIR if in_container else str(vdir),
    )
    env.update(volumes)
    pasture = {k: v for k, v in env.items() if k.startswith("PASTURE_")}
    env = {**env, **spec.env, **spec.roles[me.role].env, **pasture}

    exec_dir: str | None = None  # where the task's sshd (exec's door) finds exec.env
    if wants_ssh(spec):
        own_fs = executor_kind in ("container", "kubernetes")  # a filesystem of its own
        if executor_kind not in ("process", "container", "kubernetes"):
            lines.append(
                f'echo "pasture: ssh between tasks is not available with the {executor_kind}'
                ' executor" >&2'
            )
        elif "ssh" not in me.ports:
            raise StartupError(
                "this job asks for ssh but its task has no 'ssh' port (placed by an older"
                " loop?); resubmit the job"
            )
        else:
            try:
                key = ssh.job_key(ssh_key)
            except ValueError as exc:
                raise StartupError(str(exc)) from None
            seen = CONTAINER_SSH_DIR if own_fs else str(task_dir / "ssh")
            try:  # the job's tasks' addresses, where the executor keeps them as sources
                sources = (
                    ssh.allowed_sources(tasks) + list(exec_from)
                    if executor_kind == "process" or (executor_kind == "container" and host_network)
                    else None
                )
            except ValueError as exc:
                raise StartupError(str(exc)) from None
            ssh.write_task_files(task_dir / "ssh", job, spec, tasks, me, key, seen, owner, sources)
            if own_fs:  # kubernetes: a hostPath volume (agent/k8s_mounts.py)
                mounts.append((str(task_dir / "ssh"), CONTAINER_SSH_DIR))
            env.update(ssh.ssh_env(spec, tasks, me, seen))
            exec_dir = seen
            lines.append(
                ssh.sshd_script(
                    seen,
                    required=spec.ssh,
                    in_container=own_fs,
                    user_sshd=ssh.starts_own_sshd(spec.roles[me.role].command or ""),
                )
            )
    if code:
        w, c = shlex.quote(work), shlex.quote(str(code))
        lines.append(
            f"rm -rf {w} && mkdir -p {w}/code && cp -a {c}/. {w}/code/ || "
            f'{{ echo "pasture: cannot copy code_dir {code} to {work}/code" >&2; exit 126; }}\n'
            f"cd {w} || exit 126"
        )
    role = spec.roles[me.role]
    if role.working_dir:
        d = shlex.quote(role.working_dir)
        # a missing directory is said so (diagnosis working_dir_missing), in every shell
        lines.append(
            f'[ -d {d} ] || {{ echo "pasture: working_dir "{d}" does not exist" >&2; exit 126; }}'
        )  # {d} outside the double quotes: shlex's quoting of a ' is "'", which they would end
        lines.append(f'cd {d} || {{ echo "pasture: cannot cd to "{d} >&2; exit 126; }}')
    if exec_dir is not None:  # after every cd: the directory the command starts in
        lines.append(ssh.exec_env_script(exec_dir, spec.secrets))
    command = role.command or ""
    if executor_kind == "process":  # no /etc/volcano on the node: read the job's copies
        command = local_volcano_paths(command, str(vdir))
    if lines:
        command = "# pasture start-up\n" + "\n".join(lines) + "\n# job command\n" + command
    return Startup(
        env=env,
        command=command,
        mounts=mounts,
        hostfile=hostfile,
        entrypoint=role.entrypoint,
        args=None if role.args is None else list(role.args),
        working_dir=role.working_dir,
        visible=visible,
    )
