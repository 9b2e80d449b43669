"""Errors the application services raise; the API maps each to one HTTP status.

Services never raise HTTP exceptions themselves, so they stay usable from the CLI's
server-side commands and from tests without a web server.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base class: a client error with a message a person can act on.

    Attributes:
        status: the HTTP status the API answers with.
        message: one sentence naming what was wrong.
    """

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(ServiceError):
    """The request body could not be parsed at all (malformed YAML/JSON)."""

    status = 400


class NotFoundError(ServiceError):
    """Unknown job, node, task or log, or one the caller may not see."""

    status = 404


class ForbiddenError(ServiceError):
    """The token is valid but its role or VCs do not allow this."""

    status = 403


class ConflictError(ServiceError):
    """The request clashes with stored state (a job of that name exists...)."""

    status = 409


class InvalidError(ServiceError):
    """A parameter parsed but its value cannot be right (a time range that runs backwards
    or lies in the future): 422, the message naming the field, what was expected and what
    was given."""

    status = 422


class InvalidSpecError(ServiceError):
    """A job spec failed validation.

    Attributes:
        errors: one dict per problem: ``{"loc": ["roles", "worker", "resources", "cpu"],
            "msg": "...", "type": "..."}`` (the shape of FastAPI's own 422 answers).
    """

    status = 422

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []
