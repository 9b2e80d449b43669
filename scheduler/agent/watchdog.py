"""Lease watchdog of one process-executor task: the task dies when its agent's lease does.

``python -S watchdog.py LEASE_FILE FENCED_FILE [--as BYTES] -- ARGV...`` runs ARGV (with
the address-space limit RLIMIT_AS set to BYTES when given, so that the limit binds the task,
not the watchdog) as a child in the
watchdog's own process group (the executor starts the watchdog as a session leader) and
checks ``LEASE_FILE`` every :data:`POLL_S` seconds. The agent writes that file after every
heartbeat the store answered: ``{"deadline": <CLOCK_MONOTONIC seconds>}``, the moment its
lease runs out (CLOCK_MONOTONIC is one clock for the whole machine). When the deadline has
passed, or the file is missing or unreadable, the watchdog writes ``FENCED_FILE`` and
SIGKILLs its whole process group, itself included: the agent died, hung or lost the store,
and the loop may soon run the task elsewhere (docs/faults.md). When the child exits first,
the watchdog exits with the child's status.

So a task outlives a dead agent by at most the rest of its lease plus :data:`POLL_S`, and
an agent restarted within its lease adopts its tasks as before. Standard library only and
run without ``site`` (``-S``): it starts in tens of milliseconds and does not import the
scheduler package.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

POLL_S = 0.25
"""Seconds between two checks of the lease file."""


def lease_deadline(path: str) -> float | None:
    """The lease's CLOCK_MONOTONIC deadline from ``path``, None when missing or unreadable."""
    try:
        with open(path) as f:
            return float(json.load(f)["deadline"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv: list[str]) -> int:
    """Run the task under the lease (see the module docstring); returns its exit status."""
    limit = None
    if len(argv) > 4 and argv[2] == "--as":
        limit = int(argv[3])
        argv = argv[:2] + argv[4:]
    if len(argv) < 4 or argv[2] != "--":
        print("usage: watchdog.py LEASE_FILE FENCED_FILE [--as BYTES] -- ARGV...", file=sys.stderr)
        return 2
    lease, fenced, cmd = argv[0], argv[1], argv[3:]

    def preexec() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    # SIGTERM to the group (a stop) is for the task; the watchdog waits for it to exit.
    # A handler, not SIG_IGN: handlers are reset on exec, so the task gets the default.
    signal.signal(signal.SIGTERM, lambda *_: None)
    child = subprocess.Popen(cmd, preexec_fn=preexec)
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
            os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
