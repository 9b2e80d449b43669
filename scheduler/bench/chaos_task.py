"""The chaos benchmark's task: works for a while and leaves marks the invariants are read from.

``python3 -S chaos_task.py MARKS_DIR WORK_S CPU_M [PEER_TIMEOUT_S [fence|nofence]]``
(standard library only, run by path so that it imports nothing of the scheduler). It writes
``MARKS_DIR/<job>.<role>-<index>.a<attempt>.p<pid>`` with one JSON header line ``{job, key,
attempt, node, pid, cpu_m}``, then the wall-clock time every :data:`TICK_S` seconds while
it works, then ``end`` when it finishes by itself. A run killed by fencing simply stops
ticking, so its interval [first tick, last tick] is known either way.

``nofence`` (the default; what most user code does): the task never reads the lease file
and ticks until it is killed, so a run that outlived its node's lease (late writes, a
task in two places at once) shows in its marks.

``fence`` (a cooperating task): each tick is stamped first, then written only while its
node's lease (``$PASTURE_LEASE_FILE``, CLOCK_MONOTONIC deadline) still runs; once it ran
out the task writes nothing more and waits to be killed. So no recorded tick of a run is later than
its lease, even when the whole node was frozen (SIGSTOP, ``podman pause``) and thaws
after the loop gave its tasks to another node: a tick past the check when the node froze
lands late, but with its earlier stamp (docs/faults.md "Bounds").

With ``PEER_TIMEOUT_S`` > 0 it behaves like a rank of a collective (NCCL, Gloo): once it
has seen every peer of its attempt tick (the other marks files of its job and attempt),
it exits 1 when one of them has not ticked for ``PEER_TIMEOUT_S`` seconds.

The node is the one whose agent's lease watchdog (:mod:`scheduler.agent.watchdog`) is
this task's ancestor: ``<work_dir>/lease`` with ``work_dir`` named after the node, as
``scheduler.dev`` lays it out.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

TICK_S = 0.1


def _node() -> str:
    """The node name from the lease watchdog among this process' ancestors ('' if none)."""
    pid = os.getpid()
    for _ in range(10):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return ""
        for i, arg in enumerate(argv):
            if arg.endswith(b"watchdog.py") and i + 1 < len(argv):
                return Path(argv[i + 1].decode()).parent.name
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4: ppid
        if pid <= 1:
            return ""
    return ""


def _lease_runs(lease_file: str) -> bool:
    """Whether the node's lease is still running (True when there is no lease file to go
    by: a task run outside an agent)."""
    if not lease_file:
        return True
    try:
        deadline = float(json.loads(Path(lease_file).read_text())["deadline"])
    except (OSError, ValueError, KeyError):
        return False  # unreadable: ended, as the watchdog reads it
    return time.monotonic() < deadline


def _peer_vanished(marks: Path, job: str, key: str, attempt: int, timeout: float) -> bool:
    """Whether a peer of this attempt has ticked once and then not for ``timeout`` s."""
    now = time.time()
    for path in marks.glob(f"{job}.*.a{attempt}.p*"):
        if path.name.split(".")[1] == key:
            continue
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        if len(lines) > 1 and lines[-1] != "end":
            try:
                if now - float(lines[-1]) > timeout:
                    return True
            except ValueError:
                continue
    return False


def main(argv: list[str]) -> int:
    """Work ``WORK_S`` seconds, ticking into the marks file (see the module docstring)."""
    marks, work_s, cpu_m = Path(argv[0]), float(argv[1]), int(argv[2])
    peer_timeout = float(argv[3]) if len(argv) > 3 else 0.0
    cooperate = len(argv) > 4 and argv[4] == "fence"
    env = os.environ
    lease_file = env.get("PASTURE_LEASE_FILE", "") if cooperate else ""
    job, key = env["PASTURE_JOB_NAME"], f"{env['PASTURE_TASK_ROLE']}-{env['PASTURE_TASK_INDEX']}"
    attempt = int(env["PASTURE_ATTEMPT"])
    head = {"job": job, "key": key, "attempt": attempt, "node": _node(), "pid": os.getpid()}
    marks.mkdir(parents=True, exist_ok=True)
    path = marks / f"{job}.{key}.a{attempt}.p{os.getpid()}"
    with open(path, "a", buffering=1) as f:
        f.write(json.dumps({**head, "cpu_m": cpu_m}) + "\n")
        end = time.monotonic() + work_s
        while time.monotonic() < end:
            stamp = time.time()  # stamped before the check: never later than the lease
            if not _lease_runs(lease_file):
                time.sleep(60)  # fenced: write nothing more, wait for the kill
                return 3
            f.write(f"{stamp:.3f}\n")
            if peer_timeout and _peer_vanished(marks, job, key, attempt, peer_timeout):
                return 1  # as a collective's rank does when a peer vanished
            time.sleep(TICK_S)
        f.write(f"{time.time():.3f}\nend\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
