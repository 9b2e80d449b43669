"""The dashboard's routes: server-rendered pages under ``/dashboard`` (Jinja2).

Every page needs a session (see :mod:`sessions`); without one a page redirects to the login
page. Every state-changing form (login, logout, stop job, cordon / uncordon / drain node)
must carry the CSRF token (403 otherwise). Permissions are the API's: the routes call the
same services with the session's token info, so a user sees only its VCs' jobs (another
VC's job is "not found") and only admins may change nodes.

The pages read nothing but the services on ``app.state`` (jobs, nodes, vcs, status,
usage, logs) and the session store made by :func:`scheduler.api.app.create_app`; never
the store itself (``tests/scheduler/dashboard/test_services_only.py`` checks it). Jobs,
tasks and nodes are parsed with the API's response models before a view sees them.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from scheduler.api.auth import (
    client_address,
    failed,
    limit_request,
    refuse,
    refuse_if_address_blocked,
    refuse_if_blocked,
)
from scheduler.api.dashboard import views
from scheduler.api.dashboard.sessions import (
    COOKIE,
    LOGIN_COOKIE,
    Session,
    SessionStore,
    csrf_ok,
)
from scheduler.api.fairness import TimeBudget, TokenGate
from scheduler.api.refusals import digest
from scheduler.api.schemas import (
    VC_NAME,
    JobEventsOut,
    JobOut,
    JobPage,
    NodeOut,
    StatusOut,
    TaskOut,
    VcOut,
)
from scheduler.api.usageschemas import GpuHoursOut, JobUsageOut
from scheduler.jobref import qualified_name
from scheduler.services.errors import ForbiddenError, NotFoundError, ServiceError
from scheduler.services.jobs import JOB_STATES
from scheduler.services.records import as_dict
from scheduler.services.usage import UsageService
from scheduler.timespec import DEFAULT_USAGE_SINCE, parse_when
from scheduler.units import format_gpu_hours

HERE = Path(__file__).parent
STATIC = {p.name: p for p in (HERE / "static").iterdir() if p.is_file()}
LOG_TAIL_BYTES = 64 * 1024  # one poll of a log returns at most 64 KiB (the first: the last)
PAGE_SIZE = 50

templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["duration"] = views.duration
templates.env.filters["jobref"] = qualified_name  # a job key -> <name>.<vc> for links
templates.env.filters["hours"] = format_gpu_hours
templates.env.filters["cpu"] = views.cpu
templates.env.filters["memory"] = views.memory
templates.env.filters["clock"] = views.clock
templates.env.filters["limit"] = views.limit_text
templates.env.globals["consequences"] = views.CONSEQUENCES


def sessions(request: Request) -> SessionStore:
    """The app's session store (``app.state.dashboard_sessions``, made by ``create_app``)."""
    kept: SessionStore = request.app.state.dashboard_sessions
    return kept


KNOWN_SESSIONS = 4096
"""Session cookies this process saw valid, kept (as digests) so that an address over its
failure limit does not lock out its users who are logged in."""


def known_sessions(request: Request) -> dict[str, str]:
    """``{digest of a session cookie (:func:`scheduler.api.refusals.digest`): its token's
    name}`` of the sessions this process
    saw valid (at most :data:`KNOWN_SESSIONS`, oldest dropped first)."""
    known: dict[str, str] = request.app.state.__dict__.setdefault("dashboard_known_sessions", {})
    return known


async def fair_share(request: Request) -> AsyncIterator[None]:
    """Router dependency of every dashboard route: a known session's request waits for
    its token's slot of the process (:class:`scheduler.api.fairness.TokenGate`), so one
    tenant's page flood takes at most that share, and the time it holds the slot counts
    against the token's ``api.token_time_limit`` (:class:`~scheduler.api.fairness.TimeBudget`);
    unknown cookies are not gated (they are refused or redirected cheaply, and limited
    per address).

    Raises:
        HTTPException 429: the token is over its handler-time budget (its session is then
            held: :mod:`scheduler.api.refusals`).
    """
    sid = request.cookies.get(COOKIE)
    token = known_sessions(request).get(digest(sid)) if sid and len(sid) <= 100 else None
    if token is None:
        yield
        return
    state = request.app.state
    budget: TimeBudget = state.time_budget
    wait = budget.retry_after(token)
    if wait is not None:
        raise refuse(request, wait, f"token {token!r} is over its handler-time budget")
    gate: TokenGate = state.token_gate
    async with gate.hold(token):
        start = time.monotonic()
        try:
            yield
        finally:
            budget.charge(token, time.monotonic() - start)


