"""The ``process`` executor: tasks as local process groups.

Each task runs as ``/bin/sh -c '( <command> ); echo $? > <state_dir>/exit'`` in its own
session (process group), stdout/stderr appended to its log file. The exit file lets an
agent restarted while the task ran learn its exit code (adoption).

When the launch names the agent's lease file, the shell runs under the lease watchdog
(:mod:`scheduler.agent.watchdog`, the group's leader): the whole group is SIGKILLed once
the agent's lease runs out, so a task never outlives a dead, hung or partitioned agent by
more than the rest of its lease plus :attr:`ProcessExecutor.kill_bound_s`, and
``<state_dir>/fenced`` says so to the agent that adopts it.

Limits and the kill unit, by what the OS offers (detected once per executor,
:func:`detect_limits`; the node reports them as labels, :meth:`ProcessExecutor.node_labels`):

- ``systemd``: when systemd is PID 1 (``/run/systemd/system`` exists, sd_booted's test) and
  ``systemd-run`` is on PATH, the task runs in a transient scope
  ``systemd-run --scope -p CPUQuota=<cores*100>% -p MemoryMax=<bytes>`` (cgroup limits:
  CPU throttled, memory OOM-killed). systemd owns the cgroup tree there, and a transient
  unit is its supported way to get a limited cgroup without ``Delegate=``, so pasture does
  not write into it; the scope is also the kill unit (the watchdog's ``--cgroup-self``).
  Enforced only when the node's cgroups are writable (true on VMs; see TESTBED.md for
  nested containers). Not testable on the build machine (no systemd as PID 1).
- ``cgroup``: otherwise, where the agent can make cgroups (:mod:`scheduler.agent.cgroup`:
  v1 ``memory.limit_in_bytes`` / v2 ``memory.max``, the build machine and CI are v1
  hybrid), a cgroup per task limits its resident memory to the request (the kernel's OOM
  killer ends a task past it: exit 137, ``oom_kill`` in the cgroup's counters, diagnosed
  ``oom_killed``) and is the unit that stop and fencing kill. No CPU limit in this mode.
- ``none``: no writable memory cgroup (the reason is logged at start): NO memory and NO CPU
  limit, and the node says so (``pasture.io/memory-limit: none``). Stop and fencing kill
  the best available: a cgroup v2 directory when one can be made even without the memory
  controller, else the process group, the session, their descendants and every process
  whose environment holds the task's ``PASTURE_TASK_UID`` (:func:`watchdog.tree_pids`).

A launch with a ``user`` (the job's VC's Unix identity, :mod:`scheduler.tenants`) runs
the command as that user (:func:`as_user`), in a mount namespace of its own where the
share shows only the launch's ``visible`` paths (:func:`private_share`, ``unshare``): the
watchdog and the shell around the command stay the agent's (root), so fencing, the
cgroup and the exit file are out of the task's reach, and the task's files,
``/proc/<pid>/environ`` and signals are out of other tenants' reach.

Never an address-space limit (RLIMIT_AS): CUDA and NCCL reserve far more virtual memory
than they use (../shared/gpu/README.md).

A task's processes end with it: :meth:`ProcessExecutor.stop` and fencing kill every process
of its kill unit, and once its command ended :meth:`ProcessExecutor.poll` kills what it
left running in its cgroups (as a container's processes die with its init) and removes
them (:meth:`ProcessExecutor.cleanup` too, for processes found by the marker).

The agent's own interpreter directory is put first on PATH, so ``python3 -m
scheduler.examples...`` runs the same Python (and package) as the agent in dev mode.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from scheduler.agent import cgroup, watchdog
from scheduler.agent.executor import Executor, ExecutorError, TaskLaunch, gpu_env
from scheduler.tenants import TenantUser

log = logging.getLogger("pasture.agent")

MEMORY_LIMIT_LABEL = "pasture.io/memory-limit"
"""Node label of process-executor nodes: how a task's memory is limited (``cgroup-v1``,
``cgroup-v2``, ``systemd`` or ``none``: no limit). Container and kubernetes nodes do not
carry it: their runtime's cgroups always limit memory."""

TASK_KILL_LABEL = "pasture.io/task-kill"
"""Node label: what stop and fencing kill (``cgroup``: every process the task started;
``process-tree``: its process group, session, descendants and marked processes)."""


