"""The dashboard's state-changing forms: stop and resubmit a job, cordon / uncordon /
drain a node. Each needs a session and its CSRF token; stop, cordon and drain also need
``confirmed=yes`` (the page's dialog sets it; without it the answer is a confirmation page
and nothing changes). Permissions are the services' (the API's)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote

from fastapi import Form, Request
from fastapi.responses import RedirectResponse, Response

from scheduler.api.dashboard import views
from scheduler.api.dashboard.pages import error, render, router, session
from scheduler.api.dashboard.sessions import Session, csrf_ok
from scheduler.jobref import qualified_name, short_name
from scheduler.services.errors import ConflictError, ServiceError
from scheduler.services.jobs import JobService


def confirm_page(request: Request, s: Session, action: str, name: str, target: str) -> Response:
    """The confirmation step of a state-changing form posted without ``confirmed=yes``
    (the page's dialog sets it; without JavaScript this page asks instead)."""
    return render(
        request,
        "confirm.html",
        s,
        action=action,
        subject=name,
        kind="node" if "/nodes/" in target else "job",
        target=target,
        back="/dashboard/nodes" if "/nodes/" in target else target.rsplit("/", 1)[0],
        consequence=views.CONSEQUENCES[action],
    )


def acting_session(request: Request, csrf_token: str) -> Session | Response:
    """The session a state-changing form acts as, or the error page to answer instead:
    401 without a session, 403 when the form's CSRF token is missing or wrong."""
    s = session(request)
    if s is None:
        return error(request, None, 401, "Log in first.")
    if not csrf_ok(s.csrf, csrf_token):
        return error(request, s, 403, "CSRF token missing or wrong; nothing was changed.")
    return s


@router.post("/nodes/{name}/{action}")
def node_action(
    name: str,
    action: Literal["cordon", "uncordon", "drain"],
    request: Request,
    csrf_token: str = Form(""),
    confirmed: str = Form(""),
) -> Response:
    """Cordon, uncordon or drain a node (admins). Cordon and drain need ``confirmed=yes``;
    without it the answer is a confirmation page and nothing changes."""
    s = acting_session(request, csrf_token)
    if isinstance(s, Response):
        return s
    try:
        # refusals (a user token, an unknown node) come before the question
        request.app.state.nodes.check_change(s.who, name)
        if action in views.CONSEQUENCES and confirmed != "yes":
            target = f"/dashboard/nodes/{quote(name)}/{action}"
            return confirm_page(request, s, action, name, target)
        request.app.state.nodes.set_state(s.who, name, action)
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    return RedirectResponse("/dashboard/nodes", status_code=303)


@router.post("/jobs/{name}/stop")
def stop_job(
    name: str, request: Request, csrf_token: str = Form(""), confirmed: str = Form("")
) -> Response:
    """Stop a job; needs ``confirmed=yes`` (else a confirmation page, nothing changes)."""
    s = acting_session(request, csrf_token)
    if isinstance(s, Response):
        return s
    try:
        key = request.app.state.jobs.resolve(s.who, name)  # the job's key (jobref.py)
        name = qualified_name(key)  # its links' form
        if confirmed != "yes":
            request.app.state.jobs.get(s.who, key)  # another VC's job: 404 before asking
            target = f"/dashboard/jobs/{quote(name)}/stop"
            return confirm_page(request, s, "stop", short_name(key), target)
        request.app.state.jobs.stop(s.who, key, reason=f"stopped by {s.who.name} (dashboard)")
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    return RedirectResponse(f"/dashboard/jobs/{quote(name)}", status_code=303)


@router.post("/jobs/{name}/resubmit")
def resubmit_job(name: str, request: Request, csrf_token: str = Form("")) -> Response:
    """Submit the job's stored spec again as ``NAME-r2`` (then ``-r3``...), through the
    job service's submit (the checks of ``POST /api/v1/jobs``), as ``pasture job resubmit``
    does; redirects to the new job's page."""
    s = acting_session(request, csrf_token)
    if isinstance(s, Response):
        return s
    jobs: JobService = request.app.state.jobs
    try:
        key = jobs.resolve(s.who, name)  # the job's key (scheduler/jobref.py)
        name = short_name(key)
        spec = dict(jobs.get(s.who, key).get("spec") or {})
        if not spec:
            return error(request, s, 409, f"job {name!r} has no stored spec to resubmit")
        for k in range(2, 100):
            suffix = f"-r{k}"
            candidate = name[: 61 - len(suffix)].rstrip("-") + suffix
            try:
                job = jobs.submit(s.who, {**spec, "name": candidate})
                break
            except ConflictError:
                continue
        else:
            return error(request, s, 409, f"no free name {name}-rN for the resubmitted job")
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    return RedirectResponse(f"/dashboard/jobs/{quote(qualified_name(job['key']))}", status_code=303)
