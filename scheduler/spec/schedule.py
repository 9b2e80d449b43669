"""Scheduled jobs: a job template run on a cron schedule (Volcano ``CronJob``,
batch.volcano.sh/v1alpha1; Kubernetes ``batch/v1`` CronJob semantics, which Volcano's
controller follows: pkg/controllers/cronjob). The spec, its translation from a Volcano
CronJob file (:mod:`scheduler.spec.formats.volcano_cronjob`), and the pure decision
of what a schedule does at a given time.

Pure: no Redis, no clock (``now`` is an argument). The store keeps schedules
(scheduler/store/schedules.py), the loop acts on :func:`decide` every few seconds
(``Loop._run_schedules``), ``/api/v1/schedules`` and ``pasture schedule`` manage them; a
job submit of a CronJob file is refused naming ``kind`` and pointing there.

Decision (Kubernetes ``cronjob_controllerv2.go`` ``mostRecentScheduleTime``,
``syncCronJob``):

- the run due is the most recent schedule time after the last one started (or the
  schedule's creation) and at most ``now``; earlier missed times are dropped (one run
  starts, not a backlog);
- ``starting_deadline_s``: a due time older than that is missed, nothing starts;
- ``suspend``: nothing starts (runs already started go on);
- ``concurrency_policy``: ``Allow`` starts beside active runs, ``Forbid`` skips the run
  while one is active, ``Replace`` stops the active runs and starts the new one;
- history: finished runs beyond ``successful_jobs_history_limit`` (succeeded) and
  ``failed_jobs_history_limit`` (failed or stopped), oldest first, are deleted.

A run is a job named ``<schedule>-<scheduled time in minutes since the epoch>`` (as
Kubernetes names a CronJob's jobs), so one scheduled time never starts twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from scheduler.spec.model import JobSpec
from scheduler.states import TERMINAL_JOB_STATES, JobState

MAX_SCHEDULE_NAME = 52
"""A schedule's name leaves room for ``-<minutes>`` (11 chars) in a 63-char job name."""


class ScheduleSpec(BaseModel):
    """A scheduled job.

    Attributes:
        name: [a-z0-9-], 1..52 chars; runs are ``<name>-<minutes since the epoch>``.
        schedule: a five-field cron expression (minute hour day-of-month month
            day-of-week, UTC) or a macro (``@hourly``, ``@daily``...), as croniter reads it.
        concurrency_policy: Allow | Forbid | Replace (see the module docstring).
        suspend: no new runs while true.
        starting_deadline_s: seconds after its time a run may still start; None: any.
        successful_jobs_history_limit / failed_jobs_history_limit: finished runs kept.
        job: the job each run is (its ``name`` is replaced by the run's).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", max_length=MAX_SCHEDULE_NAME)
    schedule: str
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = "Allow"
    suspend: bool = False
    starting_deadline_s: int | None = Field(default=None, ge=0)
    successful_jobs_history_limit: int = Field(default=3, ge=0, le=100)
    failed_jobs_history_limit: int = Field(default=1, ge=0, le=100)
    job: JobSpec

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str) -> str:
        if not isinstance(v, str) or not croniter.is_valid(v.strip()):
            raise ValueError(
                f"expected a cron expression of five fields (minute hour day-of-month month "
                f"day-of-week, e.g. '*/5 * * * *') or @hourly/@daily/..., got {v!r}"
            )
        return v.strip()

    def run_name(self, scheduled: float) -> str:
        """The job name of the run scheduled at ``scheduled`` (Unix s)."""
        return f"{self.name}-{int(scheduled // 60)}"

    def run_spec(self, scheduled: float) -> JobSpec:
        """The job of the run scheduled at ``scheduled``: the template, renamed."""
        return self.job.model_copy(update={"name": self.run_name(scheduled)})


def due_time(schedule: str, since: float, now: float) -> float | None:
    """The most recent time of ``schedule`` in ``(since, now]`` (Unix s, UTC), None when
    none. Times between are skipped (one run, not a backlog)."""
    it = croniter(schedule, dt.datetime.fromtimestamp(now, dt.UTC))
    latest = float(it.get_prev(float))
    if croniter.match(schedule, dt.datetime.fromtimestamp(now, dt.UTC)) and now % 60 < 1e-9:
        latest = now
    return latest if latest > since else None


@dataclass(frozen=True, slots=True)
class Run:
    """A job a schedule started: its name, state and scheduled time (Unix s)."""

    name: str
    state: str
    scheduled: float


@dataclass(frozen=True, slots=True)
class Decision:
    """What a schedule does now.

    Attributes:
        start: the scheduled time of the run to start now, None: none.
        stop: names of active runs to stop first (Replace).
        delete: names of finished runs beyond the history limits.
        why: why a due run does not start ("" when none is due, or it starts).
    """

    start: float | None = None
    stop: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    why: str = ""


_ACTIVE = frozenset(s for s in JobState if not s.terminal)  # a run still holding its turn


def decide(spec: ScheduleSpec, last: float, runs: list[Run], now: float) -> Decision:
    """What ``spec`` does at ``now`` (see the module docstring).

    Args:
        last: the latest scheduled time already started, or the schedule's creation time.
        runs: the schedule's runs that still exist.
        now: the store clock (Unix s).
    """
    finished = [r for r in runs if r.state not in _ACTIVE]
    delete: list[str] = []
    for states, limit in (
        ({JobState.SUCCEEDED}, spec.successful_jobs_history_limit),
        (TERMINAL_JOB_STATES - {JobState.SUCCEEDED}, spec.failed_jobs_history_limit),
    ):
        done = sorted((r for r in finished if r.state in states), key=lambda r: r.scheduled)
        delete += [r.name for r in done[: max(0, len(done) - limit)]]
    due = due_time(spec.schedule, last, now)
    if due is None:
        return Decision(delete=tuple(delete))
    if spec.suspend:
        return Decision(delete=tuple(delete), why="suspended")
    if spec.starting_deadline_s is not None and now - due > spec.starting_deadline_s:
        return Decision(
            delete=tuple(delete),
            why=f"missed: the run of {due:.0f} is more than {spec.starting_deadline_s} s late",
        )
    active = [r.name for r in runs if r.state in _ACTIVE]
    if active and spec.concurrency_policy == "Forbid":
        return Decision(
            delete=tuple(delete), why=f"skipped: concurrencyPolicy Forbid and {active} active"
        )
    stop = tuple(active) if spec.concurrency_policy == "Replace" else ()
    return Decision(start=due, stop=stop, delete=tuple(delete))
