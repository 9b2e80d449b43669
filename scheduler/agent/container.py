"""The ``container`` executor: each task is a podman (or docker) container.

``<cli> run -d --init --pull=never --network host --cpus N --memory M --name task-<id>``
with what of the share the task may see bind-mounted at the same paths (its job's
directory, its code dir read-only, its VC's team directory: never the share root;
:func:`scheduler.agent.startup.prepare`), the job's mounts (share sub-directories),
GPUs as CDI devices (``--device nvidia.com/gpu=<index>``, inside the container they are
numbered from 0, so CUDA_VISIBLE_DEVICES is ``0..n-1``) and the environment in an env file
(``--env-file``). The container runs ``/bin/sh -c '<command>'`` (``--entrypoint
/bin/sh``: as in Kubernetes, a command replaces the image's ENTRYPOINT) with stdout/stderr
appended to the task's log in the share. A role with ``entrypoint: true`` runs the image's
own ENTRYPOINT: the script ends with ``exec <ENTRYPOINT> <args or CMD>``, read with
``<cli> image inspect`` (Kubernetes semantics: ``args`` replace CMD), and the container
starts in the image's WORKDIR unless the role sets ``working_dir``.
A launch with a ``user`` (the job's VC's Unix identity) runs in a user namespace of that
VC (:func:`user_namespace_args`): ``--uidmap 0:<uid>:65536 --gidmap 0:<gid>:65536`` maps
the container's ids 0..65535 onto the VC's own range of host ids
(:func:`scheduler.tenants.id_range`), the command runs as the container's root (``--user
0:0``: Volcano's MPI examples write ``/etc/ssh`` and start sshd) and
``no-new-privileges``. Root inside is the VC's user on the host, so everything the task
writes on the share belongs to the VC's uid (or, written as another id inside, to the VC's
range), and its capabilities reach no file of another tenant (the kernel honours them only
for files whose owner is mapped in the namespace): the kernel refuses another tenant's
container what the mounts would not hide. One contiguous range per map lets podman mount
the image's layers idmapped where its storage can (else it copies the image's top layer
once per VC, chowned, and reuses the copy; docs/runtime-env.md has the figures); a
root-less podman, or one whose node container lacks ``CAP_SYS_PTRACE`` (runc opens its
child's namespaces), cannot create the namespace and the task fails to start with
podman's message.
``--init`` makes SIGTERM reach the command even when it does not handle signals;
``--pull=never`` because nodes load images explicitly (``pasture image push``). The
container (not the agent) keeps the exit code, so an agent restarted while tasks run
finds them again by name (adoption); ``cleanup`` removes the container.

Fencing without the agent (docs/faults.md): when the launch names the agent's lease file,
each running container has a lease watchdog in watch mode (:mod:`scheduler.agent.watchdog`,
``--watch``): a small detached process, in a session of its own outside the agent's
process group (the agent's systemd unit has ``KillMode=process``, so a restart leaves it
too), that SIGKILLs the container's init (its host PID, so the whole container's PID
namespace) and runs ``<cli> kill`` once the lease file's deadline passed or the file is
gone, and writes ``<state_dir>/fenced``. The executor starts it after ``run`` and, on every
:meth:`ContainerExecutor.poll` of a running container, starts it again when none holds the
task's ``<state_dir>/watchdog.lock`` (an agent restarted after its node rebooted, or after
someone killed the watchdog); the watchdog's ``flock`` keeps it to one per task, and it
exits by itself when the container ends, so a restarted agent that adopts or kills its
containers leaves neither duplicates nor orphans. Why not the attached ``podman run`` under
the run-mode watchdog: SIGKILLing an attached podman client leaves the container running
(conmon, not the client, owns it), so that watchdog would still need this kill path, and
would keep one podman client process per task alive for nothing.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from scheduler import logpaths, tenants
from scheduler.agent import cgroup, watchdog
from scheduler.agent.executor import (
    Executor,
    ExecutorError,
    TaskLaunch,
    gpu_env,
    log_redirect,
)

log = logging.getLogger("pasture.agent")


class ContainerExecutor(Executor):
    """Tasks as containers through the podman / docker CLI.

    Args:
        cli: ``podman`` or ``docker`` (any CLI with the docker run/inspect/stop/rm syntax).
        network: ``host`` (tasks reach each other at the node's address) or a network name.
    """

    kind = "container"

    def __init__(self, cli: str = "podman", network: str = "host") -> None:
        self.cli = cli
        self.network = network
        self._watchdogs: dict[str, subprocess.Popen[bytes]] = {}  # by container name, to reap

    def _run(
        self, *args: str, timeout: float = 60, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        # cwd: conmon (podman's container monitor) inherits it and writes a file named
        # ``oom`` there when the container is OOM-killed; ``run`` passes the task's state
        # directory so that file never lands in the agent's (or a test's) working directory
        try:
            return subprocess.run(
                [self.cli, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=cwd,
            )
        except FileNotFoundError as exc:
            raise ExecutorError(f"container CLI {self.cli!r} not found on PATH") from exc

    def argv(self, launch: TaskLaunch, env_file: str) -> list[str]:
        """The ``run`` arguments for ``launch`` (after the CLI name)."""
        if not launch.image:
            raise ExecutorError("the container executor needs an image (job or role 'image')")
        share = str(launch.share_dir)
        job_dir = logpaths.job_dir(share, launch.job)
        job_dir.mkdir(parents=True, exist_ok=True)
        args = [
            "run",
            "-d",
            "--init",
            "--pull=never",
            "--network",
            self.network,
            "--name",
            f"task-{launch.task_id}",
            "--label",
            f"pasture.task={launch.task_id}",
            "--label",
            f"pasture.job={launch.job}",
            "--cpus",
            f"{launch.cpu_m / 1000:g}",
            "--memory",
            str(launch.memory),
            "--env-file",
            env_file,
            "--entrypoint",
            "/bin/sh",
            "-v",  # the job's directory, not the share: logs, output, hostfiles live there
            f"{job_dir}:{job_dir}",
        ]
        if launch.user is not None:  # the VC's Unix identity, as root of its namespace
            args += user_namespace_args(launch.user)
        if not launch.entrypoint:  # an entrypoint role starts in the image's WORKDIR
            args += ["-w", launch.env.get("PASTURE_JOB_DIR", share)]
        for host, target in launch.mounts:
            args += ["-v", f"{host}:{target}"]
        for gpu in launch.gpus:
            args += ["--device", f"nvidia.com/gpu={gpu}"]
        script = f"{log_redirect(launch.log_path)}\n{launch.command}"
        if launch.entrypoint:
            script += "\nexec " + shlex.join(self.entrypoint_argv(launch.image, launch.args))
        return [*args, launch.image, "-c", script]

    def entrypoint_argv(self, image: str, args: list[str] | None) -> list[str]:
        """The image's ENTRYPOINT followed by ``args``, or by its CMD when ``args`` is None
        (Kubernetes: a container with ``args`` and no ``command``). Raises ExecutorError
        when the image is absent or has neither."""
        res = self._run(
            "image",
            "inspect",
            "--format",
            "{{json .Config.Entrypoint}}\t{{json .Config.Cmd}}",
            image,
        )
        if res.returncode != 0:
            raise ExecutorError(f"cannot read image {image}: {res.stderr.strip()[-300:]}")
        entry, _, cmd = res.stdout.strip().partition("\t")
        tail = (json.loads(cmd or "null") or []) if args is None else args
        argv = [*(json.loads(entry or "null") or []), *tail]
        if not argv:
            raise ExecutorError(f"image {image} has no ENTRYPOINT or CMD to run")
        return [str(a) for a in argv]

    def start(self, launch: TaskLaunch) -> str:
        launch.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(launch.env)
        # CDI exposes only the task's devices, numbered from 0; a task without GPUs also
        # gets NVIDIA_VISIBLE_DEVICES=void, so that an image's own NVIDIA_VISIBLE_DEVICES=all
        # (the CUDA base images) and a legacy nvidia-container-runtime hook expose none
        env.update(gpu_env([str(i) for i in range(len(launch.gpus))]))
        if not launch.gpus:
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        env_file = launch.state_dir / "env"
        # 0600 and removed once read: it may hold the job's secrets (scheduler/sealed.py)
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in env.items() if "\n" not in v))
        name = f"task-{launch.task_id}"
        self._run("rm", "-f", name)  # a leftover of a crashed start
        fenced = launch.state_dir / "fenced"
        fenced.unlink(missing_ok=True)
        try:
            res = self._run(*self.argv(launch, str(env_file)), cwd=launch.state_dir)
        finally:
            env_file.unlink(missing_ok=True)
        if res.returncode != 0:
            raise ExecutorError(f"{self.cli} run failed: {res.stderr.strip()[-500:]}")
        h = {"name": name}
        if launch.lease_file is not None:
            h |= {
                "lease_file": str(launch.lease_file),
                "fenced_file": str(fenced),
                "lock_file": str(launch.state_dir / "watchdog.lock"),
            }
            handle = json.dumps(h)
            self.poll(handle)  # starts the container's lease watchdog while it runs
            return handle
        return json.dumps(h)

    def ensure_watchdog(self, handle: str, pid: int) -> int | None:
        """Start the lease watchdog of the container whose init is host PID ``pid``
        unless one runs already (its lock is held) or the handle names no lease. Returns
        the new watchdog's PID, None when none was started."""
        h = json.loads(handle)
        mine = self._watchdogs.get(h["name"])
        if "lock_file" not in h or pid <= 0 or (mine is not None and mine.poll() is None):
            return None  # no lease, no process, or the one this executor started still runs
        if watchdog.watched(h["lock_file"]):
            return None
        start = watchdog.start_time(pid)
        if start is None:
            return None  # already gone
        argv = [
            sys.executable,
            "-S",
            watchdog.__file__,
            h["lease_file"],
            h["fenced_file"],
            "--watch",
            str(pid),
            start,
            h["lock_file"],
            "--",
            self.cli,
            "kill",
            "--signal",
            "KILL",
            h["name"],
        ]
        try:
            Path(h["lock_file"]).parent.mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # outside the agent's process group: outlives it
            )
        except OSError as exc:  # the next poll tries again; the agent's fence still holds
            log.warning("cannot start the lease watchdog of %s: %s", h["name"], exc)
            return None
        self._watchdogs[h["name"]] = proc
        return proc.pid

    def poll(self, handle: str) -> int | None:
        name = json.loads(handle)["name"]
        for n, p in list(self._watchdogs.items()):  # reap the ones that exited
            if p.poll() is not None:
                del self._watchdogs[n]
        res = self._run(
            "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.State.Pid}}", name
        )
        if res.returncode != 0:
            return -1  # removed behind our back
        status, code, pid = (res.stdout.split() + ["", "", "0"])[:3]
        if status == "running":
            self.ensure_watchdog(handle, int(pid or 0))
        if status in (
            "running",
            "created",
            "configured",
            "initialized",
            "paused",
            "restarting",
            "stopping",
        ):
            return None
        return int(code or -1)

    def stop(self, handle: str, grace_s: float) -> None:
        name = json.loads(handle)["name"]
        self._run("stop", "-t", str(int(max(0, grace_s))), name, timeout=grace_s + 60)

    def kill(self, handle: str) -> None:
        """SIGKILL the container now (fencing), bounded by :attr:`kill_bound_s`."""
        name = json.loads(handle)["name"]
        try:
            self._run("kill", "--signal", "KILL", name, timeout=self.kill_bound_s)
        except subprocess.TimeoutExpired:
            log.warning("%s kill %s did not return within %g s", self.cli, name, self.kill_bound_s)

    def evidence(self, handle: str) -> dict[str, Any]:
        """``{"oom_killed": bool}``: the cgroup's OOM killer ended the container, by
        ``inspect .State.OOMKilled`` or, when the runtime did not notice (podman with runc
        on cgroup v1 reports false), by the kernel's ``oom-kill:... oom_memcg=...<id>``
        line for this container's cgroup (:func:`kernel_oom_killed`). ``{}`` when the
        container is gone."""
        name = json.loads(handle)["name"]
        res = self._run("inspect", "--format", "{{.State.OOMKilled}} {{.Id}}", name)
        if res.returncode != 0:
            return {}
        flag, _, cid = res.stdout.strip().partition(" ")
        return {"oom_killed": flag.lower() == "true" or kernel_oom_killed(cid)}

    def fenced(self, handle: str) -> bool:
        """Whether the container's lease watchdog killed it (``<state_dir>/fenced``)."""
        h = json.loads(handle)
        return bool(h.get("fenced_file")) and Path(h["fenced_file"]).exists()

    def cleanup(self, handle: str) -> None:
        h = json.loads(handle)
        self._run("rm", "-f", h["name"])
        for key in ("fenced_file", "lock_file"):
            if h.get(key):
                Path(h[key]).unlink(missing_ok=True)


