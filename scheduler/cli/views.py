"""Figures derived from the API's records for CLI tables (pure; no I/O, no Rich).

Records are the API's response models (``JobOut``, ``TaskOut`` in
:mod:`scheduler.api.schemas`): times in seconds since the epoch, ``cpu_m`` millicores,
``memory`` bytes, ``gpu`` devices. States come from :mod:`scheduler.states`, their one
definition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler.services.records import spec_gpus
from scheduler.states import (
    TASK_ACTIVE_STATES,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
)
from scheduler.units import format_duration

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut, PendingReasonOut, TaskOut

WAITING = WAITING_JOB_STATES
TERMINAL = TERMINAL_JOB_STATES
# job states whose ``reason`` says why it ended without success
UNSUCCESSFUL = frozenset({JobState.FAILED, JobState.STOPPED})


def job_gpus(job: JobOut) -> int:
    """GPUs the job asks for (its stored spec; :func:`spec_gpus`)."""
    return spec_gpus(job.spec)


def job_run_time(job: JobOut, now: float) -> str:
    """Time from its start to its end (or to ``now`` while it runs); '' if never started."""
    start = job.start_time
    if start is None or start <= 0:
        return ""
    end = job.end_time if job.end_time is not None and job.end_time >= start else now
    return format_duration(end - start)


def reason_text(reason: PendingReasonOut | None) -> str:
    """A pending reason as one line (its message, else its kind)."""
    return "" if reason is None else reason.message or reason.kind


def job_reason(job: JobOut) -> str:
    """Why it waits (pending reason) or why it ended without success (failure reason)."""
    if job.state in WAITING:
        return reason_text(job.pending_reason) or job.reason
    if job.state in UNSUCCESSFUL:
        return job.reason
    return ""


def task_nodes(tasks: list[TaskOut] | None) -> str:
    """The nodes of a job's tasks, sorted, comma-separated."""
    return ",".join(sorted({t.node for t in tasks or [] if t.node}))


def node_allocation(node: str, jobs: list[JobOut]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the tasks of ``jobs`` (records with ``tasks``) hold on ``node``.

    Returns:
        ``({"cpu_m", "memory", "gpu"} summed over its scheduled/running tasks, [task rows
        {"job", "role", "index", "state", "cpu_m", "memory", "gpu"}]``).
    """
    used = {"cpu_m": 0, "memory": 0, "gpu": 0}
    rows = []
    for job in jobs:
        for t in job.tasks or []:
            if t.node != node or t.state not in TASK_ACTIVE_STATES:
                continue
            row: dict[str, Any] = {"job": job.name, "role": t.role, "index": t.index}
            row.update(state=t.state, cpu_m=t.cpu_m, memory=t.memory, gpu=t.gpu)
            for key in used:
                used[key] += row[key]
            rows.append(row)
    return used, rows


def queue_position(job: JobOut, waiting: list[JobOut]) -> tuple[int, int] | None:
    """``(position, length)`` of a waiting ``job`` in its VC's queue, 1 first; None when
    it is not waiting.

    The order is the scheduler's base order (:mod:`scheduler.core.queue`): higher priority
    first, then earlier submit time, then name. A queue order with its own key (drf, las,
    srtf) or aging can reorder jobs of equal priority, so the position is where the job
    stands on priority and submit order, not a promise. ``waiting``: the VC's waiting jobs
    (this one included or not).
    """
    if job.state not in WAITING:
        return None

    def key(j: JobOut) -> tuple[int, float, str]:
        return (-j.priority, j.created, j.name)

    peers = {j.name: j for j in waiting if j.vc == job.vc and j.state in WAITING}
    peers[job.name] = job
    ahead = sum(1 for j in peers.values() if key(j) < key(job))
    return ahead + 1, len(peers)
