"""Job files from elsewhere, detected and translated into the pasture spec's dict shape.

    detect(doc) -> "pasture" | "openpai-v1" | "openpai-v2" | "maro" | "volcano"
    translate(doc) -> Translation(fmt, documents=[spec dict, ...], warnings=[...])

One module per format (openpai_v1, openpai_v2, maro, volcano); each documents its field
map and refuses, by name, what it cannot honour (:class:`TranslateError`: "OpenPAI v1 field
codeDir: ..."). A MARO schedule gives several documents (one job per name); every other
format gives one. A document that is none of the formats is refused with "not a pasture,
OpenPAI v1/v2, MARO or Volcano job: ...".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.spec.bounded import OPENPAI_JOBS
from scheduler.spec.formats import maro, openpai_v1, openpai_v2, volcano, volcano_cronjob
from scheduler.spec.formats.common import Context, TranslateError, source_loc

__all__ = ["FORMATS", "TranslateError", "Translation", "detect", "source_loc", "translate"]

FORMATS = {
    "pasture": "pasture",
    "openpai-v1": openpai_v1.FORMAT,
    "openpai-v2": openpai_v2.FORMAT,
    "maro": maro.FORMAT,
    "volcano": volcano.FORMAT,
}
NOT_A_JOB = "not a pasture, OpenPAI v1/v2, MARO or Volcano job"


@dataclass
class Translation:
    """What a document became: its format key, the pasture spec dicts (one per job) and
    the warnings for fields accepted without effect."""

    fmt: str
    documents: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)
    """translated pasture path -> the source field it came from (Context.origin)."""
    doc_origins: list[dict[str, str]] | None = None
    """per document, when the documents came from different source objects (a List)."""

    def origins_of(self, index: int) -> dict[str, str]:
        """The origins of document ``index``."""
        return self.doc_origins[index] if self.doc_origins is not None else self.origins


def detect(doc: dict[str, Any]) -> str:
    """The format key of a parsed document. Raises TranslateError (loc '') when it is none
    of them, saying what was looked for."""
    if "roles" in doc and "taskRoles" not in doc:
        return "pasture"
    if list(doc) == [OPENPAI_JOBS] and isinstance(doc[OPENPAI_JOBS], list):
        return "openpai-v2-list"
    if "apiVersion" in doc or "kind" in doc:
        if volcano.is_volcano(doc):
            return "volcano"
        if doc.get("kind") == "CronJob" and str(doc.get("apiVersion", "")).startswith(
            "batch.volcano.sh/"
        ):
            _refuse_cronjob(doc)
        if volcano.is_list(doc):
            return "volcano-list"
        kind = doc.get("kind")
        what = (
            "a Volcano Queue is a virtual cluster here, which the cluster's admin configures "
            "(docs/operations.md); submit only the Jobs"
            if kind == "Queue"
            else f"a Volcano job is apiVersion {volcano.API_VERSION}, kind Job"
        )
        raise TranslateError(
            "kind",
            f"{NOT_A_JOB}: apiVersion {doc.get('apiVersion')!r} kind {kind!r} ({what})",
            f"{doc.get('apiVersion')}/{kind}",
        )
    if "protocol_version" in doc and "tasks" in doc:
        raise TranslateError(
            "protocol_version",
            f"{NOT_A_JOB}: this is the OpenPAI marketplace draft format (protocol_version, "
            "tasks list, $$name$$ references), not OpenPAI job protocol v2 (protocolVersion: "
            "2, taskRoles mapping); convert it with OpenPAI's marketplace or write it as v2",
            doc.get("protocol_version"),
        )
    if openpai_v1.is_openpai_v1(doc):
        return "openpai-v1"
    if openpai_v2.is_openpai_v2(doc):
        return "openpai-v2"
    if maro.is_maro(doc):
        return "maro"
    if "mode" in doc and any(k in doc for k in ("cloud", "master", "user", "cluster")):
        raise TranslateError(
            "mode",
            f"{NOT_A_JOB}: this is a MARO cluster deployment (`maro grass|k8s create` or "
            "`node join`), not a job; pasture's clusters are made with `pasture dev up`, the "
            "Ansible roles or the aks stack (docs/platforms.md); submit the start-job or "
            "start-schedule deployment",
            doc.get("mode"),
        )
    keys = sorted(str(k) for k in doc)[:8]
    raise TranslateError(
        "",
        f"{NOT_A_JOB}: found top-level fields {keys}; expected 'roles' (pasture), "
        "'jobName' + 'taskRoles' list (OpenPAI v1), 'protocolVersion: 2' + 'taskRoles' "
        "(OpenPAI v2), 'components' (MARO) or 'apiVersion: batch.volcano.sh/v1alpha1' "
        "(Volcano)",
        keys,
    )


def translate(doc: dict[str, Any], fmt: str | None = None) -> Translation:
    """Translate a parsed document (format auto-detected unless ``fmt`` is one of
    :data:`FORMATS`' keys). A pasture document passes through unchanged.

    Raises:
        TranslateError: not a known format, or a field that cannot be honoured.
    """
    fmt = fmt or detect(doc)
    if fmt == "volcano-list":
        docs, warnings, origins = volcano.translate_list(doc)
        return Translation("volcano", docs, warnings, doc_origins=origins)
    if fmt == "openpai-v2-list":
        return _openpai_v2_list(doc[OPENPAI_JOBS])
    if fmt not in FORMATS:
        raise TranslateError("", f"unknown format {fmt!r}; expected one of {list(FORMATS)}", fmt)
    ctx = Context(FORMATS[fmt])
    if fmt == "pasture":
        return Translation(fmt, [doc])
    if fmt == "openpai-v1":
        docs = [openpai_v1.translate(doc, ctx)]
    elif fmt == "openpai-v2":
        docs = [openpai_v2.translate(doc, ctx)]
    elif fmt == "maro":
        docs = maro.translate(doc, ctx)
    else:
        docs = [volcano.translate(doc, ctx)]
    return Translation(fmt, docs, ctx.warnings, ctx.origins)


def _openpai_v2_list(items: list[Any]) -> Translation:
    """Several ``---``-separated OpenPAI v2 jobs of one file: one pasture job each, stored
    together (as a MARO schedule's); fields are named ``items[i].<path>`` (document i + 1).
    Raises TranslateError for a refused field or two jobs of the same name."""
    fmt = FORMATS["openpai-v2"]
    docs: list[dict[str, Any]] = []
    warnings: list[str] = []
    origins: list[dict[str, str]] = []
    for i, item in enumerate(items):
        where = f"items[{i}]"
        ctx = Context(fmt)
        try:
            docs.append(openpai_v2.translate(item, ctx))
        except TranslateError as exc:
            loc = f"{where}.{exc.loc}" if exc.loc else where
            message = exc.message.replace(f"{fmt} field {exc.loc}", f"{fmt} field {loc}", 1)
            raise TranslateError(loc, message, exc.given) from None
        warnings += [w.replace(f"{fmt} field ", f"{fmt} field {where}.", 1) for w in ctx.warnings]
        origins.append({k: f"{where}.{v}" for k, v in ctx.origins.items()})
    names = [d["name"] for d in docs]
    if len(set(names)) != len(names):
        raise TranslateError("items", f"{fmt} field items: two jobs named alike: {names}", names)
    return Translation("openpai-v2", docs, warnings, doc_origins=origins)


def _refuse_cronjob(doc: dict[str, Any]) -> None:
    """A Volcano CronJob is translated and checked (:mod:`scheduler.spec.schedule`), then
    refused naming ``kind``: a scheduled job goes to ``/api/v1/schedules``. Raises
    TranslateError (the CronJob's own refused field, or ``kind`` with the how-to)."""
    from pydantic import ValidationError

    try:
        schedule, _ = volcano_cronjob.parse_volcano_cronjob(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        where = {"schedule": "spec.schedule", "name": "metadata.name"}.get(loc, loc)
        raise TranslateError(
            where, f"Volcano field {where}: {first['msg'].removeprefix('Value error, ')}"
        ) from None
    raise TranslateError(
        "kind",
        f"Volcano field kind: CronJob {schedule.name} ({schedule.schedule!r}, "
        f"{schedule.concurrency_policy}) is a scheduled job, not a job: submit it with "
        "`pasture schedule submit FILE` (POST /api/v1/schedules)",
        "CronJob",
    )
