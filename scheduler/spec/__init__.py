"""Job specs: the pasture format, OpenPAI v2 and MARO translation, quantities, template.

Entry points:
    load_job_spec(text) -> JobSpec      parse YAML/JSON text of any supported format
    parse_job_spec(doc) -> JobSpec      the same from an already parsed mapping
    unfittable_reason(spec, nodes)      why no node of the cluster could ever hold the gang
    JOB_TEMPLATE                        commented example for ``pasture template job``

Errors: :class:`SpecError` carries ``errors``: a list of ``{"loc": "roles.worker.resources
.memory", "msg": ..., "input": ...}`` dicts (the API answers 422 with them).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from scheduler.spec.fit import unfittable_reason
from scheduler.spec.model import (
    CompletionSpec,
    JobSpec,
    MountSpec,
    PoliciesSpec,
    ResourceSpec,
    RetrySpec,
    RoleSpec,
)
from scheduler.spec.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)
from scheduler.spec.template import JOB_TEMPLATE
from scheduler.spec.translate import TranslateError, from_maro, from_openpai, is_maro, is_openpai

MAX_SPEC_BYTES = 1024 * 1024

__all__ = [
    "JOB_TEMPLATE",
    "CompletionSpec",
    "JobSpec",
    "MountSpec",
    "PoliciesSpec",
    "QuantityError",
    "ResourceSpec",
    "RetrySpec",
    "RoleSpec",
    "SpecError",
    "format_cpu",
    "format_memory",
    "load_job_spec",
    "parse_cpu",
    "parse_job_spec",
    "parse_memory",
    "unfittable_reason",
]


class SpecError(ValueError):
    """A job spec is invalid. ``errors`` lists ``{"loc", "msg", "input"}`` dicts; ``loc`` is a
    dotted field path ('' for the document itself)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        lines = [f"{e['loc'] or '(document)'}: {e['msg']}" for e in errors]
        super().__init__("invalid job spec: " + "; ".join(lines))


def _loc(parts: tuple) -> str:
    return ".".join(str(p) for p in parts)


def parse_job_spec(doc: object, *, fmt: str | None = None) -> JobSpec:
    """Validate a parsed document (pasture, OpenPAI v2 or MARO; auto-detected unless ``fmt``
    is 'pasture' | 'openpai' | 'maro'). Raises SpecError."""
    if not isinstance(doc, dict):
        raise SpecError(
            [{"loc": "", "msg": f"expected a mapping, got {type(doc).__name__}", "input": None}]
        )
    if fmt is None:
        fmt = "openpai" if is_openpai(doc) else "maro" if is_maro(doc) else "pasture"
    try:
        if fmt == "openpai":
            doc = from_openpai(doc)
        elif fmt == "maro":
            doc = from_maro(doc)
        elif fmt != "pasture":
            raise SpecError([{"loc": "", "msg": f"unknown format {fmt!r}", "input": fmt}])
    except TranslateError as exc:
        raise SpecError([{"loc": exc.loc, "msg": exc.message, "input": _safe(exc.given)}]) from exc
    try:
        return JobSpec.model_validate(doc)
    except ValidationError as exc:
        errors = []
        for e in exc.errors():
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = "unknown field"
            msg = msg.removeprefix("Value error, ")
            errors.append({"loc": _loc(e["loc"]), "msg": msg, "input": _safe(e.get("input"))})
        raise SpecError(errors) from exc


def _safe(value: object) -> object:
    """A JSON-friendly, short rendering of an offending input."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def load_job_spec(text: str | bytes, *, fmt: str | None = None) -> JobSpec:
    """Parse YAML (JSON is YAML) job text of at most 1 MiB. Raises SpecError (malformed
    YAML, too large, or invalid fields)."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(
            [
                {
                    "loc": "",
                    "msg": f"spec is {len(text)} bytes; at most {MAX_SPEC_BYTES} allowed",
                    "input": None,
                }
            ]
        )
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            [{"loc": "", "msg": f"malformed YAML{where}: {problem}", "input": None}]
        ) from exc
    return parse_job_spec(doc, fmt=fmt)
