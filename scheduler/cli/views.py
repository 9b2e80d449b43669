"""Figures derived from the API's records for CLI tables (pure; no I/O, no Rich).

Records are the API's JSON dicts (``JobOut``, ``TaskOut``, ``NodeOut`` in
:mod:`scheduler.api.schemas`): times in seconds since the epoch, ``cpu_m`` millicores,
``memory`` bytes, ``gpu`` devices.
"""

from __future__ import annotations

from typing import Any

from scheduler.units import format_duration

# Job states in which a job is waiting for placement (its pending reason applies) and in
# which it has ended (scheduler.store.records.JobState / TERMINAL_JOB_STATES).
WAITING = frozenset({"submitted", "queued", "preempted"})
TERMINAL = frozenset({"succeeded", "failed", "stopped"})
# Task states that hold resources on a node (scheduler.store.records.TaskState).
TASK_ACTIVE = frozenset({"scheduled", "running"})


def job_gpus(job: dict) -> int:
    """GPUs the job asks for: sum over roles of replicas x per-task GPUs (its spec)."""
    roles = (job.get("spec") or {}).get("roles") or {}
    total = 0
    for role in roles.values() if isinstance(roles, dict) else ():
        resources = role.get("resources") or {}
        total += int(role.get("replicas") or 1) * int(resources.get("gpu") or 0)
    return total


def job_run_time(job: dict, now: float) -> str:
    """Time from its start to its end (or to ``now`` while it runs); '' if never started."""
    start = job.get("start_time")
    if not isinstance(start, int | float) or start <= 0:
        return ""
    end = job.get("end_time")
    end = end if isinstance(end, int | float) and end >= start else now
    return format_duration(end - start)


def reason_text(reason: Any) -> str:
    """A pending reason (dict with message/kind, or text) as one line."""
    if isinstance(reason, dict):
        return str(reason.get("message") or reason.get("kind") or "")
    return "" if reason is None else str(reason)


def job_reason(job: dict) -> str:
    """Why it waits (pending reason) or why it ended without success (failure reason)."""
    state = job.get("state")
    if state in WAITING:
        return reason_text(job.get("pending_reason")) or str(job.get("reason") or "")
    if state in ("failed", "stopped"):
        return str(job.get("reason") or "")
    return ""


def task_nodes(tasks: list[dict] | None) -> str:
    """The nodes of a job's tasks, sorted, comma-separated."""
    return ",".join(sorted({str(t["node"]) for t in tasks or [] if t.get("node")}))


def node_allocation(node: str, jobs: list[dict]) -> tuple[dict, list[dict]]:
    """What the tasks of ``jobs`` (records with ``tasks``) hold on ``node``.

    Returns:
        ``({"cpu_m", "memory", "gpu"} summed over its scheduled/running tasks, [task rows
        {"job", "role", "index", "state", "cpu_m", "memory", "gpu"}]``).
    """
    used = {"cpu_m": 0, "memory": 0, "gpu": 0}
    rows = []
    for job in jobs:
        for t in job.get("tasks") or []:
            if t.get("node") != node or t.get("state") not in TASK_ACTIVE:
                continue
            row = {"job": job.get("name"), "role": t.get("role"), "index": t.get("index")}
            row["state"] = t.get("state")
            for key in used:
                row[key] = int(t.get(key) or 0)
                used[key] += row[key]
            rows.append(row)
    return used, rows
