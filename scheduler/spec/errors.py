"""The one error type of job-spec parsing, validation and translation.

:class:`SpecError` carries ``errors``: a list of ``{"loc": "roles.worker.resources.memory",
"msg": ..., "input": ...}`` dicts (``loc`` is a dotted path, '' for the document itself).
The API answers 422 with them; :class:`DocumentError` (a SpecError raised before any field
is looked at: malformed, too large, too deep, too many aliases) answers 400.
"""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """A job spec is invalid. ``errors`` lists ``{"loc", "msg", "input"}`` dicts; ``loc`` is a
    dotted field path ('' for the document itself)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        lines = [f"{e['loc'] or '(document)'}: {e['msg']}" for e in errors]
        super().__init__("invalid job spec: " + "; ".join(lines))

    @classmethod
    def one(cls, loc: str, msg: str, given: object = None) -> SpecError:
        """A SpecError with one entry (``given`` is shortened for the answer)."""
        return cls([{"loc": loc, "msg": msg, "input": safe_input(given)}])


class DocumentError(SpecError):
    """The text is not a usable YAML/JSON document (malformed, over a size, depth or alias
    limit, not UTF-8). Raised before any field is read."""


def safe_input(value: object) -> object:
    """A JSON-friendly, short rendering of an offending input (at most 200 characters)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    try:
        text = value if isinstance(value, str) else repr(value)
    except RecursionError:  # pragma: no cover - inputs are depth-bounded before this
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."
