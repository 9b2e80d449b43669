"""Lease watchdog of one task: the task dies when its agent's lease does.

Two modes, one rule (the lease file), standard library only.

**Run mode** (process executor):
``python -S watchdog.py LEASE_FILE FENCED_FILE [--cgroup DIR]... [--cgroup-self]
[--marker TEXT] -- ARGV...`` runs ARGV as a child in the watchdog's own process group (the
executor starts the watchdog as a session leader) and checks ``LEASE_FILE`` every
:data:`POLL_S` seconds. The agent writes that file after every
heartbeat the store answered: ``{"deadline": <CLOCK_MONOTONIC seconds>}``, the moment its
lease runs out (CLOCK_MONOTONIC is one clock for the whole machine). When the deadline has
passed, or the file is missing or unreadable, the watchdog writes ``FENCED_FILE`` and
SIGKILLs its whole process group, itself included: the agent died, hung or lost the store,
and the loop may soon run the task elsewhere (docs/faults.md). What it kills is the task's
*kill unit* (:func:`kill_task`): every process in the task's cgroups (``--cgroup DIR``, the
directories :mod:`scheduler.agent.cgroup` made, which the task's shell joined; or
``--cgroup-self``, the cgroups the watchdog itself is in: a systemd scope), so that
``setsid`` children and processes started over the task's ssh die too; without a cgroup the
best available, the process group, the session, their descendants and every process whose
environment holds ``--marker`` (:func:`tree_pids`). Then its own process group. When the
child exits first, the watchdog exits with the child's status.

**Watch mode** (container executor): ``python -S watchdog.py LEASE_FILE FENCED_FILE --watch
PID START LOCK_FILE -- KILL_ARGV...`` supervises a process it did not start: the
container's init (``inspect .State.Pid``, a host PID; ``START`` is its start time from
``/proc/PID/stat``, so a reused PID is never mistaken for it). The executor starts it in a
session of its own, outside the agent's process group, so it outlives a SIGKILLed agent.
It takes an exclusive ``flock`` on ``LOCK_FILE`` first and exits at once when another
watchdog holds it (at most one per task, whoever starts it: the executor, or a restarted
agent that adopts the container). While the process lives and the lease holds it sleeps;
when the process is gone it exits 0; when the lease expired (or its file is gone) it writes
``FENCED_FILE``, SIGKILLs the PID (the init of the container's PID namespace: the kernel
kills every process of the namespace with it), runs ``KILL_ARGV`` (``podman kill`` by
name, bounded by :data:`KILL_CMD_TIMEOUT_S`, for runtimes whose init this user may not
signal), waits up to :data:`KILL_WAIT_S` for the PID to disappear and exits 1.

**Pod mode** (kubernetes executor): ``python -m scheduler.agent.watchdog LEASE_FILE
FENCED_FILE --pod`` is the fence sidecar of a task pod (``shareProcessNamespace: true``, the
agent's work dir mounted from the node; :func:`scheduler.agent.kubernetes.build_pod`).
While the lease holds it sleeps; once it expired (or its file is gone) it writes
``FENCED_FILE`` and sends SIGKILL to every process it may signal in its PID namespace
(``kill(-1)``: the task container's processes; the kernel spares the caller and the
namespace's init, the pod's pause process), then waits for SIGTERM (the pod ending), so
that a restartable sidecar is not restarted into a loop. It refuses to run in the
machine's initial PID namespace (exit 2), where ``kill(-1)`` would reach every process.

So a task outlives a dead agent by at most the rest of its lease plus :data:`POLL_S` (and
the kill), and an agent restarted within its lease adopts its tasks as before. Run without
``site`` (``-S``): it starts in tens of milliseconds and does not import the scheduler
package.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

POLL_S = 0.25
"""Seconds between two checks of the lease file."""

KILL_WAIT_S = 5.0
"""Watch mode: seconds to wait, after SIGKILL, for the watched process to disappear."""

KILL_CMD_TIMEOUT_S = 4.0
"""Watch mode: seconds the runtime's kill command (``podman kill``) may take."""

LOCK_TRIES_S = 1.0
"""Watch mode: seconds to retry a busy lock before concluding another watchdog holds it
(an executor's :func:`watched` probe holds it for microseconds)."""