router = APIRouter(
    prefix="/dashboard",
    include_in_schema=False,
    dependencies=[Depends(fair_share, scope="function")],  # gate given back before bodies
)


def session(request: Request) -> Session | None:
    """The request's dashboard session (None: none or unknown), counted like an API
    request: against the token's ``api.request_limit``, and an unknown session cookie as a
    failed authentication of the client's address (issue 32 item 5).

    Raises:
        HTTPException 429: the session's token is over its request limit, or the address
            over its failure limit (for a cookie not seen valid before).
    """
    sid = request.cookies.get(COOKIE)
    if not sid:
        return None
    state = request.app.state
    known = known_sessions(request)
    key = digest(sid)
    if key not in known:
        refuse_if_address_blocked(request)
    s = sessions(request).get(sid)
    if s is None:
        known.pop(key, None)
        state.auth_limiter.failed_address(client_address(request))
        return None
    known[key] = s.who.name
    while len(known) > KNOWN_SESSIONS:
        known.pop(next(iter(known)))
    limit_request(request, s.who)
    return s


def to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/dashboard/login?next={quote(target, safe='')}", status_code=303)


def render(
    request: Request, name: str, s: Session | None, status_code: int = 200, **ctx: Any
) -> Response:
    ctx.update(session=s, who=s.who if s else None, csrf=s.csrf if s else "")
    resp = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Content-Security-Policy"] = (
        "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'"
    )
    return resp


def error(request: Request, s: Session | None, status_code: int, message: str) -> Response:
    return render(request, "error.html", s, status_code=status_code, message=message)


def set_cookie(resp: Response, name: str, value: str, max_age: int | None) -> None:
    resp.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/dashboard",
        secure=True,
        httponly=True,
        samesite="strict",
    )


def safe_next(target: str | None) -> str:
    """Only local dashboard paths are followed after login (no open redirect)."""
    if target and target.startswith("/dashboard") and not target.startswith("//"):
        return target
    return "/dashboard/"


# ---- static ---------------------------------------------------------------------------
@router.get("/static/{name}")
def static(name: str) -> Response:
    """The dashboard's CSS and JavaScript (vendored, no CDN)."""
    path = STATIC.get(name)
    if path is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return FileResponse(path, headers={"Cache-Control": "public, max-age=3600"})


# ---- login / logout ---------------------------------------------------------------------
@router.get("/login")
def login_page(request: Request, next: str | None = None) -> Response:
    token = secrets.token_urlsafe(24)
    resp = render(request, "login.html", None, next=safe_next(next), csrf_login=token, failed=False)
    set_cookie(resp, LOGIN_COOKIE, token, 600)
    return resp


@router.post("/login")
def login(
    request: Request,
    token: str = Form("", max_length=500),
    csrf_token: str = Form(""),
    next: str = Form("/dashboard/"),
) -> Response:
    if not csrf_ok(request.cookies.get(LOGIN_COOKIE), csrf_token):
        return error(request, None, 403, "The login form's CSRF token is missing or wrong.")
    try:
        refuse_if_blocked(request, token)
        refuse_if_address_blocked(request)
    except HTTPException as exc:
        resp = error(request, None, exc.status_code, str(exc.detail))
        resp.headers.update(exc.headers or {})
        return resp
    s = sessions(request).login(token)
    if s is None:
        failed(request, token)
        fresh = secrets.token_urlsafe(24)
        expired = sessions(request).expired_at(token)
        resp = render(
            request,
            "login.html",
            None,
            401,
            next=safe_next(next),
            csrf_login=fresh,
            failed=True,
            expired=views.clock(expired) if expired is not None else "",
        )
        set_cookie(resp, LOGIN_COOKIE, fresh, 600)
        return resp
    resp = RedirectResponse(safe_next(next), status_code=303)
    set_cookie(resp, COOKIE, s.sid, sessions(request).ttl_s)
    resp.delete_cookie(LOGIN_COOKIE, path="/dashboard")
    return resp


@router.post("/logout")
def logout(request: Request, csrf_token: str = Form("")) -> Response:
    s = session(request)
    if s is not None:
        if not csrf_ok(s.csrf, csrf_token):
            return error(request, s, 403, "CSRF token missing or wrong; nothing was changed.")
        sessions(request).logout(s.sid)
    resp = RedirectResponse("/dashboard/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/dashboard")
    return resp


# ---- pages --------------------------------------------------------------------------
@router.get("/")
def overview(request: Request) -> Response:
    """Cluster totals from the status service, VC bars from the VC service (the same
    figures ``GET /api/v1/status`` and ``/api/v1/vcs`` give), the usage chart's data from
    ``/dashboard/usage``."""
    s = session(request)
    if s is None:
        return to_login(request)
    state = request.app.state
    status = StatusOut.model_validate(state.status.status(s.who))
    vcs = [VcOut.model_validate(v) for v in state.vcs.list(s.who)]
    jobs, capacity, allocated = status.jobs, status.capacity, status.allocated
    return render(
        request,
        "overview.html",
        s,
        cluster=status.cluster,
        nodes=sum(status.nodes.values()),
        node_states=sorted(status.nodes.items()),
        jobs={
            "running": jobs.get("running", 0),
            "waiting": sum(jobs.get(k, 0) for k in views.WAITING),
        },
        gpus={
            "total": capacity.gpu,
            "allocated": allocated.gpu,
            "free": max(0, capacity.gpu - allocated.gpu),
        },
        capacity=capacity,
        allocated=allocated,
        vc_gpu=views.vc_bars(vcs, "gpu"),
        vc_cpu=views.vc_bars(vcs, "cpu_m"),
    )


@router.get("/usage")
def usage_series(
    request: Request,
    node: str | None = Query(None, max_length=253),
    window_s: int = Query(3600, ge=60, le=7200),
) -> Response:
    """Utilisation over the last ``window_s`` seconds as uPlot columns
    ``{t: [Unix s], cpu, mem, gpu: [percent or null]}`` (:func:`views.chart_series`): the
    cluster's per-minute means, or with ``node`` that node's samples (one per 5 s)."""
    s = session(request)
    if s is None:
        return JSONResponse({"detail": "log in first"}, status_code=401)
    usage: UsageService = request.app.state.usage
    try:
        got = usage.cluster(s.who, window_s) if node is None else usage.node(s.who, node, window_s)
    except ServiceError as exc:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)
    return JSONResponse(
        {**views.chart_series(got.samples), "now": got.now, "window_s": got.window_s},
        headers={"Cache-Control": "no-store"},
    )


@router.get("/nodes")
def nodes_page(request: Request) -> Response:
    s = session(request)
    if s is None:
        return to_login(request)
    state = request.app.state
    nodes = [NodeOut.model_validate(n) for n in state.nodes.list(s.who)]
    rows = views.node_rows(nodes, state.nodes.allocated(s.who), state.status.now())
    return render(request, "nodes.html", s, rows=rows, admin=s.who.role.value == "admin")


@router.get("/nodes/{name}")
def node_page(name: str, request: Request) -> Response:
    s = session(request)
    if s is None:
        return to_login(request)
    state = request.app.state
    try:
        node = NodeOut.model_validate(state.nodes.get(s.who, name))
        # The API's visibility rule: other VCs' tasks are summed, never named.
        held = state.nodes.allocations(s.who, name)
        allocated = state.nodes.allocated(s.who, name)
    except NotFoundError as exc:
        return error(request, s, 404, exc.message)
    row = views.node_rows([node], allocated, state.status.now())[0]
    return render(
        request,
        "node.html",
        s,
        node=node,
        row=row,
        gpus=views.gpu_rows(node),
        allocations=held["tasks"],
        others=held["others"],
        admin=s.who.role.value == "admin",
    )


