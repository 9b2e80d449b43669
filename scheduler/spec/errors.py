"""The one error type of job-spec parsing, validation and translation.

:class:`SpecError` carries ``errors``: a list of ``{"loc": "roles.worker.resources.memory",
"msg": ..., "input": ...}`` dicts (``loc`` is a dotted path, '' for the document itself).
The API answers 422 with them; :class:`DocumentError` (a SpecError raised before any field
is looked at: malformed, too large, too deep, too many aliases) answers 400.
"""

from __future__ import annotations

from typing import Any

_LOWER_DNS = "lowercase letters a-z, digits and '-', starting and ending with a letter or digit"
PATTERN_RULES: dict[str, str] = {
    # job names (model.NAME_RE) and volume names (policies.VolumeSpec)
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$": f"1 to 63 characters: {_LOWER_DNS}",
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$": f"1 to 63 characters: {_LOWER_DNS}",
    # schedule names (schedule.ScheduleSpec; their length is checked apart)
    r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$": _LOWER_DNS,
    # model.ROLE_RE
    r"^[A-Za-z][A-Za-z0-9_-]{0,62}$": (
        "1 to 63 characters: letters, digits, '_' and '-', starting with a letter"
    ),
    # retry.retry_on reasons
    r"^[a-z][a-z0-9_]{0,63}$": (
        "1 to 64 characters: lowercase letters a-z, digits and '_', starting with a letter"
    ),
}
"""The spec's name patterns in words (a user reads "String should match pattern '^[a-z0-9]
([-a-z0-9]{0,61}[a-z0-9])?$'" as noise): keyed by the exact pattern string."""


def pattern_rule(pattern: str) -> str:
    """``pattern`` (a regex of the spec) in words; the pattern itself when it has none."""
    return PATTERN_RULES.get(pattern, f"the pattern {pattern}")


def worded(error: dict[str, Any]) -> str:
    """The message of one pydantic error (``{"type", "msg", "ctx"}``), with a pattern
    mismatch said in words: ``expected 1 to 63 characters: lowercase letters ...``."""
    ctx = error.get("ctx") or {}
    if error.get("type") == "string_pattern_mismatch" and "pattern" in ctx:
        return f"expected {pattern_rule(str(ctx['pattern']))}"
    return str(error.get("msg", ""))


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