def lease_deadline(path: str) -> float | None:
    """The lease's CLOCK_MONOTONIC deadline from ``path``, None when missing or unreadable."""
    try:
        with open(path) as f:
            return float(json.load(f)["deadline"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_time(pid: int) -> str | None:
    """Start time of process ``pid`` (``/proc/PID/stat`` field 22, clock ticks since
    boot) as a string; None when there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _lock(path: str, tries_s: float) -> int | None:
    """An open descriptor holding an exclusive flock on ``path``, None when another holder
    kept it for ``tries_s`` seconds."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    end = time.monotonic() + tries_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= end:
                os.close(fd)
                return None
            time.sleep(0.05)


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgrp, session)`` of process ``pid`` from ``/proc/PID/stat``; None
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def cgroup_pids(dirs: Sequence[str]) -> set[int]:
    """PIDs listed in ``cgroup.procs`` of each cgroup directory in ``dirs`` (missing or
    unreadable ones list none)."""
    pids: set[int] = set()
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return pids


def tree_pids(pgid: int, marker: str | None) -> set[int]:
    """A task's processes where it has no cgroup (the best available, by ``/proc``): those
    in process group or session ``pgid`` (the task's leader started a session of its own),
    every process whose environment holds the line ``marker`` (``PASTURE_TASK_UID=...``:
    daemons that left both and were re-parented), and all their descendants. A process
    that left the session and the tree and cleared its environment is missed."""
    table: dict[int, tuple[str, int, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                table[int(name)] = st
    # pgid <= 1: no group of a task (kernel threads have session 0, init is 1)
    roots = {pid for pid, st in table.items() if pgid > 1 and pgid in (st[2], st[3])}
    if marker:
        needle = b"\0" + marker.encode() + b"\0"
        for pid in table:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in b"\0" + f.read():
                        roots.add(pid)
            except OSError:
                continue
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        children.setdefault(st[1], []).append(pid)
    out: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid not in out:
            out.add(pid)
            stack.extend(children.get(pid, []))
    return out


def own_cgroup_dirs(pid: int | str = "self") -> list[str]:
    """The directories of the cgroups process ``pid`` is in that can list and kill all of
    its tree: the unified (v2) one (``/sys/fs/cgroup`` or, on hybrid hosts,
    ``/sys/fs/cgroup/unified``) and systemd's v1 ``name=systemd`` one; never a hierarchy's
    root. Used for a task in a systemd scope (``--cgroup-self``)."""
    dirs: list[str] = []
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return dirs
    unified = (
        "/sys/fs/cgroup"
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        else "/sys/fs/cgroup/unified"
    )
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            base = unified
        elif "name=systemd" in controllers.split(","):
            base = "/sys/fs/cgroup/systemd"
        else:
            continue
        if path not in ("", "/") and os.path.isdir(base + path):
            dirs.append(base + path)
    return dirs


def live(pids: set[int]) -> set[int]:
    """The PIDs of ``pids`` that exist and are no zombie, the caller excluded."""
    me = os.getpid()
    return {p for p in pids if p != me and (st := _proc_stat(p)) is not None and st[0] not in "ZX"}


def task_pids(dirs: Sequence[str], pgid: int, marker: str | None) -> set[int]:
    """The live processes of a task's kill unit: everything in its cgroups ``dirs`` or,
    without any, :func:`tree_pids` of its process group / session ``pgid``."""
    return live(cgroup_pids(dirs) if dirs else tree_pids(pgid, marker))


def signal_task(dirs: Sequence[str], pgid: int, marker: str | None, sig: int) -> set[int]:
    """Send ``sig`` to every process of the task's kill unit (:func:`task_pids`); returns
    the PIDs signalled."""
    pids = task_pids(dirs, pgid, marker)
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, sig)
    return pids


def kill_task(dirs: Sequence[str], pgid: int, marker: str | None, wait_s: float) -> bool:
    """SIGKILL every process of a task's kill unit until none is left, at most ``wait_s``
    seconds: cgroup v2's ``cgroup.kill`` where the cgroup has it (the kernel kills the
    whole cgroup, forks included), then SIGKILL to every listed process again until the
    lists are empty (cgroup v1, or no cgroup: :func:`task_pids`). Returns whether every
    process is gone."""
    for d in dirs:
        path = os.path.join(d, "cgroup.kill")
        if os.path.exists(path):
            with contextlib.suppress(OSError), open(path, "w") as f:
                f.write("1")
    end = time.monotonic() + wait_s
    while True:
        if not signal_task(dirs, pgid, marker, signal.SIGKILL):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)


def watched(lock_file: str) -> bool:
    """Whether a watch-mode watchdog holds ``lock_file`` now (its lock is busy)."""
    fd = _lock(lock_file, 0.0)
    if fd is None:
        return True
    os.close(fd)  # closing releases the probe's lock
    return False


def watch(lease: str, fenced: str, pid: int, start: str, lock_file: str, kill: list[str]) -> int:
    """Watch mode (module docstring): 0 when the process ended by itself or another
    watchdog holds the lock, 1 when the lease expired and the process was killed."""
    fd = _lock(lock_file, LOCK_TRIES_S)
    if fd is None:
        return 0
    while start_time(pid) == start:
        deadline = lease_deadline(lease)
        if deadline is not None and time.monotonic() <= deadline:
            time.sleep(POLL_S)
            continue
        with open(fenced, "w") as f:
            f.write(f"lease {lease} expired (deadline {deadline}); task killed\n")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                kill,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=KILL_CMD_TIMEOUT_S,
                check=False,
            )
        end = time.monotonic() + KILL_WAIT_S
        while start_time(pid) == start and time.monotonic() < end:
            time.sleep(0.05)
        return 1
    return 0


