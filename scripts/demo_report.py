"""Summarise a finished example job for `make demo`: state, placement, accuracy, timings.

Reads the job through the API with the CLI's own client and login (``pasture login``), so it
shows what a user of the cluster can see:

    python scripts/demo_report.py JOB [--wait SECONDS] [--min-accuracy 0.9] [--json]

Prints the final state, each task's node, the test accuracy ps-0 reported in its log
(``test accuracy: 0.9xx``), the queueing delay (submission to first placement, seconds) and
the run time (first start to end, seconds). Exit code 0 when the job succeeded with at least
``--min-accuracy``, 1 otherwise (the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.config import load
from scheduler.states import TERMINAL_JOB_STATES

if TYPE_CHECKING:
    from scheduler.api.schemas import EventOut, JobOut


ACCURACY_RE = re.compile(r"^test accuracy: (\d+\.\d+)\s*$", re.M)


def first_time(events: list[EventOut], state: str) -> float | None:
    """Time (s since the epoch) of the first event entering ``state``, or None."""
    times = [e.time for e in events if e.state == state]
    return min(times) if times else None


def summarise(job: JobOut, events: list[EventOut], ps_log: str) -> dict[str, Any]:
    """The report as a dict (times in seconds, accuracy a fraction or None).

    Args:
        job: the job as ``GET /api/v1/jobs/{name}`` answers it (the client's typed
            :class:`scheduler.api.schemas.JobOut`, with its tasks).
        events: its state changes (``GET .../events``), oldest first.
        ps_log: the log of the task that prints ``test accuracy: 0.9xx`` (ps-0).
    """
    created = job.created or first_time(events, "submitted")
    placed = first_time(events, "scheduled") or job.scheduled_time
    started = first_time(events, "running") or job.start_time
    ended = job.end_time
    tasks = job.tasks or []
    found = ACCURACY_RE.findall(ps_log)
    return {
        "name": job.name,
        "state": str(job.state),
        "reason": job.reason,
        "attempt": job.attempt,
        "tasks": [
            {
                "task": f"{t.role}-{t.index}",
                "node": t.node,
                "state": str(t.state),
                "exit_code": t.exit_code,
            }
            for t in tasks
        ],
        "nodes": sorted({t.node for t in tasks if t.node}),
        "test_accuracy": float(found[-1]) if found else None,
        "queueing_delay_s": round(placed - created, 2) if placed and created else None,
        "run_time_s": round(ended - started, 2) if ended and started else None,
        "jct_s": round(ended - created, 2) if ended and created else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 succeeded with the accuracy, 1 otherwise)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("job")
    p.add_argument("--min-accuracy", type=float, default=0.9)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        help="first wait up to this many seconds for the job to end",
    )
    args = p.parse_args(argv)
    client = ApiClient(load())
    job = client.job(args.job)
    deadline = time.monotonic() + args.wait
    while job.state not in TERMINAL_JOB_STATES and time.monotonic() < deadline:
        time.sleep(1.0)
        job = client.job(args.job)
    events = client.events(args.job).events
    roles = job.spec.get("roles") or {"ps": None}
    ps_role = str(next(iter(roles)))
    try:
        ps_log = client.log_bytes(args.job, ps_role, 0).decode("utf-8", "replace")
    except ApiError as exc:  # a missing log is reported, not fatal
        ps_log = ""
        print(f"no log of {ps_role}-0: {exc}", file=sys.stderr)
    report = summarise(job, events, ps_log)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"job {report['name']}: {report['state']} (attempt {report['attempt']})")
        for t in report["tasks"]:
            print(f"  {t['task']:<10} on {t['node']:<10} {t['state']}  exit {t['exit_code']}")
        print(f"  nodes used:      {len(report['nodes'])} ({', '.join(report['nodes'])})")
        acc = report["test_accuracy"]
        print(f"  test accuracy:   {acc:.3f}" if acc is not None else "  test accuracy:   none")
        print(f"  queueing delay:  {report['queueing_delay_s']} s (submit -> placed)")
        print(f"  run time:        {report['run_time_s']} s (running -> {report['state']})")
        print(f"  completion time: {report['jct_s']} s (submit -> end)")
    if report["state"] != "succeeded":
        print(
            f"job {args.job} did not succeed: {report['state']} {report['reason']}", file=sys.stderr
        )
        return 1
    if report["test_accuracy"] is None or report["test_accuracy"] < args.min_accuracy:
        print(
            f"test accuracy {report['test_accuracy']} is below {args.min_accuracy}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
