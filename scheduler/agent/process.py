"""The ``process`` executor: tasks as local process groups.

Each task runs as ``/bin/sh -c '( <command> ); echo $? > <state_dir>/exit'`` in its own
session (process group), stdout/stderr appended to its log file. The exit file lets an
agent restarted while the task ran learn its exit code (adoption).

When the launch names the agent's lease file, the shell runs under the lease watchdog
(:mod:`scheduler.agent.watchdog`, the group's leader): the whole group is SIGKILLed once
the agent's lease runs out, so a task never outlives a dead, hung or partitioned agent by
more than the rest of its lease plus :attr:`ProcessExecutor.kill_bound_s`, and
``<state_dir>/fenced`` says so to the agent that adopts it.

Resource limits, by what the OS offers (detected once per executor):

- ``systemd``: when systemd is PID 1 (``/run/systemd/system`` exists, sd_booted's test) and
  ``systemd-run`` is on PATH, the task runs in a transient scope
  ``systemd-run --scope -p CPUQuota=<cores*100>% -p MemoryMax=<bytes>`` (cgroup limits:
  CPU throttled, memory OOM-killed). Enforced only when the node's cgroups are writable
  (true on VMs; see TESTBED.md for nested containers).
- ``rlimit``: otherwise (containers without systemd, this build machine) the address-space
  limit RLIMIT_AS is set to the memory request before exec; allocations beyond it fail
  inside the task. There is NO CPU limit in this mode.

The agent's own interpreter directory is put first on PATH, so ``python3 -m
scheduler.examples...`` runs the same Python (and package) as the agent in dev mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from scheduler.agent import watchdog
from scheduler.agent.executor import Executor, ExecutorError, TaskLaunch


def detect_limits() -> str:
    """'systemd' when systemd is PID 1 and systemd-run exists, else 'rlimit'."""
    if Path("/run/systemd/system").is_dir() and shutil.which("systemd-run"):
        return "systemd"
    return "rlimit"


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


KILL_WAIT_S = 5.0
"""Seconds ``stop`` waits, after SIGKILL, for the task's process group to disappear."""


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
    """Local process groups with cgroup (systemd) or rlimit limits; see module docstring.

    Args:
        limits: 'auto' (detect), 'systemd', 'rlimit' or 'none'.
    """

    kind = "process"
    kill_bound_s = watchdog.POLL_S + KILL_WAIT_S

    def __init__(self, limits: str = "auto") -> None:
        self.limits = detect_limits() if limits == "auto" else limits
        self._children: dict[int, subprocess.Popen[bytes]] = {}

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
        script = (
            f"(\n{launch.command}\n)\nrc=$?\necho $rc > {shlex.quote(str(exit_file))}.tmp"
            f" && mv {shlex.quote(str(exit_file))}.tmp {shlex.quote(str(exit_file))}\n"
            "exit $rc\n"
        )
        argv = ["/bin/sh", "-c", script]
        fenced_file = launch.state_dir / "fenced"
        fenced_file.unlink(missing_ok=True)
        preexec = None
        rlimit = self.limits == "rlimit"
        if launch.lease_file is not None:
            argv = [
                sys.executable,
                "-S",
                watchdog.__file__,
                str(launch.lease_file),
                str(fenced_file),
                *(["--as", str(launch.memory)] if rlimit else []),
                "--",
                *argv,
            ]
            rlimit = False  # the watchdog limits the task, not itself
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
        elif rlimit:
            mem = launch.memory

            def preexec() -> None:
                resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

        env = base_env()
        env.update(launch.env)
        if launch.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in launch.gpus)
        cwd = env.get("PASTURE_JOB_DIR") or str(launch.share_dir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        try:
            # read-write append: smbnetfs shares fail write-only appends (log_redirect)
            with open(launch.log_path, "a+b") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
        except OSError as exc:
            raise ExecutorError(f"cannot start {argv[0]}: {exc}") from exc
        self._children[proc.pid] = proc
        create_time = psutil.Process(proc.pid).create_time()
        return json.dumps(
            {
                "pid": proc.pid,
                "create_time": create_time,
                "exit_file": str(exit_file),
                "fenced_file": str(fenced_file),
            }
        )

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

    def poll(self, handle: str) -> int | None:
        h = json.loads(handle)
        if self._alive(h):
            return None
        child = self._children.pop(h["pid"], None)
        try:
            return int(Path(h["exit_file"]).read_text().strip())
        except (OSError, ValueError):
            pass
        if child is not None and child.returncode is not None:
            rc = child.returncode
            return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N like a shell
        return -1

    def stop(self, handle: str, grace_s: float) -> None:
        h = json.loads(handle)
        if not self._alive(h):
            return
        pgid = h["pid"]
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        # wait for the whole group, not just the leader: a task's own processes may still
        # be handling SIGTERM after the wrapper shell died
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            child = self._children.get(h["pid"])
            if child is not None:
                child.poll()  # reap the leader so it does not count as alive
            if not _group_alive(pgid):
                break
            time.sleep(0.05)
        # SIGKILL the group even when the leader is gone: children may linger.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        child = self._children.get(h["pid"])
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(5)
        # SIGKILL is delivered asynchronously: on a loaded node a killed process can still
        # look alive for a moment. Return once the group is gone (bounded), so that a
        # stopped task's processes are really gone when the agent reports it stopped.
        deadline = time.monotonic() + KILL_WAIT_S
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def fenced(self, handle: str) -> bool:
        h = json.loads(handle)
        return bool(h.get("fenced_file")) and Path(h["fenced_file"]).exists()

    def cleanup(self, handle: str) -> None:
        h = json.loads(handle)
        self._children.pop(h["pid"], None)
        with contextlib.suppress(OSError):
            Path(h["exit_file"]).unlink(missing_ok=True)
        if h.get("fenced_file"):
            with contextlib.suppress(OSError):
                Path(h["fenced_file"]).unlink(missing_ok=True)

    def evidence(self, handle: str) -> dict[str, Any]:
        """``{"memory_limit": "rlimit" | "systemd"}``: how the task's memory was limited
        (with ``rlimit`` an allocation past the limit fails inside the task, MemoryError /
        std::bad_alloc, rather than a kill), for :mod:`scheduler.diagnosis`."""
        return {"memory_limit": self.limits}