def detect_limits(support: cgroup.CgroupSupport | None = None) -> str:
    """'systemd' when systemd is PID 1 and systemd-run exists, else 'cgroup' when a memory
    cgroup per task can be made (``support``, default :func:`cgroup.detect`), else 'none'."""
    if Path("/run/systemd/system").is_dir() and shutil.which("systemd-run"):
        return "systemd"
    support = support or cgroup.detect()
    return "cgroup" if support.memory != "none" else "none"


def base_env() -> dict[str, str]:
    """The agent's environment minus its own secrets, with its interpreter dir first on
    PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PASTURE_", "REDIS")) and k != "PYTHONPATH"
    }
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


COMMAND_VAR = "PASTURE_TASK_COMMAND_"
"""Environment variable that carries a tenant task's command from the agent to the shell
that runs it as the tenant (:func:`as_user`), unset before the command runs."""


def as_user(user: TenantUser) -> str:
    """The shell line that runs the task's command (in :data:`COMMAND_VAR`) as ``user``:
    util-linux ``setpriv`` with the user's uid and gid, no supplementary groups and
    ``no_new_privs`` (no setuid binary gives root back). The caller's shell stays root
    (cgroup join, exit file), its child does not. The command travels in the environment,
    not in argv: ``/proc/<pid>/cmdline`` is readable by every user of the node, a
    process' environment only by its own user (and root)."""
    return (
        f"setpriv --reuid={int(user.uid)} --regid={int(user.gid)} --clear-groups"
        f" --no-new-privs -- /bin/sh -c"
        f" 'c=${COMMAND_VAR}; unset {COMMAND_VAR}; eval \"$c\"'"
    )


def private_share(share: str, visible: list[str], read_only: list[str] | None = None) -> str:
    """Shell lines (root, in a fresh mount namespace) that hide the share ``share`` from
    the task but for the paths ``visible``: each is bind-mounted aside on a private
    tmpfs, a tmpfs covers the share, and each is moved back to its own path; then each
    path of ``read_only`` (the job's declared data) is bound onto itself and remounted
    read-only (a write there fails with EROFS), a visible path below one made writable
    again; then the shell re-enters its working directory through the new mounts. A
    task then lists
    ``<share>/jobs`` and finds its own job only. When a visible path is the share itself
    (a job that mounts the share root sees it) nothing is hidden, and "" is returned when
    nothing is read-only either. Paths are quoted as data.

    Raises:
        ExecutorError: a visible or read-only path outside ``share``.
    """
    root = os.path.normpath(share)

    def inside(p: str, what: str) -> str:
        if p != root and not p.startswith(root + "/"):
            raise ExecutorError(f"{what} path {p} is outside the share {root}")
        return p

    paths = sorted({inside(os.path.normpath(v), "visible") for v in visible})
    frozen = sorted({inside(os.path.normpath(v), "read-only") for v in read_only or []})
    q = shlex.quote
    lines = ["set -e"]
    if root not in paths:
        keep: list[str] = []
        for p in paths:
            if not any(p.startswith(k + "/") for k in keep):  # inside one kept already
                keep.append(p)
        lines += ["t=$(mktemp -d)", 'mount -t tmpfs -o mode=0700 pasture-stage "$t"']
        lines += [f'mkdir "$t/{i}" && mount --bind {q(p)} "$t/{i}"' for i, p in enumerate(keep)]
        lines.append(f"mount -t tmpfs -o mode=0755 pasture-share {q(root)}")
        lines += [f'mkdir -p {q(p)} && mount --move "$t/{i}" {q(p)}' for i, p in enumerate(keep)]
        lines.append('umount "$t" && rmdir "$t"')
    elif not frozen:
        return ""
    for p in frozen:
        lines.append(f"mount --rbind {q(p)} {q(p)} && mount -o remount,bind,ro {q(p)}")
    for p in paths:  # a writable path below declared read-only data stays writable
        if p not in frozen and any(p.startswith(f + "/") or f == root for f in frozen):
            lines.append(f"mount --bind {q(p)} {q(p)} && mount -o remount,bind,rw {q(p)}")
    lines += ["set +e", 'cd "$PWD" 2>/dev/null']
    return "\n".join(lines)