@router.get("/jobs")
def jobs_page(
    request: Request,
    state: str | None = Query(None),
    vc: str | None = Query(None),
    user: str | None = Query(None),
    page: int = Query(1, ge=1, le=10000),
) -> Response:
    s = session(request)
    if s is None:
        return to_login(request)
    state = state or None
    vc = vc or None
    user = (user or "").strip() or None
    if state is not None and state not in JOB_STATES:
        return error(
            request, s, 400, f"state: expected one of {', '.join(JOB_STATES)}, got {state!r}"
        )
    services = request.app.state
    jobs = services.jobs
    if vc is not None and not re.match(VC_NAME, vc):
        return error(request, s, 400, f"vc: expected a VC name, got {vc!r}")
    listing = jobs.list(
        s.who, vc=vc, state=state, user=user, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE
    )
    page_ = JobPage.model_validate(listing)
    items, total = page_.items, page_.total
    tasks = jobs.tasks_of(s.who, [j.key for j in items])
    now = services.status.now()
    rows = [
        views.job_row(j, [TaskOut.model_validate(t) for t in tasks.get(j.key, [])], now)
        for j in items
    ]
    vcs = services.vcs.names(s.who)
    return render(
        request,
        "jobs.html",
        s,
        rows=rows,
        total=total,
        page=page,
        pages=max(1, -(-total // PAGE_SIZE)),
        states=JOB_STATES,
        vcs=vcs,
        f_state=state or "",
        f_vc=vc or "",
        f_user=user or "",
    )


@router.get("/jobs/{name}")
def job_page(name: str, request: Request) -> Response:
    s = session(request)
    if s is None:
        return to_login(request)
    state = request.app.state
    try:
        name = state.jobs.resolve(s.who, name)  # the job's key (scheduler/jobref.py)
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    try:
        job = JobOut.model_validate(state.jobs.get(s.who, name))
        events = JobEventsOut.model_validate(state.jobs.events(s.who, name)).events
    except NotFoundError as exc:
        return error(request, s, 404, exc.message)
    now = state.status.now()
    tasks = sorted(job.tasks or [], key=lambda t: (t.role, t.index))
    roles = job.spec.get("roles") or {}
    try:
        files = state.logs.files(name, job.uid)
    except (NotFoundError, ForbiddenError):  # a log directory a task replaced by a link
        files = []
    usage = JobUsageOut.model_validate(
        as_dict(state.job_usage.job(s.who, name, 3600, uid=job.uid or None))
    )
    return render(
        request,
        "job.html",
        s,
        job=job,
        row=views.job_row(job, tasks, now),
        tasks=tasks,
        diagnoses=[views.task_diagnosis(t) for t in tasks],
        roles=roles,
        events=events,
        files=files,
        usage=usage,
        # the charts span the job's life (a minute at least, the hour kept at most)
        chart_window=int(max(60, min(3600, now - job.created + 30))),
        now=now,
        terminal=job.state in views.TERMINAL,
        spec_yaml=yaml.safe_dump(job.spec, sort_keys=False, allow_unicode=True),
    )


@router.get("/jobs/{name}/usage")
def job_usage_series(
    name: str,
    request: Request,
    task: str = Query(max_length=300),
    uid: str | None = Query(None, max_length=32),
    window_s: int = Query(3600, ge=60, le=7200),
) -> Response:
    """One task's usage as uPlot columns ``{t, cpu, mem, gpu}`` in percent
    (:func:`views.task_chart_series`: CPU and memory of its request, GPU busy) for the job
    page's charts; 404 for a job the caller may not see or (``uid``) another submission."""
    s = session(request)
    if s is None:
        return JSONResponse({"detail": "log in first"}, status_code=401)
    try:
        name = request.app.state.jobs.resolve(s.who, name)  # the job's key
        got = request.app.state.job_usage.job(s.who, name, window_s, uid=uid, task=task)
    except ServiceError as exc:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)
    found = [t for t in got["tasks"] if t.task == task]
    series = views.task_chart_series(found[0]) if found else views.chart_series([])
    return JSONResponse(
        {**series, "now": got["now"], "window_s": got["window_s"]},
        headers={"Cache-Control": "no-store"},
    )


@router.get("/schedules")
def schedules_page(request: Request) -> Response:
    """The scheduled jobs of the caller's VCs (:mod:`scheduler.services.schedules`), each
    with its runs linked to their job pages."""
    from scheduler.api.routers.schedules import schedule_service

    s = session(request)
    if s is None:
        return to_login(request)
    items = schedule_service(request).list(s.who)["items"]
    return render(request, "schedules.html", s, items=items)


@router.get("/gpu-hours")
def gpu_hours_page(
    request: Request,
    since: str = Query(DEFAULT_USAGE_SINCE, max_length=40),
    until: str = Query("", max_length=40),
    by: str = Query("user", max_length=4),
) -> Response:
    """GPU-hours per user or VC over a range (:mod:`scheduler.services.accounting`);
    ``since``/``until`` as ``pasture usage`` takes them (2h, 7d, an ISO date, Unix s)."""
    s = session(request)
    if s is None:
        return to_login(request)
    now = request.app.state.status.now()
    try:
        start = parse_when(since, now, "since")
        end = parse_when(until, now, "until") if until.strip() else None
    except ValueError as exc:  # the message names the field and the forms
        return error(request, s, 400, str(exc))
    if by not in ("user", "vc"):
        return error(request, s, 400, f"by: expected user or vc, got {by!r}")
    try:
        report = GpuHoursOut.model_validate(
            as_dict(request.app.state.accounting.gpu_hours(s.who, start, end, by))
        )
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    return render(
        request,
        "gpu_hours.html",
        s,
        report=report,
        f_since=since,
        f_until=until,
        f_by=by,
        gpu_bars=views.hours_bars(report.rows, "gpu_hours", "GPU-hours"),
        core_bars=views.hours_bars(report.rows, "core_hours", "core-hours"),
    )


@router.get("/jobs/{name}/log")
def job_log(
    name: str,
    request: Request,
    role: str | None = Query(None),
    index: int | None = Query(None, ge=0),
    offset: int = Query(-1, ge=-1, description="-1: the last 64 KiB"),
    uid: str | None = Query(None, max_length=32, description="the job's uid the page shows"),
) -> Response:
    """A task log's bytes from ``offset`` as JSON ``{text, offset, state}`` for the job
    page's live tail (polled; ``offset`` is where the next poll starts). With ``uid`` (the
    page sends the uid of the job it shows) a job deleted and submitted again under the
    same name answers 404, so a tail never continues into another job's log."""
    s = session(request)
    if s is None:
        return JSONResponse({"detail": "log in first"}, status_code=401)
    state = request.app.state
    try:
        name = state.jobs.resolve(s.who, name)  # the job's key (scheduler/jobref.py)
        job = state.jobs.get(s.who, name)
    except ServiceError as exc:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)
    if uid is not None and uid != job.get("uid", ""):
        detail = f"job {name!r} of uid {uid} was deleted or replaced"
        return JSONResponse({"detail": detail}, status_code=404)
    ref = job.get("uid", "")
    try:
        path = state.logs.path(name, role, index, ref)
        size = state.logs.size(path)
        start = max(0, size - LOG_TAIL_BYTES) if offset < 0 else min(offset, size)
        data = state.logs.read(name, role, index, start, LOG_TAIL_BYTES, ref)
    except (NotFoundError, ForbiddenError, FileNotFoundError):
        start, data = 0, b""
    return JSONResponse(
        {
            "text": data.decode("utf-8", errors="replace"),
            "offset": start + len(data),
            "state": job.get("state"),
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/vcs")
def vcs_page(request: Request) -> Response:
    s = session(request)
    if s is None:
        return to_login(request)
    vcs = [VcOut.model_validate(v) for v in request.app.state.vcs.list(s.who)]
    return render(
        request,
        "vcs.html",
        s,
        vcs=vcs,
        gpu=views.vc_bars(vcs, "gpu"),
        cpu=views.vc_bars(vcs, "cpu_m"),
        mem=views.vc_bars(vcs, "memory"),
    )