def user_namespace_args(user: tenants.TenantUser) -> list[str]:
    """The ``run`` options of a task run as ``user`` (its VC's identity): a user namespace
    whose ids 0..65535 are the host ids ``user.uid`` .. ``user.uid + 65535`` (and the
    same for gids), the command as its root, ``no-new-privileges``.

    Raises:
        ExecutorError: ``user``'s uid or gid is not the first id of its VC's range
            (:func:`scheduler.tenants.id_range`): a user made by hand or by an older role,
            whose namespace could reach ids of another VC or of the system.
    """
    want = tenants.id_range(user.vc)
    for what, first in (("uid", user.uid), ("gid", user.gid)):
        if first != want.start:
            raise ExecutorError(
                f"user {user.name!r} (VC {user.vc!r}) has {what} {first}, not the first id"
                f" {want.start} of the VC's id range; remove the user and run the"
                " pasture_node role again"
            )
    n = len(want)
    return [
        "--uidmap",
        f"0:{user.uid}:{n}",
        "--gidmap",
        f"0:{user.gid}:{n}",
        "--user",
        "0:0",
        "--security-opt",
        "no-new-privileges",
    ]


def kernel_oom_killed(container_id: str) -> bool:
    """Whether the kernel log has an ``oom-kill:`` line whose ``oom_memcg`` is this
    container's cgroup (its path ends in ``libpod-<id>``, ``docker-<id>`` or
    ``docker/<id>``): :func:`scheduler.agent.cgroup.kernel_oom_killed`.
    False when unreadable or ``container_id`` is no container ID."""
    if not re.fullmatch(r"[0-9a-f]{12,64}", container_id or ""):
        return False
    return cgroup.kernel_oom_killed(container_id)
