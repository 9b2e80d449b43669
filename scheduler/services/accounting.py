"""GPU-hours per user or per VC over a time range (``pasture usage``,
``GET /api/v1/usage/gpu-hours``, the dashboard's usage page): Slurm's ``sacct`` and
OpenPAI's VC usage, computed from the records the cluster already keeps.

For each job the cluster still holds (``job delete`` and a finished job's expiry,
``ttl_after_finished`` / ``loop.finished_job_ttl_s``, remove a job and its figures with
it), its attempts' allocation intervals (``JobRecord.attempts``: ``started`` = when the
attempt started or was placed, ``ended``; the attempt now running: from its start, or its
placement, until now) are cut to the range ``[since, until]``, and each second counts the
GPUs the job asks for (replicas x GPUs per task, :func:`scheduler.services.records.spec_gpus`).
So the figure is allocated GPU time, as Slurm's ``AllocTRES``, not measured use; a job
asking for no GPU counts 0. CPU time is reported the same way beside it: core-hours = the
same seconds x the CPU cores the job asks for (replicas x cores per task); a task's
measured CPU seconds are in ``GET /api/v1/jobs/{name}/usage`` (``cpu_time_s``).

A range must lie in the past and run forward: ``since`` after now, or ``until`` not after
``since``, is refused (422 naming the field), never answered with zeros. An ``until``
after now is cut to now.

A user token sees its own VCs' jobs only; an admin every job.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from scheduler.services.errors import BadRequestError, InvalidError
from scheduler.services.principal import Principal, require_role
from scheduler.services.records import spec_gpus
from scheduler.states import JobState
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.store import Store
    from scheduler.store.records import JobRecord

By = Literal["user", "vc"]
MAX_JOBS = 100_000
"""Jobs read for one report at most (the store keeps finished jobs for a bounded time)."""


@dataclass
class JobGpuTime:
    """One job's share of a report: ``gpus`` and ``cores`` asked for, ``seconds`` its
    attempts held an allocation inside the range, ``gpu_hours`` = gpus x seconds / 3600,
    ``core_hours`` = cores x seconds / 3600."""

    name: str
    uid: str
    user: str
    vc: str
    gpus: int
    cores: float
    seconds: float
    gpu_hours: float
    core_hours: float


@dataclass
class GpuHoursRow:
    """GPU-hours and core-hours of one user or VC (``key``), and the jobs that make them
    up."""

    key: str
    gpu_hours: float
    core_hours: float = 0.0
    jobs: list[JobGpuTime] = field(default_factory=list)


def spec_cores(spec: dict[str, Any]) -> float:
    """CPU cores a stored job spec asks for: the sum over its roles of replicas x cores
    per task (:func:`scheduler.spec.quantity.parse_cpu`); 0 for what does not parse."""
    from scheduler.spec.quantity import parse_cpu

    roles = spec.get("roles") or {}
    total = 0
    for role in roles.values() if isinstance(roles, dict) else ():
        resources = (role.get("resources") or {}) if isinstance(role, dict) else {}
        try:
            total += int(role.get("replicas") or 1) * parse_cpu(resources.get("cpu") or 0)
        except (TypeError, ValueError):
            continue
    return total / 1000


def intervals(job: JobRecord, now: float) -> list[tuple[float, float]]:
    """The job's allocation intervals (s): one per ended attempt with both times, and the
    current attempt's (from ``start_time`` or ``scheduled_time`` to ``now``) while it is
    placed and not finished."""
    out = []
    for a in job.attempts:
        started, ended = a.get("started"), a.get("ended")
        if isinstance(started, int | float) and isinstance(ended, int | float):
            out.append((float(started), float(ended)))
    current = job.start_time or job.scheduled_time
    if current and not JobState(job.state).terminal and job.state != JobState.QUEUED:
        out.append((float(current), now))
    return out


def overlap(spans: list[tuple[float, float]], since: float, until: float) -> float:
    """Seconds of ``spans`` inside ``[since, until]``."""
    return sum(max(0.0, min(b, until) - max(a, since)) for a, b in spans)


def check_range(since: float, until: float | None, now: float) -> None:
    """Refuse a report range that cannot hold anything (module docstring).

    Args:
        since, until: s since the epoch (``until`` None: now); now: the store's clock (s).
    Raises:
        InvalidError: ``since`` after ``now``, or ``until`` not after ``since``.
    """

    def when(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    if since > now:
        raise InvalidError(
            f"since: expected a time in the past (at most now, {when(now)}), got {when(since)}"
        )
    if until is not None and until <= since:
        raise InvalidError(f"until: expected a time after since ({when(since)}), got {when(until)}")


class AccountingService:
    """GPU-hours reports. Args: store: the backend store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def gpu_hours(
        self, principal: Principal, since: float, until: float | None = None, by: By = "user"
    ) -> dict[str, Any]:
        """GPU-hours per user or VC in ``[since, until]`` (s since the epoch; ``until``
        None: now).

        Returns:
            ``{since, until, by, rows: [GpuHoursRow...] most first, total (GPU-hours),
            total_core_hours}``; ``until`` is cut to now.

        Raises:
            BadRequestError: ``by`` not user / vc.
            InvalidError: ``since`` after now, or ``until`` not after ``since`` (422; the
                message names the field, what it must be and what was given).
            ForbiddenError: an agent token.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        if by not in ("user", "vc"):
            raise BadRequestError(f"by: expected user or vc, got {by!r}")
        now = self.store.now()
        check_range(since, until, now)
        until = now if until is None else min(float(until), now)
        jobs = self._jobs(principal)
        rows: dict[str, GpuHoursRow] = {}
        for j in jobs:
            seconds = overlap(intervals(j, now), since, until)
            if seconds <= 0:
                continue
            gpus, cores = spec_gpus(j.spec), spec_cores(j.spec)
            share = JobGpuTime(
                name=j.name,
                uid=j.uid,
                user=j.user,
                vc=j.vc,
                gpus=gpus,
                cores=cores,
                seconds=round(seconds, 3),
                gpu_hours=gpus * seconds / 3600.0,
                core_hours=cores * seconds / 3600.0,
            )
            key = j.user if by == "user" else j.vc
            row = rows.setdefault(key, GpuHoursRow(key=key, gpu_hours=0.0))
            row.jobs.append(share)
            row.gpu_hours += share.gpu_hours
            row.core_hours += share.core_hours
        ordered = sorted(rows.values(), key=lambda r: (-r.gpu_hours, -r.core_hours, r.key))
        for r in ordered:
            r.jobs.sort(key=lambda s: (-s.gpu_hours, s.name))
        return {
            "since": since,
            "until": until,
            "by": by,
            "rows": ordered,
            "total": sum(r.gpu_hours for r in ordered),
            "total_core_hours": sum(r.core_hours for r in ordered),
        }

    def _jobs(self, principal: Principal) -> list[JobRecord]:
        vcs = None if principal.role is TokenRole.ADMIN else list(principal.vcs)
        return self.store.list_jobs(vcs=vcs, limit=MAX_JOBS)[0]
