"""Job routes: submit, list, show, events, stop, delete, logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from scheduler.api.auth import principal, submitter
from scheduler.api.bounds import check_document
from scheduler.api.responses import (
    BAD_BODY,
    CONFLICT,
    FORBIDDEN,
    INVALID,
    NOT_FOUND,
    TOO_LARGE,
    errors,
)
from scheduler.api.schemas import (
    VC_NAME,
    DryRunOut,
    ExecAccessOut,
    JobDeleteOut,
    JobEventsOut,
    JobOut,
    JobPage,
    JobSubmitOut,
    LogFileOut,
)
from scheduler.services.errors import BadRequestError, InvalidError, InvalidSpecError
from scheduler.services.jobs import JobService, JobStateName, parse_document
from scheduler.services.logs import LogService
from scheduler.states import JobState
from scheduler.store.tokens import TokenInfo

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

# Spec parsing and validation are CPU-bound: they run in worker threads, at most this many
# at once, so a flood of slow submits neither blocks the event loop (/healthz keeps
# answering) nor takes every thread of the pool the other routes share.
SPEC_WORKERS = 4
MAX_TAIL_LINES = 1_000_000
UID_DOC = (
    "the job's uid (GET /jobs/{name}): when the job of that name now has another uid "
    "(deleted and submitted again), 404 instead of the new job's logs"
)

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


def on_spec_body(
    body: bytes,
    content_type: str | None,
    handle: Callable[[dict[str, Any]], dict[str, Any]],
    what: str = "job spec",
) -> dict[str, Any]:
    """Parse ``body`` (YAML or JSON) within the spec's bounds and return ``handle`` of the
    document (runs in a worker thread). The one path of every spec-carrying request:
    submit, dry run and batch.

    The parsed document must pass :func:`check_document` (size with aliases expanded,
    depth) before ``handle`` sees it. Input that defeats the parser or the validator
    (nesting past the interpreter's recursion limit, numbers that overflow a conversion)
    is the client's error: 400 while parsing, 422 while handling; never a 500. ``what``
    names the body in those messages ("job spec", "batch").
    """
    try:
        document = parse_document(body, content_type)
    except RecursionError:
        raise BadRequestError(f"{what}: the document is nested too deeply to parse") from None
    check_document(document)
    try:
        return handle(document)
    except (RecursionError, OverflowError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else "a number too large"
        raise InvalidSpecError(
            f"invalid {what}: {why}", [{"loc": [], "msg": why, "type": "value_error"}]
        ) from None


def parse_and_submit(
    jobs: JobService, who: TokenInfo, body: bytes, content_type: str | None
) -> dict[str, Any]:
    """Parse ``body`` and submit it (:func:`on_spec_body`; runs in a worker thread)."""
    return on_spec_body(body, content_type, lambda document: jobs.submit(who, document))


def _spec_limiter(request: Request) -> anyio.CapacityLimiter:
    state = request.app.state
    if getattr(state, "spec_limiter", None) is None:
        state.spec_limiter = anyio.CapacityLimiter(SPEC_WORKERS)
    limiter: anyio.CapacityLimiter = state.spec_limiter
    return limiter


@router.post(
    "",
    status_code=201,
    openapi_extra=_SPEC_BODY,
    response_model=JobSubmitOut,
    responses=errors(BAD_BODY, FORBIDDEN, CONFLICT, TOO_LARGE, INVALID),
)
async def submit_job(request: Request, who: TokenInfo = Depends(submitter)) -> dict[str, Any]:
    """Submit a job. 201 with the stored job; 400 malformed YAML/JSON; 422 invalid spec
    (``detail`` lists each problem with its field path in ``loc``); 403 VC not allowed;
    409 a job of that name exists; 413 body over ``api.max_body_bytes`` (refused by the
    body size limit before it is read)."""
    body = await request.body()
    return await anyio.to_thread.run_sync(
        parse_and_submit,
        request.app.state.jobs,
        who,
        body,
        request.headers.get("content-type"),
        limiter=_spec_limiter(request),
    )


def parse_and_dry_run(
    request: Request, who: TokenInfo, body: bytes, content_type: str | None
) -> dict[str, Any]:
    """Parse ``body`` as :func:`parse_and_submit` does (:func:`on_spec_body`: same bounds,
    same errors), then dry-run it (:class:`scheduler.services.dryrun.DryRunService`; runs
    in a worker thread)."""
    dry_run = request.app.state.dry_run.dry_run
    return on_spec_body(body, content_type, lambda document: dry_run(who, document))


@router.post(
    ":dry-run",
    status_code=200,
    openapi_extra=_SPEC_BODY,
    response_model=DryRunOut,
    responses=errors(BAD_BODY, FORBIDDEN, CONFLICT, TOO_LARGE, INVALID),
)
async def dry_run_job(request: Request, who: TokenInfo = Depends(submitter)) -> dict[str, Any]:
    """Check a job spec exactly as a submit would and say where the scheduler would place
    it now (task -> node) or why it would wait; nothing is stored, no event is written.
    200 with ``{format, warnings, jobs: [{name, vc, placed, placements, pending_reason,
    rejected, nodes}]}``; 400, 403, 409, 413 and 422 as ``POST /jobs`` (422 also when no
    node could ever hold the job)."""
    body = await request.body()
    return await anyio.to_thread.run_sync(
        parse_and_dry_run,
        request,
        who,
        body,
        request.headers.get("content-type"),
        limiter=_spec_limiter(request),
    )


@router.get("", response_model=JobPage, responses=errors(FORBIDDEN, INVALID))
def list_jobs(
    request: Request,
    vc: str | None = Query(None, description="only jobs of this VC", pattern=VC_NAME),
    state: JobStateName | None = Query(None, description="only jobs in this state"),
    user: str | None = Query(
        None, description="only jobs submitted by this token name", min_length=1, max_length=128
    ),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=1_000_000),
    who: TokenInfo = Depends(principal),
) -> dict[str, Any]:
    """Jobs the caller may see, newest first: ``{items, total, limit, offset}``."""
    jobs: JobService = request.app.state.jobs
    return jobs.list(who, vc=vc, state=state, user=user, limit=limit, offset=offset)


def job_ref(
    name: str,
    request: Request,
    vc: str | None = Query(
        None,
        description="the job's VC, when the caller has jobs of that name in several",
        min_length=1,
        max_length=64,
    ),
    who: TokenInfo = Depends(principal),
) -> str:
    """The key of the job ``{name}`` names for the caller (``JobService.resolve``): its
    job of that name in its VCs, or in ``?vc=``. 404 when none (the message names only
    the name); 409 when it has one in several VCs and gave no ``vc``."""
    jobs: JobService = request.app.state.jobs
    return jobs.resolve(who, name, vc)


@router.get("/{name}", response_model=JobOut, responses=errors(FORBIDDEN, NOT_FOUND))
def get_job(
    request: Request, who: TokenInfo = Depends(principal), name: str = Depends(job_ref)
) -> dict[str, Any]:
    """One job with its tasks, attempt and pending reason. 404 when unknown or not visible."""
    jobs: JobService = request.app.state.jobs
    return jobs.get(who, name)


@router.get("/{name}/events", response_model=JobEventsOut, responses=errors(FORBIDDEN, NOT_FOUND))
def job_events(
    request: Request, who: TokenInfo = Depends(principal), name: str = Depends(job_ref)
) -> dict[str, Any]:
    """The job's state transitions (time, state, reason) and its current pending reason."""
    jobs: JobService = request.app.state.jobs
    return jobs.events(who, name)


@router.post("/{name}/stop", response_model=JobOut, responses=errors(FORBIDDEN, NOT_FOUND))
def stop_job(
    request: Request, who: TokenInfo = Depends(principal), name: str = Depends(job_ref)
) -> dict[str, Any]:
    """Ask for the job to stop; agents stop its tasks (SIGTERM, grace, SIGKILL)."""
    jobs: JobService = request.app.state.jobs
    return jobs.stop(who, name)


@router.delete(
    "/{name}", response_model=JobDeleteOut, responses=errors(FORBIDDEN, NOT_FOUND, CONFLICT)
)
def delete_job(
    request: Request,
    force: bool = Query(False, description="stop a job that has not finished first"),
    who: TokenInfo = Depends(principal),
    name: str = Depends(job_ref),
) -> dict[str, Any]:
    """Delete a finished job's records (``deleted: true``). 409 when it has not finished;
    with ``force=true`` it is asked to stop instead (``deleted: false``; delete again
    once it has stopped). 404 when unknown or not visible."""
    jobs: JobService = request.app.state.jobs
    return jobs.delete(who, name, force=force)


@router.post(
    "/{name}/tasks/{role}/{index}/exec",
    response_model=ExecAccessOut,
    responses=errors(FORBIDDEN, NOT_FOUND, CONFLICT),
)
def exec_access(
    role: str,
    index: int,
    request: Request,
    who: TokenInfo = Depends(principal),
    name: str = Depends(job_ref),
) -> dict[str, Any]:
    """The address, sshd port and key of a running task of a job with ``ssh: true``, for
    ``pasture job exec`` (scheduler/services/jobexec.py). 403 unless the caller submitted
    the job or is an admin; 409 when the job has no ssh or the task is not running."""
    from scheduler.services.jobexec import exec_access as access

    return access(request.app.state.jobs, who, name, role, index)


@router.get(
    "/{name}/logs/files", response_model=list[LogFileOut], responses=errors(FORBIDDEN, NOT_FOUND)
)
def log_files(
    request: Request,
    uid: str | None = Query(None, max_length=32, description=UID_DOC),
    who: TokenInfo = Depends(principal),
    name: str = Depends(job_ref),
) -> list[dict[str, Any]]:
    """The job's task log files: ``[{role, index, size}]`` (size in bytes), of this
    submission only (its uid's directory)."""
    jobs: JobService = request.app.state.jobs
    job = jobs.get(who, name, uid=uid)
    logs: LogService = request.app.state.logs
    return logs.files(name, job.get("uid", ""))


@router.get(
    "/{name}/logs",
    response_class=PlainTextResponse,
    responses={
        **errors(FORBIDDEN, NOT_FOUND, INVALID),
        200: {
            "description": "the log's bytes (text/plain), streamed",
            "headers": {
                "X-Log-Size": {
                    "description": "the file's size in bytes when the read started",
                    "schema": {"type": "integer"},
                },
                "X-Log-Next-Offset": {
                    "description": "with timestamps or since: the byte of the file to go on"
                    " from (the answer is not a byte range of the file then)",
                    "schema": {"type": "integer"},
                },
            },
        },
    },
)
def job_logs(
    request: Request,
    role: str | None = Query(None, description="task role; default the first role with a log"),
    index: int | None = Query(None, ge=0, description="task index within the role"),
    follow: bool = Query(False, description="stream until the job finishes"),
    offset: int = Query(0, ge=0, description="start at this byte"),
    limit: int | None = Query(None, ge=0, description="at most this many bytes"),
    tail: int | None = Query(
        None, ge=0, le=MAX_TAIL_LINES, description="start at the last N lines (not before offset)"
    ),
    uid: str | None = Query(None, max_length=32, description=UID_DOC),
    since: str | None = Query(
        None,
        max_length=64,
        description="only lines written at or after: a duration ago (10m, 1h, 2d) or an"
        " RFC 3339 time (2026-11-28T04:00:00Z)",
    ),
    timestamps: bool = Query(
        False, description="prefix each line with its time (RFC 3339 UTC) and a space"
    ),
    who: TokenInfo = Depends(principal),
    name: str = Depends(job_ref),
) -> StreamingResponse:
    """A task's stdout/stderr (``<share>/jobs/<job>/logs/<uid>/<role>-<index>.log``) as text,
    streamed in 64 KiB chunks (memory stays bounded whatever the file's size).

    ``offset``/``limit`` select a byte range; ``tail=N`` starts at the last N lines (found
    by reading backwards from the end), or at ``offset`` when that is later (the last N
    lines not seen yet). The ``X-Log-Size`` header gives the file's size in bytes when the
    read started; the next poll starts at the start plus the bytes received. With
    ``follow=true`` the answer streams until the job is in a final state and the file is
    read to its end, or until ``limit`` bytes were sent.

    ``since`` starts at the first line the agent saw at or after that time (lines of
    unknown time are kept unless known to be older; :meth:`LogService.since_offset`).
    ``timestamps=true`` answers whole lines, each prefixed with its time or ``(time
    unknown)`` (:meth:`LogService.timed`), at most 1 MiB of the file per answer without
    ``follow``; ``X-Log-Next-Offset`` says where the next poll starts. 422 for a
    ``since`` of no known form."""
    import time

    from scheduler.timespec import parse_when

    jobs: JobService = request.app.state.jobs
    logs: LogService = request.app.state.logs
    now = time.time()
    when = None
    if since is not None:
        try:
            when = parse_when(since, now, "since")
        except ValueError as exc:
            raise InvalidError(str(exc)) from None
    job = jobs.get(who, name, uid=uid)
    ref = job.get("uid", "")
    path = logs.path(name, role, index, ref)  # 404 (403 for a planted link) before the stream
    size = logs.size(path)
    start = min(offset, size)
    if tail is not None:
        start = max(start, logs.tail_offset(path, tail))
    if when is not None:
        start = max(start, logs.since_offset(path, when))
    headers = {"X-Log-Size": str(size), "Cache-Control": "no-store"}
    if timestamps and not follow:
        final = job.get("state") in {s.value for s in JobState if s.terminal}  # all timed
        data, next_offset = logs.timed(path, start, now, final=final)
        headers["X-Log-Next-Offset"] = str(next_offset)
        return StreamingResponse(iter([data]), media_type="text/plain", headers=headers)
    if not follow:
        headers["X-Log-Next-Offset"] = str(size if limit is None else min(size, start + limit))
        return StreamingResponse(
            logs.stream(path, start, limit), media_type="text/plain", headers=headers
        )

    def finished() -> bool:  # the job ended, or was deleted (and maybe submitted again)
        try:
            return jobs.state(who, name, uid=ref or None).terminal
        except Exception:
            return True

    return StreamingResponse(
        logs.follow(name, role, index, finished, start, limit, uid=ref, timestamps=timestamps),
        media_type="text/plain",
        headers=headers,
    )
