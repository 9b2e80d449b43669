"""Every task log of a job on one page, with search and download.

``GET /dashboard/jobs/{name}/logs`` shows the end of each task's log (role-index order),
at most :data:`PER_TASK_BYTES` per task and :data:`PAGE_BYTES` in all, so a page costs
bounded memory and time whatever the logs' sizes; ``q`` keeps only the lines holding that
text (case-insensitive; matches highlighted) within what is shown. ``GET
/dashboard/jobs/{name}/logs/download`` streams one task's whole log (``role``, ``index``)
or, without them, every task's log one after the other with each line prefixed
``role-index | `` (as ``pasture job logs`` prints them), as a text attachment; a file
that a task removed or swapped for a link after the listing is skipped with one line
``role-index | (log not read: why)``. Both need a session and the job's visibility
(another VC's job is "not found").

Each shown line carries its line number in the task's log and the attempt it came from
(the agent writes ``=== attempt N on NODE ===`` before each attempt of a task,
scheduler/agent/agent.py): a search's matches keep both. When only the end of a log is
shown, the part before it is scanned once for its newlines and its last attempt header
(one chunk in memory at a time), up to :data:`SCAN_BYTES`; past that the numbers are left
out rather than guessed. Downloads are named ``<job>-<uid>-<attempt>-<role>-<index>.log``
(``<job>-<uid>-<attempt>.log`` for all tasks): ``uid`` is the submission's first 8 hex
digits and ``attempt`` the job's attempt, so a job deleted and submitted again under the
same name, or retried, never downloads under an earlier file's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from fastapi import Query, Request
from fastapi.responses import Response, StreamingResponse

from scheduler.api.dashboard.pages import error, render, router, session, to_login
from scheduler.api.schemas import JobOut
from scheduler.services.errors import NotFoundError, ServiceError

PER_TASK_BYTES = 128 * 1024  # the most of one task's log a page shows (its end)
PAGE_BYTES = 2 * 1024 * 1024  # the most of all tasks' logs one page shows
MAX_LINE_BYTES = 1 << 20  # a download cuts a line without a newline at 1 MiB
SCAN_BYTES = 64 << 20  # the most of a log before the shown part scanned for line numbers
ATTEMPT_HEADER = re.compile(r"^=== attempt (\d+) on .* ===$")
_HEADER_BYTES = re.compile(rb"(?:^|\n)=== attempt (\d+) on [^\n]* ===(?=\n|$)")


def highlight(line: str, q: str) -> list[tuple[str, bool]]:
    """``line`` cut into ``(text, is_match)`` pieces around each case-insensitive
    occurrence of ``q`` (``[(line, False)]`` when ``q`` is empty)."""
    if not q:
        return [(line, False)]
    low, ql = line.lower(), q.lower()
    out: list[tuple[str, bool]] = []
    at = 0
    while (hit := low.find(ql, at)) >= 0:
        if hit > at:
            out.append((line[at:hit], False))
        out.append((line[hit : hit + len(q)], True))
        at = hit + len(q)
    if at < len(line):
        out.append((line[at:], False))
    return out


def task_view(
    text: str, q: str, cut: bool, first_line: int | None = 1, attempt: int | None = None
) -> dict[str, Any]:
    """One task's shown lines: ``{lines: [{number, attempt, pieces: [(text, is_match)
    ...]}...], matches, cut}``; with ``q`` only the lines holding it. ``cut``: the log
    starts before what is shown (its first, partial line is dropped). ``first_line``: the
    1-based number in the log of the first line of ``text`` (None: unknown, numbers left
    out); ``attempt``: the attempt ``text`` starts in (None: before any header)."""
    lines = text.splitlines()
    number = first_line
    if cut and lines:
        lines = lines[1:]
        number = None if number is None else number + 1
    shown = []
    for line in lines:
        m = ATTEMPT_HEADER.match(line)
        if m:
            attempt = int(m.group(1))
        if not q or q.lower() in line.lower():
            shown.append({"number": number, "attempt": attempt, "pieces": highlight(line, q)})
        number = None if number is None else number + 1
    return {"lines": shown, "matches": len(shown) if q else None, "cut": cut}


def scan_before(chunks: Iterator[bytes]) -> tuple[int, int | None]:
    """``(newlines, last attempt)`` of the bytes before the shown part of a log: how many
    lines end there and the number of the last ``=== attempt N on NODE ===`` header (None
    when none), one chunk in memory at a time (a header split across two chunks is found
    in the joined tail of the first and the second)."""
    newlines = 0
    attempt: int | None = None
    tail = b""
    for chunk in chunks:
        newlines += chunk.count(b"\n")
        window = tail + chunk
        for m in _HEADER_BYTES.finditer(window):
            attempt = int(m.group(1))
        cut = window.rfind(b"\n")
        tail = window[cut:] if cut >= 0 else window[-4096:]
        tail = tail[-4096:]
    return newlines, attempt


@router.get("/jobs/{name}/logs")
def all_logs(
    name: str,
    request: Request,
    q: str = Query("", max_length=200, description="only lines holding this text"),
) -> Response:
    """The all-logs page (see the module docstring)."""
    s = session(request)
    if s is None:
        return to_login(request)
    services = request.app.state
    try:
        name = services.jobs.resolve(s.who, name)  # the job's key (scheduler/jobref.py)
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    try:
        job = JobOut.model_validate(services.jobs.get(s.who, name))
        files = services.logs.files(name, job.uid)  # this submission's logs only
    except NotFoundError as exc:
        return error(request, s, 404, exc.message)
    q = q.strip()
    per_task = min(PER_TASK_BYTES, PAGE_BYTES // max(len(files), 1))
    tasks = []
    for f in files:
        size = int(f["size"])
        start = max(0, size - per_task)
        first_line: int | None = 1
        attempt: int | None = None
        try:
            data = services.logs.read(name, f["role"], f["index"], start, per_task, job.uid)
            if 0 < start <= SCAN_BYTES:
                path = services.logs.path(name, f["role"], f["index"], job.uid)
                newlines, attempt = scan_before(services.logs.stream(path, 0, start))
                first_line = newlines + 1
            elif start > SCAN_BYTES:
                first_line = None
        except (ServiceError, FileNotFoundError):  # gone, or swapped for a link meanwhile
            data = b""
        text = data.decode("utf-8", errors="replace")
        view = task_view(text, q, cut=start > 0, first_line=first_line, attempt=attempt)
        tasks.append({"role": f["role"], "index": f["index"], "size": size, **view})
    return render(
        request,
        "logs.html",
        s,
        job=job,
        tasks=tasks,
        q=q,
        per_task=per_task,
        matches=sum(t["matches"] or 0 for t in tasks),
    )


def _prefixed(
    services: Any, name: str, files: list[dict[str, Any]], uid: str = ""
) -> Iterator[bytes]:
    """Every file's lines prefixed ``role-index | `` (bounded memory: one chunk and one
    line of at most :data:`MAX_LINE_BYTES` at a time)."""
    for f in files:
        prefix = f"{f['role']}-{f['index']} | ".encode()
        # the task may swap its log between file and link (or remove it) after the
        # listing: the response has started, so the file is skipped with one line that
        # says why, never an exception (issue 32 item 7)
        try:
            path = services.logs.path(name, f["role"], f["index"], uid)
            chunks = services.logs.stream(path)
        except ServiceError as exc:
            yield prefix + f"(log not read: {exc.message})".encode() + b"\n"
            continue
        partial = b""
        for chunk in chunks:
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            if lines:
                yield b"".join(prefix + line + b"\n" for line in lines)
            if len(partial) > MAX_LINE_BYTES:
                yield prefix + partial + b"\n"
                partial = b""
        if partial:
            yield prefix + partial + b"\n"


@router.get("/jobs/{name}/logs/download")
def download_logs(
    name: str,
    request: Request,
    role: str | None = Query(None, max_length=64),
    index: int | None = Query(None, ge=0),
) -> Response:
    """One task's whole log (``role`` and ``index``), or every task's log prefixed, as a
    ``text/plain`` attachment named ``<job>-<uid>-<attempt>[-<role>-<index>].log`` (see
    the module docstring)."""
    s = session(request)
    if s is None:
        return to_login(request)
    services = request.app.state
    try:
        name = services.jobs.resolve(s.who, name)  # the job's key (scheduler/jobref.py)
    except ServiceError as exc:
        return error(request, s, exc.status, exc.message)
    try:
        job = services.jobs.get(s.who, name)
        uid = job.get("uid", "")
        stem = f"{name}-{uid[:8] or 'nouid'}-{job.get('attempt') or 0}"
        if role is not None and index is not None:
            path = services.logs.path(name, role, index, uid)
            body: Iterator[bytes] = services.logs.stream(path)
            filename = f"{stem}-{role}-{index}.log"
        elif role is None and index is None:
            body = _prefixed(services, name, services.logs.files(name, uid), uid)
            filename = f"{stem}.log"
        else:
            return error(request, s, 400, "role and index: give both (one task) or neither")
    except NotFoundError as exc:
        return error(request, s, 404, exc.message)
    return StreamingResponse(
        body,
        media_type="text/plain; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
        },
    )
