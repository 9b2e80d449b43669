"""The error responses each route documents in the OpenAPI document.

Every route lists every status it can answer with: the authentication ones (401 no /
unknown / expired token, 429 too many failed authentications, 503 store unavailable),
plus its own (403 role or VC, 404 unknown or hidden, 409 conflict, 413 body too large,
422 invalid input). Bodies are ``{"detail": ...}`` (see docs/api.md, "Errors").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorOut(BaseModel):
    """An error: ``detail`` is a sentence, or a list of field problems for 422."""

    model_config = ConfigDict(extra="allow")
    detail: str | list[dict[str, Any]] = Field(description="what was wrong")
    message: str | None = Field(None, description="one-line summary (422 only)")


_ERROR_SCHEMA = ErrorOut.model_json_schema()


Responses = dict[int | str, dict[str, Any]]
"""FastAPI's ``responses=``: {status code: OpenAPI response object}."""


def _r(description: str) -> dict[str, Any]:
    # The content type is given, not left to FastAPI: it would document a text/plain route's
    # errors (logs, metrics) as text/plain, and they are JSON like every other error.
    return {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMA}}}


_RETRY = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
_AUTH = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}

UNAUTHORIZED: Responses = {
    401: {**_r("no bearer token, or an unknown, revoked or expired one"), "headers": _AUTH}
}
TOO_MANY: Responses = {
    429: {
        **_r(
            "over a rate limit: this token failed too often from this address, or the "
            "token is over api.request_limit (api.submit_limit for submits)"
        ),
        "headers": _RETRY,
    }
}
UNAVAILABLE: Responses = {
    503: {**_r("the cluster store (Redis) does not answer"), "headers": _RETRY}
}
FORBIDDEN: Responses = {403: _r("the token's role or VCs do not allow this")}
NOT_FOUND: Responses = {404: _r("unknown, or not visible to this token")}
CONFLICT: Responses = {409: _r("clashes with stored state (the name is taken)")}
TOO_LARGE: Responses = {413: _r("request body larger than api.max_body_bytes")}
INVALID: Responses = {
    422: _r("invalid input; detail lists each problem with its field path in loc")
}
BAD_BODY: Responses = {400: _r("the body is not UTF-8 text, empty, or malformed YAML/JSON")}
BAD_JSON: Responses = {400: _r("the body is not valid JSON")}

# Every authenticated route answers these (422: an unknown query parameter, see strict.py).
COMMON: Responses = {**UNAUTHORIZED, **TOO_MANY, **UNAVAILABLE, **INVALID}


def errors(*groups: Responses) -> Responses:
    """The ``responses=`` of a route: :data:`COMMON` plus ``groups`` (e.g. NOT_FOUND)."""
    out: Responses = dict(COMMON)
    for g in groups:
        out.update(g)
    return out
