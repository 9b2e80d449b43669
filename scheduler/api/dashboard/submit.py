"""The dashboard's submit form: paste (or load) a job spec, see the dry run's answer, then
submit it. ``GET /dashboard/submit`` shows the form; ``POST /dashboard/submit`` with
``action=check`` answers the dry run (where the scheduler would place it now, or why it
would wait; nothing stored) and, when the spec is valid, a Submit button carrying the
same text; ``action=submit`` submits it and redirects to the new job's page. Both need
the session's CSRF token (:func:`scheduler.api.dashboard.actions.acting_session`); the
spec goes through the API's own path (:func:`scheduler.api.routers.jobs.on_spec_body`:
size and depth bounds, YAML or JSON, the same errors), so the form can do nothing the
REST API would refuse. A spec over ``api.max_body_bytes`` is refused unread. Each check
or submit counts against the token's ``api.submit_limit`` (429 with ``Retry-After``), every
page against its ``api.request_limit``, like the REST API's."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Form, Request
from fastapi.responses import RedirectResponse, Response

from scheduler.api.auth import limit_submit
from scheduler.api.dashboard.actions import acting_session
from scheduler.api.dashboard.pages import render, router, session, to_login
from scheduler.api.routers.jobs import on_spec_body
from scheduler.api.schemas import DryRunOut
from scheduler.jobref import qualified_name
from scheduler.services.backend import job_template
from scheduler.services.errors import InvalidSpecError, ServiceError

MAX_SPEC_CHARS = 1 << 20  # the form's textarea: at most 1 MiB of text


def _form(request: Request, s: Any, spec: str, status_code: int = 200, **ctx: Any) -> Response:
    return render(request, "submit.html", s, status_code=status_code, spec=spec, **ctx)


def _problems(exc: ServiceError) -> list[str]:
    """An error's field problems as 'field: message' lines (an invalid spec's ``errors``)."""
    errors = getattr(exc, "errors", None) or []
    out = []
    for e in errors if isinstance(exc, InvalidSpecError) else []:
        loc = ".".join(str(p) for p in e.get("loc", [])) or "(document)"
        out.append(f"{loc}: {e.get('msg', '')}")
    return out


@router.get("/submit")
def submit_page(request: Request) -> Response:
    """The empty form, prefilled with the commented example spec (``pasture template job``)
    under a name of its own (:func:`example_spec`)."""
    s = session(request)
    if s is None:
        return to_login(request)
    return _form(request, s, example_spec())


def example_spec() -> str:
    """The example job spec with a generated name, ``hello-gang-<6 hex digits>`` (24 bits
    from :mod:`secrets`), so that submitting the form as it comes works more than once:
    with the template's fixed ``hello-gang`` the second Check said the name exists."""
    import re
    import secrets

    text = job_template()
    m = re.search(r"^name: hello-gang +", text, re.MULTILINE)
    if m is None:  # the template changed: its own name then
        return text
    line = f"name: hello-gang-{secrets.token_hex(3)} ".ljust(len(m.group(0)))
    return text[: m.start()] + line + text[m.end() :]


@router.post("/submit")
def submit_form(
    request: Request,
    csrf_token: str = Form(""),
    spec: str = Form("", max_length=MAX_SPEC_CHARS),
    action: str = Form("check"),
) -> Response:
    """``action=check``: the dry run's answer under the form (422 with each problem for an
    invalid spec); ``action=submit``: submit and redirect to the job (the same errors)."""
    s = acting_session(request, csrf_token)
    if isinstance(s, Response):
        return s
    if action not in ("check", "submit"):
        return _form(
            request, s, spec, 400, error=f"action: expected check or submit, got {action!r}"
        )
    limit_submit(request, s.who)  # a check is a dry run: both count, as in the REST API
    body = spec.encode()
    services = request.app.state
    try:
        if action == "check":
            dry = DryRunOut.model_validate(
                on_spec_body(body, "application/yaml", lambda d: services.dry_run.dry_run(s.who, d))
            )
            return _form(request, s, spec, dry=dry)
        job = on_spec_body(body, "application/yaml", lambda d: services.jobs.submit(s.who, d))
    except ServiceError as exc:
        return _form(request, s, spec, exc.status, error=exc.message, problems=_problems(exc))
    # the first job stored (a MARO schedule stores several), named with its VC for the link
    return RedirectResponse(f"/dashboard/jobs/{quote(qualified_name(job['key']))}", status_code=303)