KILL_WAIT_S = 5.0
"""Seconds ``stop`` waits, after SIGKILL, for the task's processes to disappear."""

TASK_UID = "PASTURE_TASK_UID"
"""Environment variable unique to one task attempt on the node (``<task id>.<random>``): the
marker by which stop and fencing find a task's processes where there is no cgroup."""


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is in process group ``pgid``."""
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return False


class ProcessExecutor(Executor):
    """Local process groups with a cgroup per task (or a systemd scope); see the module
    docstring.

    Args:
        limits: 'auto' (detect), 'systemd', 'cgroup' or 'none' (no limit; stop and fencing
            still kill what each handle names).
    """

    kind = "process"
    kill_bound_s = watchdog.POLL_S + KILL_WAIT_S

    def __init__(self, limits: str = "auto") -> None:
        if limits not in ("auto", "systemd", "cgroup", "none"):
            raise ValueError(f"limits must be auto, systemd, cgroup or none, got {limits!r}")
        self.cgroups = cgroup.CgroupSupport("none", None, None, "disabled (limits='none')")
        if limits in ("auto", "cgroup"):
            self.cgroups = cgroup.detect()
        if limits == "auto":
            limits = detect_limits(self.cgroups)
        if limits == "cgroup" and self.cgroups.memory == "none":
            raise ExecutorError(f"no memory cgroup for tasks here: {self.cgroups.reason}")
        self.limits = limits
        if limits == "none" and self.cgroups.reason != "disabled (limits='none')":
            log.warning(
                "tasks on this node get NO memory limit (%s); stop and fencing kill %s",
                self.cgroups.reason,
                self.cgroups.kill,
            )
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def node_labels(self) -> dict[str, str]:
        """``pasture.io/memory-limit`` (:data:`MEMORY_LIMIT_LABEL`: ``systemd``,
        ``cgroup-v1``, ``cgroup-v2`` or ``none``) and ``pasture.io/task-kill``
        (:data:`TASK_KILL_LABEL`: ``cgroup`` or ``process-tree``)."""
        if self.limits == "systemd":
            return {MEMORY_LIMIT_LABEL: "systemd", TASK_KILL_LABEL: "cgroup"}
        return {MEMORY_LIMIT_LABEL: self.cgroups.memory, TASK_KILL_LABEL: self.cgroups.kill}

    def start(self, launch: TaskLaunch) -> str:
        if launch.entrypoint:
            raise ExecutorError(
                "the process executor cannot run an image's ENTRYPOINT (role with entrypoint:"
                " true); run the job on container or kubernetes executor nodes, or give the"
                " role a command"
            )
        launch.state_dir.mkdir(parents=True, exist_ok=True)
        exit_file = launch.state_dir / "exit"
        exit_file.unlink(missing_ok=True)
        dirs: list[str] = []
        if self.limits != "systemd":
            try:
                dirs = cgroup.create(self.cgroups, launch.task_id, launch.memory)
            except cgroup.CgroupError as exc:
                raise ExecutorError(str(exc)) from exc
        marker = f"{launch.task_id}.{secrets.token_hex(4)}"
        run = f"(\n{launch.command}\n)"
        if launch.user is not None:  # the tenant's identity; the cgroup joined as root first
            run = as_user(launch.user)
            hide = (
                private_share(str(launch.share_dir), launch.visible, launch.read_only)
                if launch.visible
                else ""
            )
            if hide:  # a mount namespace of its own where the share shows only its paths
                run = "unshare --mount --propagation private -- /bin/sh -c " + shlex.quote(
                    f"{hide}\nexec {run}"
                )
        script = (
            f"{cgroup.join_script(dirs)}\n"
            f"{run}\nrc=$?\necho $rc > {shlex.quote(str(exit_file))}.tmp"
            f" && mv {shlex.quote(str(exit_file))}.tmp {shlex.quote(str(exit_file))}\n"
            "exit $rc\n"
        )
        argv = ["/bin/sh", "-c", script]
        fenced_file = launch.state_dir / "fenced"
        fenced_file.unlink(missing_ok=True)
        if launch.lease_file is not None:
            unit = ["--cgroup-self"] if self.limits == "systemd" else []
            argv = [
                sys.executable,
                "-S",
                watchdog.__file__,
                str(launch.lease_file),
                str(fenced_file),
                *[a for d in dirs for a in ("--cgroup", d)],
                *unit,
                "--marker",
                f"{TASK_UID}={marker}",
                "--",
                *argv,
            ]
        if self.limits == "systemd":
            argv = [
                "systemd-run",
                "--scope",
                "--quiet",
                "--collect",
                f"--unit=pasture-{launch.task_id}",
                "-p",
                f"CPUQuota={max(1, launch.cpu_m // 10)}%",
                "-p",
                f"MemoryMax={launch.memory}",
                "--",
                *argv,
            ]
        env = base_env()
        env.update(launch.env)
        env.update(gpu_env([str(g) for g in launch.gpus]))
        env[TASK_UID] = marker
        if launch.user is not None:
            env.update(HOME=launch.user.home, USER=launch.user.name, LOGNAME=launch.user.name)
            env[COMMAND_VAR] = launch.command
        cwd = env.get("PASTURE_JOB_DIR") or str(launch.share_dir)
        try:
            Path(cwd).mkdir(parents=True, exist_ok=True)
            # read-write append: smbnetfs shares fail write-only appends (log_redirect)
            with open(launch.log_path, "a+b") as log_file:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                )
        except OSError as exc:
            with contextlib.suppress(OSError):
                cgroup.remove(dirs)
            raise ExecutorError(f"cannot start {argv[0]}: {exc}") from exc
        self._children[proc.pid] = proc
        create_time = psutil.Process(proc.pid).create_time()
        h: dict[str, Any] = {
            "pid": proc.pid,
            "create_time": create_time,
            "exit_file": str(exit_file),
            "fenced_file": str(fenced_file),
            "cgroups": dirs,
            "marker": f"{TASK_UID}={marker}",
            "memory_limit": self.node_labels()[MEMORY_LIMIT_LABEL],
        }
        if self.limits == "systemd":
            h["unit"] = f"pasture-{launch.task_id}.scope"
        return json.dumps(h)

    def _alive(self, h: dict[str, Any]) -> bool:
        child = self._children.get(h["pid"])
        if child is not None:
            return child.poll() is None
        try:
            p = psutil.Process(h["pid"])
            return (
                abs(p.create_time() - h["create_time"]) < 0.01
                and p.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False

    def _unit(self, h: dict[str, Any]) -> list[str]:
        """The task's kill-unit cgroup directories: those the handle names, or those of its
        systemd scope (read from the leader while it lives; only directories named after
        the unit, never the agent's own)."""
        if h.get("cgroups"):
            return list(h["cgroups"])
        unit = h.get("unit")
        if unit and self._alive(h):
            return [d for d in watchdog.own_cgroup_dirs(h["pid"]) if d.endswith("/" + unit)]
        return []

    def poll(self, handle: str) -> int | None:
        """None while the task's leader lives, else its exit code. When it ended, what it
        left running is killed and its cgroups are removed (their OOM count kept for
        :meth:`evidence`), so a task's cgroup lives exactly as long as the task."""
        h = json.loads(handle)
        if self._alive(h):
            return None
        child = self._children.pop(h["pid"], None)
        self._end_cgroups(h)
        try:
            return int(Path(h["exit_file"]).read_text().strip())
        except (OSError, ValueError):
            pass
        if child is not None and child.returncode is not None:
            rc = child.returncode
            return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N like a shell
        return -1

    @staticmethod
    def _evidence_file(h: dict[str, Any]) -> Path:
        return Path(h["exit_file"]).with_name("oom_killed")

    def _end_cgroups(self, h: dict[str, Any]) -> None:
        """Record the OOM count of a finished task's cgroups (``<state_dir>/oom_killed``),
        then kill what is left in them and remove them; one still busy stays for
        :meth:`cleanup`."""
        dirs = [d for d in h.get("cgroups") or [] if os.path.isdir(d)]
        if not dirs:
            return
        with contextlib.suppress(OSError):
            self._evidence_file(h).write_text("1" if cgroup.oom_killed(dirs) else "0")
        try:
            cgroup.remove(dirs, KILL_WAIT_S)
        except cgroup.CgroupError as exc:
            log.warning("task cgroup left behind: %s", exc)

    def _reap(self, h: dict[str, Any]) -> None:
        child = self._children.get(h["pid"])
        if child is not None:
            child.poll()  # reap the leader so it does not count as alive

    def stop(self, handle: str, grace_s: float) -> None:
        """SIGTERM to every process of the task's kill unit (its cgroups, else its process
        tree) and its process group, up to ``grace_s`` seconds for all of them to exit,
        then SIGKILL to all (cgroup v2: ``cgroup.kill``) until none is left, at most
        :data:`KILL_WAIT_S` more. ``setsid`` children and processes started over the
        task's ssh are in the unit, so they go too."""
        h = json.loads(handle)
        dirs, marker = self._unit(h), h.get("marker")
        # the process group / session only while its leader is the task's (never a reused
        # PID); without it the cgroups, or the marker, still find what is left
        pgid = h["pid"] if self._alive(h) else 0
        if not pgid and not watchdog.task_pids(dirs, pgid, marker):
            return
        watchdog.signal_task(dirs, pgid, marker, signal.SIGTERM)
        if pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        # wait for the whole unit, not just the leader: a task's own processes may still
        # be handling SIGTERM after the wrapper shell died
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self._reap(h)
            if not watchdog.task_pids(dirs, pgid, marker) and not (pgid and _group_alive(pgid)):
                break
            time.sleep(0.05)
        # SIGKILL the unit and the group even when the leader is gone: children may linger.
        # SIGKILL is delivered asynchronously: on a loaded node a killed process can still
        # look alive for a moment. Return once all are gone (bounded), so that a stopped
        # task's processes are really gone when the agent reports it stopped.
        end = time.monotonic() + KILL_WAIT_S
        watchdog.kill_task(dirs, pgid, marker, KILL_WAIT_S)
        if h.get("cgroups"):  # a stopped task needs no evidence: its cgroups go with it
            with contextlib.suppress(cgroup.CgroupError):
                cgroup.remove(list(h["cgroups"]), 0.0)
        if not pgid:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        child = self._children.get(h["pid"])
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(max(0.1, end - time.monotonic()))
        while _group_alive(pgid) and time.monotonic() < end:
            time.sleep(0.05)

    def fenced(self, handle: str) -> bool:
        h = json.loads(handle)
        return bool(h.get("fenced_file")) and Path(h["fenced_file"]).exists()

    def cleanup(self, handle: str) -> None:
        """Kill what the finished task left running (its cgroups' processes, or the
        processes carrying its marker), remove its cgroups and its exit / fenced files."""
        h = json.loads(handle)
        self._children.pop(h["pid"], None)
        try:
            if h.get("cgroups"):
                cgroup.remove(list(h["cgroups"]), KILL_WAIT_S)
            elif h.get("marker"):
                watchdog.kill_task([], 0, h["marker"], KILL_WAIT_S)
        except cgroup.CgroupError as exc:
            log.warning("task cgroup left behind: %s", exc)
        with contextlib.suppress(OSError):
            Path(h["exit_file"]).unlink(missing_ok=True)
            self._evidence_file(h).unlink(missing_ok=True)
        if h.get("fenced_file"):
            with contextlib.suppress(OSError):
                Path(h["fenced_file"]).unlink(missing_ok=True)

    def evidence(self, handle: str) -> dict[str, Any]:
        """``{"memory_limit": "cgroup-v1" | "cgroup-v2" | "systemd" | "none",
        "oom_killed": bool}``: how the task's memory was limited (the node's
        ``pasture.io/memory-limit`` when it started) and whether the kernel's OOM killer
        ended a process of it (its memory cgroup's ``oom_kill`` count; for a systemd scope,
        the kernel's ``oom-kill`` line naming the scope), for :mod:`scheduler.rules.diagnosis`.
        Call after :meth:`poll` returned the exit code and before :meth:`cleanup`."""
        h = json.loads(handle)
        limit = str(h.get("memory_limit", "none"))
        if limit.startswith("cgroup"):
            try:  # recorded by poll when the task ended and its cgroups were removed
                oom = self._evidence_file(h).read_text().strip() == "1"
            except OSError:
                oom = cgroup.oom_killed(h["cgroups"])
            return {"memory_limit": limit, "oom_killed": oom}
        if h.get("unit"):
            return {
                "memory_limit": limit,
                "oom_killed": cgroup.kernel_oom_killed(re.escape(h["unit"])),
            }
        return {"memory_limit": limit}
