"""Job specs: the pasture format, the formats of other systems, quantities, template.

Entry points (each request parses and validates once):
    load_job(text, as_json=False) -> ParsedJob   bounded YAML/JSON parse + parse_job
    parse_job(doc, fmt=None) -> ParsedJob         detect format, translate, validate
    load_job_spec(text) / parse_job_spec(doc)     the same, one JobSpec (no warnings)
    load_document(text, as_json=False)            the bounded parse alone
    unfittable_reason(spec, nodes)                why no node of the cluster could ever hold it
    JOB_TEMPLATE                                  commented example for ``pasture template job``

Formats: pasture, OpenPAI protocol v1 and v2, MARO job/schedule, Volcano Job (see
:mod:`scheduler.spec.formats` and docs/compat.md).

Errors: :class:`SpecError` carries ``errors``: a list of ``{"loc": "roles.worker.resources
.memory", "msg": ..., "input": ...}`` dicts (the API answers 422 with them);
:class:`DocumentError` (malformed or over a limit) answers 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from scheduler.spec.bounded import MAX_SPEC_BYTES, load_document
from scheduler.spec.errors import DocumentError, SpecError, safe_input, worded
from scheduler.spec.fit import unfittable_reason
from scheduler.spec.formats import FORMATS, TranslateError, Translation, source_loc, translate
from scheduler.spec.model import JobSpec, ResourceSpec, RoleSpec
from scheduler.spec.policies import (
    CompletionSpec,
    EventRule,
    MountSpec,
    PoliciesSpec,
    RetrySpec,
    RoleCompletionSpec,
)
from scheduler.spec.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)
from scheduler.spec.secrets import refuse_pasture_refs, split_secrets
from scheduler.spec.template import JOB_TEMPLATE

__all__ = [
    "JOB_TEMPLATE",
    "MAX_SPEC_BYTES",
    "CompletionSpec",
    "DocumentError",
    "EventRule",
    "JobSpec",
    "MountSpec",
    "ParsedJob",
    "PoliciesSpec",
    "QuantityError",
    "ResourceSpec",
    "RetrySpec",
    "RoleCompletionSpec",
    "RoleSpec",
    "SpecError",
    "format_cpu",
    "format_memory",
    "load_document",
    "load_job",
    "load_job_spec",
    "parse_cpu",
    "parse_job",
    "parse_job_spec",
    "parse_memory",
    "unfittable_reason",
]


@dataclass
class ParsedJob:
    """A validated submission: ``specs`` (one JobSpec; several for a MARO schedule), the
    source ``format`` key ('pasture', 'openpai-v1', 'openpai-v2', 'maro', 'volcano') and
    ``warnings`` (fields accepted without effect, one sentence each); ``secrets`` the
    values of the job's secrets by name (split off the spec, which keeps only the names;
    never printed: ``repr=False``)."""

    format: str
    specs: list[JobSpec]
    warnings: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    origins: list[dict[str, str]] = field(default_factory=list)
    """per spec, translated pasture path -> the source field (empty for a pasture spec)."""

    @property
    def spec(self) -> JobSpec:
        """The first (usually only) job."""
        return self.specs[0]

    def source_error(self, index: int, loc: str, msg: str) -> tuple[str, str]:
        """A check made after translation (the submit's VC and fit checks) as the
        ``(loc, msg)`` of the field the user wrote: for a translated file the source
        field of pasture path ``loc`` of spec ``index`` (``spec.queue`` for ``vc``,
        ``taskRoles.worker.resourcePerInstance`` for ``roles.worker.resources``) and
        ``"<format> field <source>: <msg> (checked as pasture's <loc>)"``; a pasture spec,
        or a path with no recorded source, keeps ``(loc, msg)``."""
        origins = self.origins[index] if index < len(self.origins) else {}
        source = source_loc(loc, origins) if origins else None
        if source is None:
            return loc, msg
        fmt = FORMATS.get(self.format, self.format)
        return source.split(" (")[0], f"{fmt} field {source}: {msg} (checked as pasture's {loc})"


def _loc(parts: tuple[object, ...]) -> str:
    return ".".join(str(p) for p in parts)


_PATH_MSG = re.compile(r"^([a-z_]+(?:\.[A-Za-z0-9_-]+|\[[0-9]+\])*): (.*)$", re.DOTALL)


def _validate(doc: dict[str, Any], translation: tuple[Translation, int] | None) -> JobSpec:
    """Validate one spec dict. For a translated document each error names the SOURCE
    field the user wrote (``taskRoles.worker``, ``spec.tasks[1].replicas``): the longest
    recorded origin of the pasture path (:meth:`Context.origin`), the pasture path kept in
    the message; a path with no recorded origin keeps ``(translated) <pasture path>``."""
    try:
        return JobSpec.model_validate(doc)
    except ValidationError as exc:
        errors = []
        for e in exc.errors():
            msg = worded(dict(e))
            if e["type"] == "extra_forbidden":
                msg = "unknown field"
            msg = msg.removeprefix("Value error, ")
            loc = _loc(e["loc"])
            m = _PATH_MSG.match(msg) if not loc else None
            if m:  # a model-level check names its field first: "roles.w.depends_on: ..."
                loc, msg = m.group(1), m.group(2)
            if translation is not None:
                source = source_loc(loc, translation[0].origins_of(translation[1]))
                fmt = FORMATS[translation[0].fmt]
                if source is not None:
                    msg = f"{fmt} field {source}: {msg} (checked as pasture's {loc or 'job'})"
                    loc = source
                else:
                    msg = f"{msg} (the translated pasture field; see docs/compat.md)"
                    loc = f"(translated) {loc}"
            errors.append({"loc": loc, "msg": msg, "input": safe_input(e.get("input"))})
        raise SpecError(errors) from exc


def parse_job(
    doc: object, *, fmt: str | None = None, require_secret_values: bool = True
) -> ParsedJob:
    """Detect the format of a parsed document, translate it and validate the result.

    Args:
        doc: the parsed document (a mapping).
        fmt: force a format key ('pasture', 'openpai-v1', 'openpai-v2', 'maro', 'volcano').
        require_secret_values: refuse a secret declared without a value (False: the CLI
            reading a file whose values come with ``--secret``; see spec/secrets.py).

    Raises:
        SpecError: not a mapping, none of the formats, a field refused by name (``loc`` is
            the source format's path), or an invalid pasture field.
    """
    if not isinstance(doc, dict):
        raise SpecError.one("", f"expected a mapping, got {type(doc).__name__}")
    try:
        result = translate(doc, fmt)
    except TranslateError as exc:
        raise SpecError(
            [{"loc": exc.loc, "msg": exc.message, "input": safe_input(exc.given)}]
        ) from exc
    prefix = "" if result.fmt == "pasture" else "(translated) "
    specs, secrets = [], {}
    for i, d in enumerate(result.documents):
        if result.fmt == "pasture":
            refuse_pasture_refs(d)
        d, values = split_secrets(d, prefix, require_values=require_secret_values)
        secrets.update(values)
        specs.append(_validate(d, None if result.fmt == "pasture" else (result, i)))
    origins = [] if result.fmt == "pasture" else [result.origins_of(i) for i in range(len(specs))]
    return ParsedJob(result.fmt, specs, result.warnings, secrets, origins)


def load_job(
    text: str | bytes,
    *,
    as_json: bool = False,
    fmt: str | None = None,
    require_secret_values: bool = True,
) -> ParsedJob:
    """Parse job text within the limits of :mod:`scheduler.spec.bounded`, then
    :func:`parse_job`. Raises DocumentError / SpecError."""
    return parse_job(
        load_document(text, as_json=as_json),
        fmt=fmt,
        require_secret_values=require_secret_values,
    )


def parse_job_spec(doc: object, *, fmt: str | None = None) -> JobSpec:
    """:func:`parse_job` for callers that want the one JobSpec (a MARO schedule of several
    jobs is refused here). Raises SpecError."""
    parsed = parse_job(doc, fmt=fmt)
    if len(parsed.specs) != 1:
        raise SpecError.one(
            "job_names", f"a MARO schedule of {len(parsed.specs)} jobs; submit it through the API"
        )
    return parsed.spec


def load_job_spec(text: str | bytes, *, fmt: str | None = None) -> JobSpec:
    """Parse YAML (JSON is YAML) job text of at most 1 MiB into one JobSpec. Raises
    SpecError (malformed YAML, too large, or invalid fields)."""
    return parse_job_spec(load_document(text), fmt=fmt)
