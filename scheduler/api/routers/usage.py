"""Usage routes: one job's per-task usage (``GET /api/v1/jobs/{name}/usage``) and
GPU-hours per user or VC (``GET /api/v1/usage/gpu-hours``). Thin: the figures come from
:mod:`scheduler.services.jobusage` and :mod:`scheduler.services.accounting`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from scheduler.api.auth import principal
from scheduler.api.responses import FORBIDDEN, INVALID, NOT_FOUND, errors
from scheduler.api.routers.jobs import job_ref
from scheduler.api.usageschemas import GpuHoursOut, JobUsageOut
from scheduler.services.records import as_dict
from scheduler.store.tokens import TokenInfo
from scheduler.timespec import LATEST_TIME_S

router = APIRouter(prefix="/api/v1", tags=["usage"])


@router.get(
    "/jobs/{name}/usage",
    response_model=JobUsageOut,
    responses=errors(FORBIDDEN, NOT_FOUND, INVALID),
)
def job_usage(
    request: Request,
    window: int = Query(3600, ge=1, le=7200, description="seconds of samples"),
    uid: str | None = Query(None, max_length=32, description="only this submission"),
    who: TokenInfo = Depends(principal),
    name: str = Depends(job_ref),
) -> Any:
    """The job's per-task usage: CPU cores and resident memory of each task's processes,
    utilisation and memory of the GPUs it holds (latest figures and the samples of the
    last ``window`` seconds, one per 5 s, from every node and attempt of the job's life,
    each naming its ``node`` and ``attempt``), and what each task used in all (CPU
    seconds ``cpu_time_s``, peak ``max_rss``: recorded at its end, kept as long as the
    job). Only this job's own samples (its uid). 404 as ``GET /jobs/{name}``."""
    return as_dict(request.app.state.job_usage.job(who, name, window, uid))


@router.get(
    "/usage/gpu-hours",
    response_model=GpuHoursOut,
    responses=errors(FORBIDDEN, INVALID),
)
def gpu_hours(
    request: Request,
    since: float = Query(ge=0, le=LATEST_TIME_S, description="s since the epoch"),
    until: float | None = Query(
        None, ge=0, le=LATEST_TIME_S, description="s since the epoch; default now"
    ),
    by: Literal["user", "vc"] = Query("user"),
    who: TokenInfo = Depends(principal),
) -> Any:
    """GPU-hours and CPU core-hours per user or VC in ``[since, until]``: each kept job's
    attempts' allocation time inside the range x the GPUs (cores) it asks for
    (allocated, not measured). 422 naming the field for ``since`` after now or ``until``
    not after ``since``; an ``until`` after now is cut to now. A user token sees its VCs'
    jobs only."""
    return as_dict(request.app.state.accounting.gpu_hours(who, since, until, by))
