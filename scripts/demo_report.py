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
from typing import Any

from scheduler.cli.client import ApiClient
from scheduler.cli.config import load

TERMINAL = {"succeeded", "failed", "stopped"}
ACCURACY_RE = re.compile(r"^test accuracy: (\d+\.\d+)\s*$", re.M)


def first_time(events: list[dict[str, Any]], state: str) -> float | None:
    """Time (s since the epoch) of the first event entering ``state``, or None."""
    times = [e["time"] for e in events if e.get("state") == state and e.get("time") is not None]
    return min(times) if times else None


def summarise(job: dict[str, Any], events: list[dict[str, Any]], ps_log: str) -> dict[str, Any]:
    """The report as a dict (times in seconds, accuracy a fraction or None)."""
    created = job.get("created") or first_time(events, "submitted")
    placed = first_time(events, "scheduled") or job.get("scheduled_time")
    started = first_time(events, "running") or job.get("start_time")
    ended = job.get("end_time")
    found = ACCURACY_RE.findall(ps_log)
    return {
        "name": job.get("name"),
        "state": job.get("state"),
        "reason": job.get("reason", ""),
        "attempt": job.get("attempt"),
        "tasks": [
            {
                "task": f"{t['role']}-{t['index']}",
                "node": t.get("node"),
                "state": t.get("state"),
                "exit_code": t.get("exit_code"),
            }
            for t in job.get("tasks", [])
        ],
        "nodes": sorted({t.get("node") for t in job.get("tasks", []) if t.get("node")}),
        "test_accuracy": float(found[-1]) if found else None,
        "queueing_delay_s": round(placed - created, 2) if placed and created else None,
        "run_time_s": round(ended - started, 2) if ended and started else None,
        "jct_s": round(ended - created, 2) if ended and created else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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

    def fetch() -> dict[str, Any]:
        # the client returns a typed JobOut; the report reads it as JSON (None fields left out)
        return client.job(args.job).model_dump(mode="json", exclude_none=True)

    job = fetch()
    deadline = time.monotonic() + args.wait
    while job.get("state") not in TERMINAL and time.monotonic() < deadline:
        time.sleep(1.0)
        job = fetch()
    events = [e.model_dump(mode="json") for e in client.events(args.job).events]
    ps_role = next(iter(job.get("spec", {}).get("roles", {"ps": None})))
    try:
        ps_log = client.log_bytes(args.job, ps_role, 0).decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - a missing log is reported, not fatal
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
