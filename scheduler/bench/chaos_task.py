"""The chaos benchmark's task: works for a while and leaves marks the invariants are read from.

``python3 -S chaos_task.py MARKS_DIR WORK_S CPU_M`` (standard library only, run by path so
that it imports nothing of the scheduler). It writes ``MARKS_DIR/<job>.<role>-<index>.a
<attempt>.p<pid>`` with one JSON header line ``{job, key, attempt, node, pid, cpu_m}``,
then the wall-clock time every :data:`TICK_S` seconds while it works, then ``end`` when it
finishes by itself. A run killed by fencing simply stops ticking, so its interval
[first tick, last tick] is known either way. The node is the one whose agent's lease
watchdog (:mod:`scheduler.agent.watchdog`) is this task's ancestor: ``<work_dir>/lease``
with ``work_dir`` named after the node, as ``scheduler.dev`` lays it out.
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


def main(argv: list[str]) -> int:
    """Work ``WORK_S`` seconds, ticking into the marks file (see the module docstring)."""
    marks, work_s, cpu_m = Path(argv[0]), float(argv[1]), int(argv[2])
    env = os.environ
    job, key = env["PASTURE_JOB_NAME"], f"{env['PASTURE_TASK_ROLE']}-{env['PASTURE_TASK_INDEX']}"
    attempt = int(env["PASTURE_ATTEMPT"])
    head = {"job": job, "key": key, "attempt": attempt, "node": _node(), "pid": os.getpid()}
    marks.mkdir(parents=True, exist_ok=True)
    path = marks / f"{job}.{key}.a{attempt}.p{os.getpid()}"
    with open(path, "a", buffering=1) as f:
        f.write(json.dumps({**head, "cpu_m": cpu_m}) + "\n")
        end = time.monotonic() + work_s
        while time.monotonic() < end:
            f.write(f"{time.time():.3f}\n")
            time.sleep(TICK_S)
        f.write(f"{time.time():.3f}\nend\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
