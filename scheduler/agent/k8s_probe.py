"""Liveness probes of the pasture containers on Kubernetes (exec probes of the aks stack).

    python3 -m scheduler.agent.k8s_probe lease <file> <max_age_s>
        the agent: alive while its lease file (rewritten at every renewing heartbeat) is
        younger than max_age_s seconds. The aks stack gives 300 s: an agent that could
        not renew for that long (hung, or the store unreachable that long) is restarted;
        its tasks keep running (kubelet owns them) and the restarted agent adopts them.
    python3 -m scheduler.agent.k8s_probe cycles <scheduler.yaml> <state file> <max_age_s>
        the loop: alive while its cycle counter in the store (``stats:cycle``, what
        ``/metrics`` reads) moved within max_age_s seconds. The state file keeps the last
        count and when it changed. A store that does not answer is no reason to restart
        the loop: the probe passes.

Exit status 0: alive; 1: not alive (the reason on stderr).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def lease_alive(path: Path, max_age_s: float, now: float | None = None) -> tuple[bool, str]:
    """``(alive, why)`` of an agent by the age of its lease file (s, wall clock)."""
    now = time.time() if now is None else now
    try:
        age = now - path.stat().st_mtime
    except FileNotFoundError:
        return False, f"no lease file {path}: the agent never renewed its lease"
    if age > max_age_s:
        return False, f"lease file {path} is {age:.0f} s old (limit {max_age_s:g} s)"
    return True, f"lease renewed {age:.0f} s ago"


def cycles_alive(
    count: int | None, state: Path, max_age_s: float, now: float | None = None
) -> tuple[bool, str]:
    """``(alive, why)`` of the loop by its cycle counter ``count`` (None: the store did not
    answer). ``state`` keeps ``{"count", "since"}`` between probes."""
    now = time.time() if now is None else now
    if count is None:
        return True, "store unreachable: not the loop's fault"
    try:
        last = json.loads(state.read_text())
    except (OSError, ValueError):
        last = None
    if not isinstance(last, dict) or last.get("count") != count:
        state.write_text(json.dumps({"count": count, "since": now}))
        return True, f"{count} cycles"
    age = now - float(last.get("since", now))
    if age > max_age_s:
        return False, f"no scheduling cycle for {age:.0f} s (limit {max_age_s:g} s)"
    return True, f"{count} cycles, the last {age:.0f} s ago at most"


def _cycle_count(config: str) -> int | None:
    from scheduler.settings import load_scheduler_settings
    from scheduler.store import Store

    try:
        store = Store.from_settings(load_scheduler_settings(config).redis)
        return store.cycle_histogram()[1]
    except Exception:  # noqa: BLE001 - any store failure: unreachable
        return None


def main(argv: list[str] | None = None) -> int:
    """The probe's command line (module docstring). Returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "lease":
        ok, why = lease_alive(Path(args[1]), float(args[2]))
    elif len(args) == 4 and args[0] == "cycles":
        ok, why = cycles_alive(_cycle_count(args[1]), Path(args[2]), float(args[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(why, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
