"""``/api/v1/schedules``: scheduled jobs (a Volcano CronJob or a pasture schedule; see
:mod:`scheduler.services.schedules`)."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request

from scheduler.api.auth import principal, submitter
from scheduler.api.responses import (
    BAD_BODY,
    CONFLICT,
    FORBIDDEN,
    INVALID,
    NOT_FOUND,
    TOO_LARGE,
    errors,
)
from scheduler.api.routers.jobs import _spec_limiter, on_spec_body
from scheduler.services.schedules import ScheduleService
from scheduler.store.tokens import TokenInfo

router = APIRouter(prefix="/api/v1/schedules", tags=["schedules"])


def schedule_service(request: Request) -> ScheduleService:
    """The app's ScheduleService (made on first use, over the JobService)."""
    state = request.app.state
    if getattr(state, "schedules", None) is None:
        state.schedules = ScheduleService(state.jobs)
    service: ScheduleService = state.schedules
    return service


@router.post(
    "", status_code=201, responses=errors(BAD_BODY, FORBIDDEN, CONFLICT, TOO_LARGE, INVALID)
)
async def submit_schedule(request: Request, who: TokenInfo = Depends(submitter)) -> dict[str, Any]:
    """Submit a scheduled job (YAML or JSON): 201 with it (and ``warnings``); 422 invalid
    (``loc`` names the file's field); 403 VC not allowed; 409 a schedule of that name."""
    body = await request.body()
    service = schedule_service(request)
    content_type = request.headers.get("content-type")
    return await anyio.to_thread.run_sync(
        lambda: on_spec_body(body, content_type, lambda d: service.submit(who, d), "schedule"),
        limiter=_spec_limiter(request),
    )


@router.get("", responses=errors(FORBIDDEN))
def list_schedules(request: Request, who: TokenInfo = Depends(principal)) -> dict[str, Any]:
    """The schedules of the caller's VCs."""
    return schedule_service(request).list(who)


@router.get("/{name}", responses=errors(FORBIDDEN, NOT_FOUND))
def get_schedule(
    name: str, request: Request, who: TokenInfo = Depends(principal)
) -> dict[str, Any]:
    """One schedule, with its runs' job names."""
    return schedule_service(request).get(who, name)


@router.post("/{name}/suspend", responses=errors(FORBIDDEN, NOT_FOUND))
def suspend_schedule(
    name: str, request: Request, who: TokenInfo = Depends(principal)
) -> dict[str, Any]:
    """No new runs until resumed."""
    return schedule_service(request).suspend(who, name, True)


@router.post("/{name}/resume", responses=errors(FORBIDDEN, NOT_FOUND))
def resume_schedule(
    name: str, request: Request, who: TokenInfo = Depends(principal)
) -> dict[str, Any]:
    """Runs start again at the schedule's next time."""
    return schedule_service(request).suspend(who, name, False)


@router.delete("/{name}", responses=errors(FORBIDDEN, NOT_FOUND))
def delete_schedule(
    name: str, request: Request, who: TokenInfo = Depends(principal)
) -> dict[str, Any]:
    """Delete a schedule; its runs stay jobs of their own."""
    return schedule_service(request).delete(who, name)