INITIAL_PID_NS_INO = 0xEFFFFFFC
"""Inode of the initial PID namespace (``PROC_PID_INIT_INO``, include/linux/proc_ns.h)."""


def in_initial_pid_namespace() -> bool:
    """Whether this process is in the machine's initial PID namespace (True when unsure)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INITIAL_PID_NS_INO
    except OSError:
        return True


def pod(lease: str, fenced: str) -> int:
    """Pod mode (module docstring): 2 when run in the initial PID namespace; else waits
    for the lease to expire, fences, and returns 0 on SIGTERM."""
    if in_initial_pid_namespace():
        print("watchdog --pod: refusing to run outside a pod's PID namespace", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        deadline = lease_deadline(lease)
        if deadline is None or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    with open(fenced, "w") as f:
        f.write(f"lease {lease} expired (deadline {deadline}); task pod killed\n")
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)
    while True:
        signal.pause()


def main(argv: list[str]) -> int:
    """Run the task under the lease, or watch one (see the module docstring); returns the
    task's exit status (run mode) or :func:`watch`'s."""
    if len(argv) > 6 and argv[2] == "--watch" and argv[6] == "--":
        return watch(argv[0], argv[1], int(argv[3]), argv[4], argv[5], argv[7:])
    if len(argv) == 3 and argv[2] == "--pod":
        return pod(argv[0], argv[1])
    lease, fenced = argv[0], argv[1]
    dirs: list[str] = []
    marker: str | None = None
    rest = argv[2:]
    while len(rest) > 1 and rest[0] != "--":
        if rest[0] == "--cgroup":
            dirs.append(rest[1])
            rest = rest[2:]
        elif rest[0] == "--marker":
            marker = rest[1]
            rest = rest[2:]
        elif rest[0] == "--cgroup-self":
            dirs += own_cgroup_dirs()
            rest = rest[1:]
        else:
            break
    if len(argv) < 2 or len(rest) < 2 or rest[0] != "--":
        print(
            "usage: watchdog.py LEASE FENCED [--cgroup DIR]... [--cgroup-self]"
            " [--marker TEXT] -- ARGV...\n"
            "       watchdog.py LEASE FENCED --watch PID START LOCK_FILE -- KILL_ARGV...\n"
            "       watchdog.py LEASE FENCED --pod",
            file=sys.stderr,
        )
        return 2
    cmd = rest[1:]
    # SIGTERM to the group (a stop) is for the task; the watchdog waits for it to exit.
    # A handler, not SIG_IGN: handlers are reset on exec, so the task gets the default.
    signal.signal(signal.SIGTERM, lambda *_: None)
    child = subprocess.Popen(cmd)
    while True:
        try:
            rc = child.wait(POLL_S)
            return 128 - rc if rc < 0 else rc
        except subprocess.TimeoutExpired:
            pass
        deadline = lease_deadline(lease)
        if deadline is None or time.monotonic() > deadline:
            with open(fenced, "w") as f:
                f.write(f"lease {lease} expired (deadline {deadline}); task killed\n")
            kill_task(dirs, os.getpgrp(), marker, KILL_WAIT_S)
            os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
