"""Job routes: submit, list, show, events, stop, delete, logs."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from scheduler.api.auth import principal
from scheduler.api.schemas import JobDeleteOut, JobEventsOut, JobOut, JobPage, LogFileOut
from scheduler.services.jobs import TERMINAL_STATES, JobStateName, parse_document
from scheduler.services.records import field
from scheduler.store.tokens import TokenInfo

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


_SPEC_BODY = {
    "requestBody": {
        "required": True,
        "description": "a job spec (pasture, OpenPAI protocol v2 or MARO) as YAML or JSON",
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "object"}},
        },
    }
}


@router.post("", status_code=201, openapi_extra=_SPEC_BODY, response_model=JobOut)
async def submit_job(request: Request, who: TokenInfo = Depends(principal)) -> dict:
    """Submit a job. 201 with the stored job; 400 malformed YAML/JSON; 422 invalid spec
    (``detail`` lists each problem with its field path in ``loc``); 403 VC not allowed;
    409 a job of that name exists; 413 body over ``api.max_body_bytes``."""
    body = await request.body()
    document = parse_document(body, request.headers.get("content-type"))
    return await run_in_threadpool(request.app.state.jobs.submit, who, document)


@router.get("", response_model=JobPage)
def list_jobs(
    request: Request,
    vc: str | None = Query(None, description="only jobs of this VC"),
    state: JobStateName | None = Query(None, description="only jobs in this state"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
    who: TokenInfo = Depends(principal),
) -> dict:
    """Jobs the caller may see, newest first: ``{items, limit, offset}``."""
    return request.app.state.jobs.list(who, vc=vc, state=state, limit=limit, offset=offset)


@router.get("/{name}", response_model=JobOut)
def get_job(name: str, request: Request, who: TokenInfo = Depends(principal)) -> dict:
    """One job with its tasks, attempt and pending reason. 404 when unknown or not visible."""
    return request.app.state.jobs.get(who, name)


@router.get("/{name}/events", response_model=JobEventsOut)
def job_events(name: str, request: Request, who: TokenInfo = Depends(principal)) -> dict:
    """The job's state transitions (time, state, reason) and its current pending reason."""
    return request.app.state.jobs.events(who, name)


@router.post("/{name}/stop", response_model=JobOut)
def stop_job(name: str, request: Request, who: TokenInfo = Depends(principal)) -> dict:
    """Ask for the job to stop; agents stop its tasks (SIGTERM, grace, SIGKILL)."""
    return request.app.state.jobs.stop(who, name)


@router.delete("/{name}", response_model=JobDeleteOut)
def delete_job(
    name: str,
    request: Request,
    force: bool = Query(False, description="stop a job that has not finished first"),
    who: TokenInfo = Depends(principal),
) -> dict:
    """Delete a finished job's records (``deleted: true``). 409 when it has not finished;
    with ``force=true`` it is asked to stop instead (``deleted: false``; delete again
    once it has stopped). 404 when unknown or not visible."""
    return request.app.state.jobs.delete(who, name, force=force)


@router.get("/{name}/logs/files", response_model=list[LogFileOut])
def log_files(name: str, request: Request, who: TokenInfo = Depends(principal)) -> list[dict]:
    """The job's task log files: ``[{role, index, size}]`` (size in bytes)."""
    request.app.state.jobs.get(who, name)
    return request.app.state.logs.files(name)


@router.get("/{name}/logs", response_class=PlainTextResponse)
def job_logs(
    name: str,
    request: Request,
    role: str | None = Query(None, description="task role; default the first role with a log"),
    index: int | None = Query(None, ge=0, description="task index within the role"),
    follow: bool = Query(False, description="stream until the job finishes"),
    offset: int = Query(0, ge=0, description="start at this byte"),
    who: TokenInfo = Depends(principal),
):
    """A task's stdout/stderr (``<share>/jobs/<job>/logs/<role>-<index>.log``) as text.

    With ``follow=true`` the answer is streamed and ends when the job is in a final
    state and the file is read to its end."""
    jobs = request.app.state.jobs
    logs = request.app.state.logs
    jobs.get(who, name)
    if not follow:
        return PlainTextResponse(logs.read(name, role, index, offset))
    logs.path(name, role, index)  # 404 before the stream starts

    def finished() -> bool:
        try:
            return field(jobs.get(who, name), "state") in TERMINAL_STATES
        except Exception:
            return True

    return StreamingResponse(
        logs.follow(name, role, index, finished, offset), media_type="text/plain"
    )
