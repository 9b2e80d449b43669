"""Scheduled jobs (:mod:`scheduler.spec.schedule`): submit (a Volcano ``CronJob`` or a
pasture schedule ``{name, schedule, job, ...}``), list, show, suspend, resume, delete.

A schedule's job template passes every check a job submit makes (the caller's role and VC,
the VC exists, the gang can ever be placed: :meth:`JobService.admit`) when the schedule is
submitted; the loop then creates each run as the schedule's user. A schedule is seen only
by callers who may use its VC (admins see all); any other gets 404, as for jobs.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from scheduler.services.errors import ConflictError, InvalidSpecError, NotFoundError
from scheduler.services.jobs import JobService, validation_errors
from scheduler.services.principal import Principal, require_role
from scheduler.spec.formats.common import TranslateError
from scheduler.spec.formats.volcano_cronjob import is_volcano_cronjob, parse_volcano_cronjob
from scheduler.spec.schedule import ScheduleSpec
from scheduler.store.base import JobExistsError, JobNotFoundError
from scheduler.store.schedules import ScheduleRecord, ScheduleStore
from scheduler.store.tokens import TokenRole

_CRONJOB_FIELDS = {
    "name": "metadata.name",
    "schedule": "spec.schedule",
    "starting_deadline_s": "spec.startingDeadlineSeconds",
    "successful_jobs_history_limit": "spec.successfulJobsHistoryLimit",
    "failed_jobs_history_limit": "spec.failedJobsHistoryLimit",
    "job": "spec.jobTemplate.spec",
}
"""A ScheduleSpec field -> the Volcano CronJob field it came from."""


def _out(rec: ScheduleRecord, warnings: list[str] | None = None) -> dict[str, Any]:
    spec = rec.spec
    out: dict[str, Any] = {
        "name": rec.name,
        "vc": rec.vc,
        "user": rec.user,
        "schedule": spec["schedule"],
        "concurrency_policy": spec["concurrency_policy"],
        "suspend": spec["suspend"],
        "starting_deadline_s": spec["starting_deadline_s"],
        "successful_jobs_history_limit": spec["successful_jobs_history_limit"],
        "failed_jobs_history_limit": spec["failed_jobs_history_limit"],
        "created": rec.created,
        "last_scheduled": rec.last if rec.last > rec.created else None,
        "runs": rec.runs,
        "job": spec["job"],
    }
    if warnings is not None:
        out["warnings"] = warnings
    return out


class ScheduleService:
    """Scheduled jobs over a :class:`JobService` (its store and submit checks)."""

    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs
        self.schedules = ScheduleStore(jobs.store)

    def parse(self, document: dict[str, Any]) -> tuple[ScheduleSpec, list[str]]:
        """A Volcano CronJob or a pasture schedule as a ScheduleSpec and its warnings.

        Raises:
            InvalidSpecError: a field refused (named as the file names it) or invalid.
        """
        try:
            if is_volcano_cronjob(document):
                return parse_volcano_cronjob(document)
            if "schedule" in document and "job" in document:
                return ScheduleSpec.model_validate(document), []
        except TranslateError as exc:
            error = {"loc": exc.loc.split("."), "msg": exc.message, "type": "spec"}
            raise InvalidSpecError(f"invalid schedule: {exc}", [error]) from None
        except ValidationError as exc:
            errors = validation_errors(exc)
            if is_volcano_cronjob(document):  # name the CronJob's own field
                for e in errors:
                    field = ".".join(e["loc"])
                    source = _CRONJOB_FIELDS.get(e["loc"][0] if e["loc"] else "", field)
                    e["loc"] = source.split(".")
                    e["msg"] = f"Volcano field {source}: {e['msg']} (checked as pasture's {field})"
            raise InvalidSpecError(f"invalid schedule: {errors[0]['msg']}", errors) from None
        msg = (
            "expected a Volcano CronJob (apiVersion batch.volcano.sh/v1alpha1, kind CronJob) "
            "or a pasture schedule {name, schedule, job}"
        )
        raise InvalidSpecError(
            f"invalid schedule: {msg}", [{"loc": [], "msg": msg, "type": "spec"}]
        )

    def submit(self, principal: Principal, document: dict[str, Any]) -> dict[str, Any]:
        """Store a schedule after the checks of a job submit on its template.

        Raises:
            InvalidSpecError (422), ForbiddenError (403: role or VC), ConflictError (409:
            a schedule of that name exists).
        """
        spec, warnings = self.parse(document)
        self.jobs.admit(principal, spec.job.model_dump(mode="json"))
        try:
            rec = self.schedules.create(spec, principal.name)
        except JobExistsError as exc:
            raise ConflictError(str(exc)) from None
        return _out(rec, warnings)

    def _visible(self, principal: Principal, name: str) -> ScheduleRecord:
        rec = self.schedules.get(name)
        if rec is None or not principal.may_use_vc(rec.vc):
            raise NotFoundError(f"schedule {name!r} not found")
        return rec

    def list(self, principal: Principal) -> dict[str, Any]:
        """The schedules the caller may see: ``{"items": [...]}``."""
        return {"items": [_out(r) for r in self.schedules.all() if principal.may_use_vc(r.vc)]}

    def get(self, principal: Principal, name: str) -> dict[str, Any]:
        """One schedule. Raises NotFoundError (also for one the caller may not see)."""
        return _out(self._visible(principal, name))

    def suspend(self, principal: Principal, name: str, suspend: bool) -> dict[str, Any]:
        """Suspend (no new runs) or resume a schedule."""
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        self._visible(principal, name)
        try:
            self.schedules.set_suspend(name, suspend)
        except JobNotFoundError:
            raise NotFoundError(f"schedule {name!r} not found") from None
        return _out(self._visible(principal, name))

    def delete(self, principal: Principal, name: str) -> dict[str, Any]:
        """Delete a schedule; its runs stay jobs of their own."""
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        self._visible(principal, name)
        try:
            self.schedules.delete(name)
        except JobNotFoundError:
            raise NotFoundError(f"schedule {name!r} not found") from None
        return {"name": name, "deleted": True}
