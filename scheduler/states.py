"""Job and task states: the one definition every part of pasture uses (store, loop,
lifecycle, services, API, dashboard, CLI).

A module of its own with no imports beyond the standard library, so that the CLI can use
it without loading Redis (``scheduler.store.records`` re-exports these names).
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Job lifecycle: submitted -> queued -> scheduled -> running -> succeeded | failed |
    stopped; preempted and retries return to queued with the attempt counter kept."""

    SUBMITTED = "submitted"
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        """True for the final states (:data:`TERMINAL_JOB_STATES`)."""
        return self in TERMINAL_JOB_STATES


# The final job states: the one definition every module uses (StrEnum members compare
# equal to their values, so ``"failed" in TERMINAL_JOB_STATES`` holds).
TERMINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED})
# States of a job waiting for placement (its pending reason applies).
WAITING_JOB_STATES = frozenset({JobState.SUBMITTED, JobState.QUEUED, JobState.PREEMPTED})


class TaskState(StrEnum):
    """Task (one attempt of one replica) states. ``lost``: its node stopped heartbeating."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"

    @property
    def done(self) -> bool:
        """True once the task has ended (succeeded, failed, stopped or lost)."""
        return self in TASK_DONE_STATES


# States in which a task has ended, and in which it holds resources on its node.
TASK_DONE_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.LOST}
)
TASK_ACTIVE_STATES = frozenset({TaskState.SCHEDULED, TaskState.RUNNING})
