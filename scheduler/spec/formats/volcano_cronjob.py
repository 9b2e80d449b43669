"""Volcano ``CronJob`` (batch.volcano.sh/v1alpha1, volcano-sh/volcano example/cronjob/
cronjob.yaml) -> :class:`scheduler.spec.schedule.ScheduleSpec`: schedule,
concurrencyPolicy, suspend, startingDeadlineSeconds, successful/failedJobsHistoryLimit,
and ``spec.jobTemplate`` read as a Volcano Job named like the CronJob."""

from __future__ import annotations

from typing import Any

from scheduler.spec.formats import volcano
from scheduler.spec.formats.common import Context, TranslateError, as_int, job_name
from scheduler.spec.schedule import MAX_SCHEDULE_NAME, ScheduleSpec

API_VERSION = "batch.volcano.sh/v1alpha1"


def is_volcano_cronjob(doc: dict[str, Any]) -> bool:
    """A Volcano CronJob: ``apiVersion: batch.volcano.sh/...``, ``kind: CronJob``."""
    return str(doc.get("apiVersion", "")).startswith("batch.volcano.sh/") and (
        doc.get("kind") == "CronJob"
    )


def translate_volcano_cronjob(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A Volcano CronJob -> a :class:`ScheduleSpec` dict (its ``job`` a pasture spec dict
    translated from ``spec.jobTemplate`` as a Volcano Job named like the CronJob) and the
    warnings. Raises TranslateError naming the CronJob's field (``spec.jobTemplate.spec.
    tasks[0]...`` for one of the template)."""
    ctx = Context("Volcano")
    meta = volcano.object_metadata(doc, ctx, {"name"})
    name = job_name(meta.get("name"), ctx, "metadata.name")
    if len(name) > MAX_SCHEDULE_NAME:
        raise ctx.refuse(
            "metadata.name",
            f"at most {MAX_SCHEDULE_NAME} characters (each run is <name>-<minutes>, a job "
            f"name of at most 63), got {len(name)}",
            name,
        )
    spec = ctx.mapping(doc.get("spec"), "spec")
    ctx.check_fields(
        spec,
        "spec",
        honoured={
            "schedule",
            "concurrencyPolicy",
            "suspend",
            "startingDeadlineSeconds",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
            "jobTemplate",
        },
        refused={
            "timeZone": "schedules are in UTC here: drop timeZone and write the schedule in UTC"
        },
    )
    out: dict[str, Any] = {"name": name, "schedule": spec.get("schedule")}
    if spec.get("concurrencyPolicy") is not None:
        if spec["concurrencyPolicy"] not in ("Allow", "Forbid", "Replace"):
            raise ctx.refuse(
                "spec.concurrencyPolicy",
                "expected Allow, Forbid or Replace",
                spec["concurrencyPolicy"],
            )
        out["concurrency_policy"] = spec["concurrencyPolicy"]
    if spec.get("suspend") is not None:
        if not isinstance(spec["suspend"], bool):
            raise ctx.refuse("spec.suspend", "expected true or false", spec["suspend"])
        out["suspend"] = spec["suspend"]
    for key, field in (
        ("startingDeadlineSeconds", "starting_deadline_s"),
        ("successfulJobsHistoryLimit", "successful_jobs_history_limit"),
        ("failedJobsHistoryLimit", "failed_jobs_history_limit"),
    ):
        if spec.get(key) is not None:
            out[field] = as_int(spec[key], ctx, f"spec.{key}", minimum=0)
    template = ctx.mapping(spec.get("jobTemplate"), "spec.jobTemplate")
    ctx.check_fields(
        template,
        "spec.jobTemplate",
        honoured={"spec"},
        ignored={"metadata": "Kubernetes object metadata; no meaning here"},
    )
    job_doc = {
        "apiVersion": volcano.API_VERSION,
        "kind": "Job",
        "metadata": {"name": name},
        "spec": template.get("spec"),
    }
    jctx = Context("Volcano")
    try:
        out["job"] = volcano.translate(job_doc, jctx)
    except TranslateError as exc:
        loc = f"spec.jobTemplate.{exc.loc}"
        message = exc.message.replace(f"field {exc.loc}", f"field {loc}", 1)
        raise TranslateError(loc, message, exc.given) from None
    warnings = ctx.warnings + [
        w.replace("Volcano field spec.", "Volcano field spec.jobTemplate.spec.", 1)
        for w in jctx.warnings
    ]
    return out, warnings


def parse_volcano_cronjob(doc: dict[str, Any]) -> tuple[ScheduleSpec, list[str]]:
    """:func:`translate_volcano_cronjob`, validated. Raises TranslateError (a refused
    field) or pydantic.ValidationError (a translated value out of bounds)."""
    out, warnings = translate_volcano_cronjob(doc)
    return ScheduleSpec.model_validate(out), warnings
