"""``POST /api/v1/jobs:batch``: many jobs in one request (sweeps from scripts).

The body is one JSON or YAML mapping ``{"jobs": [<job document>, ...]}``: each document is
what ``POST /api/v1/jobs`` takes (pasture, OpenPAI, MARO, Volcano). It is parsed once
(the same bounded parse as a single submit: :mod:`scheduler.spec.bounded`, within
``api.max_body_bytes``), each document is validated on its own, and every valid job is
stored in one store round trip. The answer is 200 with one result per document, in order
(201 / 403 / 409 / 422 as a single submit would have answered), so one bad document never
refuses the others.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request

from scheduler.api.auth import submitter
from scheduler.api.responses import BAD_BODY, FORBIDDEN, INVALID, TOO_LARGE, errors
from scheduler.api.routers.jobs import _spec_limiter, on_spec_body
from scheduler.api.schemas import BatchOut
from scheduler.services.errors import InvalidSpecError
from scheduler.services.jobs import JobService
from scheduler.store.tokens import TokenInfo

router = APIRouter(tags=["jobs"])

MAX_BATCH_JOBS = 500  # documents per request


_BODY = {
    "requestBody": {
        "required": True,
        "description": f'{{"jobs": [job spec, ...]}} (at most {MAX_BATCH_JOBS}) as JSON or YAML',
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["jobs"],
                    "additionalProperties": False,
                    "properties": {
                        "jobs": {
                            "type": "array",
                            "items": {"type": "object"},
                            "minItems": 1,
                            "maxItems": MAX_BATCH_JOBS,
                        }
                    },
                }
            },
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


def parse_and_submit_many(
    jobs: JobService, who: TokenInfo, body: bytes, content_type: str | None
) -> dict[str, Any]:
    """Parse a batch body and submit its documents (:func:`on_spec_body`; runs in a
    worker thread).

    Raises BadRequestError (400: malformed), InvalidSpecError (422: not ``{"jobs": [...]}``,
    more than MAX_BATCH_JOBS documents, over the parse bounds)."""
    return on_spec_body(
        body, content_type, lambda document: _submit_batch(jobs, who, document), "batch"
    )


def _submit_batch(jobs: JobService, who: TokenInfo, document: dict[str, Any]) -> dict[str, Any]:
    """Check the batch's shape (``{"jobs": [1..MAX_BATCH_JOBS mappings]}``), then submit."""
    docs = document.get("jobs")
    if not isinstance(docs, list) or not docs or len(docs) > MAX_BATCH_JOBS:
        got = f"{len(docs)} documents" if isinstance(docs, list) else type(docs).__name__
        msg = f"expected a list of 1 to {MAX_BATCH_JOBS} job documents, got {got}"
        raise InvalidSpecError(
            f"batch: jobs: {msg}", [{"loc": ["jobs"], "msg": msg, "type": "batch"}]
        )
    bad = [i for i, d in enumerate(docs) if not isinstance(d, dict)]
    if bad:
        msg = f"expected a mapping (a job document), got {type(docs[bad[0]]).__name__}"
        raise InvalidSpecError(
            f"batch: jobs[{bad[0]}]: {msg}",
            [{"loc": ["jobs", str(i)], "msg": msg, "type": "batch"} for i in bad[:20]],
        )
    extra = sorted(set(document) - {"jobs"})
    if extra:
        msg = f"unknown field(s) {extra}; expected only 'jobs'"
        raise InvalidSpecError(f"batch: {msg}", [{"loc": [], "msg": msg, "type": "batch"}])
    return jobs.submit_many(who, docs)


@router.post(
    "/api/v1/jobs:batch",
    openapi_extra=_BODY,
    response_model=BatchOut,
    responses=errors(BAD_BODY, FORBIDDEN, TOO_LARGE, INVALID),
)
async def submit_batch(request: Request, who: TokenInfo = Depends(submitter)) -> dict[str, Any]:
    """Submit up to 500 jobs at once: 200 with one result per document (``items``:
    201 stored, or 403 / 409 / 422 with ``detail``); 400 malformed YAML/JSON; 422 not
    ``{"jobs": [...]}`` or too many documents; 413 body over ``api.max_body_bytes``."""
    body = await request.body()
    return await anyio.to_thread.run_sync(
        parse_and_submit_many,
        request.app.state.jobs,
        who,
        body,
        request.headers.get("content-type"),
        limiter=_spec_limiter(request),
    )
