"""Job service: parse and submit specs, list, show, stop, delete, events (the API's job
routes).

Visibility rule (documented in docs/api.md): an admin sees every job; a user token sees
only jobs of its VCs, and a job of another VC answers exactly like an unknown job (404),
so that job names of other tenants do not leak. Submitting to another VC is 403.
"""

from __future__ import annotations

import builtins
import json
import re
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from scheduler.jobref import DEFAULT_VC, VC, exists_message, job_key, parse_ref, short_name
from scheduler.services import backend
from scheduler.services.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidSpecError,
    NotFoundError,
    ServiceError,
)
from scheduler.services.principal import Principal, require_role, require_vc
from scheduler.services.records import as_dict
from scheduler.states import TERMINAL_JOB_STATES, JobState
from scheduler.store.records import JobRecord
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from pathlib import Path

    from scheduler.core.model import Node
    from scheduler.spec import ParsedJob
    from scheduler.spec.model import JobSpec
    from scheduler.store import Store

# The one job-state definition is scheduler.store.records.JobState; these are its views.
TERMINAL_STATES = TERMINAL_JOB_STATES
# The ``state`` query parameter's type (FastAPI documents and checks the enum).
JobStateName = JobState
JOB_STATES: tuple[str, ...] = tuple(s.value for s in JobState)


def parse_document(body: bytes, content_type: str | None = None) -> dict[str, Any]:
    """Parse a request body holding a job spec as YAML or JSON, within the spec's bounds
    (size, nesting depth, YAML aliases: :mod:`scheduler.spec.bounded`). This is the one
    parse of the text; :meth:`JobService.submit` validates the result once.

    Args:
        body: raw bytes (UTF-8).
        content_type: the request's Content-Type; ``application/json`` is parsed strictly
            as JSON, anything else as YAML (a superset of JSON).

    Returns:
        The top-level mapping.

    Raises:
        BadRequestError: not UTF-8, empty, malformed YAML/JSON (the message gives the
            line), or over a bound (too large, too deep, too many aliases).
        InvalidSpecError: the document is not a mapping.
    """
    as_json = bool(content_type and "json" in content_type.lower())
    try:
        document = backend.load_document(body, as_json=as_json)
    except ValueError as exc:  # scheduler.spec.DocumentError
        errors = getattr(exc, "errors", None) or [{"msg": str(exc)}]
        raise BadRequestError("job spec: " + "; ".join(e["msg"] for e in errors)) from None
    if not isinstance(document, dict):
        raise InvalidSpecError(
            "job spec: expected a mapping at the top level",
            [
                {
                    "loc": [],
                    "msg": f"expected a mapping, got {type(document).__name__}",
                    "type": "type_error",
                }
            ],
        )
    return document


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """Pydantic errors as ``[{"loc": [...], "msg": ..., "type": ...}]`` (JSON-safe; a
    pattern mismatch said in words, :func:`scheduler.spec.errors.worded`)."""
    from scheduler.spec.errors import worded

    out = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err.get("loc", ())]
        item = {"loc": loc, "msg": worded(dict(err)), "type": err["type"]}
        if "input" in err:
            value = as_dict(err["input"])
            text = json.dumps(value, default=str)
            item["input"] = value if len(text) <= 200 else text[:200] + "..."
        out.append(item)
    return out


def spec_error(error: dict[str, Any]) -> dict[str, Any]:
    """One ``SpecError`` entry (dotted ``loc``) in the API's shape (``loc`` as a list)."""
    loc = error.get("loc") or ""
    parts = loc if isinstance(loc, list | tuple) else [p for p in str(loc).split(".") if p]
    out = {"loc": [str(p) for p in parts], "msg": str(error.get("msg", "")), "type": "spec"}
    if error.get("input") is not None:
        out["input"] = as_dict(error["input"])
    return out


def _summary(errors: list[dict[str, Any]]) -> str:
    parts = [f"{'.'.join(e['loc']) or '(top)'}: {e['msg']}" for e in errors[:5]]
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid job spec: " + "; ".join(parts) + more


def _fit_key(spec: Any) -> tuple[object, ...] | None:
    """What :func:`scheduler.spec.fit.unfittable_reason` depends on in a job: each role's
    request, replicas, minimum, node selector and GPU model, and the gang's minimum
    (None when the spec has no core form, so the answer is not memoised)."""
    to_core = getattr(spec, "to_core", None)
    if to_core is None:
        return None
    job = to_core()
    return (
        tuple(
            (
                r.name,
                r.resources,
                r.replicas,
                r.min_available,
                r.gpu_model,
                tuple(sorted(r.node_selector.items())),
            )
            for r in job.roles
        ),
        job.gang_request(),
    )


class JobService:
    """Use cases on jobs, with the caller's permissions applied.

    Args:
        store: the backend store (see :mod:`scheduler.services.backend`).
        secrets_key_file: the cluster's secrets key (seals a job's secret values at
            submit; None or a missing file: jobs with secrets are refused).
    """

    def __init__(
        self,
        store: Store,
        node_cache_s: float = 10.0,
        secrets_key_file: str | Path | None = None,
    ) -> None:
        self.store = store
        self.secrets_key_file = secrets_key_file
        self.node_cache_s = node_cache_s
        self._nodes: list[Node] = []
        self._nodes_read: float | None = None
        self._vcs: dict[str, Any] | None = None
        self._vcs_read = 0.0
        # job shapes known to fit the cached cluster (the check is O(nodes) per role:
        # ~2 ms a job at 1000 nodes, most of a submit's cost before it was memoised)
        self._fits: dict[tuple[object, ...], bool] = {}

    def fit_reason(self, spec: JobSpec) -> str | None:
        """Why the gang can never be placed on this cluster, None when it can.

        The cluster's shape is cached for ``node_cache_s`` seconds (reading every node on
        each submit costs ~45 ms at 200 nodes); only a "fits" answer is taken from the
        cache, a "never fits" is confirmed against a fresh read before a job is rejected.
        """
        now = time.monotonic()
        fresh = self._nodes_read is None or now - self._nodes_read > self.node_cache_s
        if fresh:
            self._read_nodes(now)
        key = _fit_key(spec)
        if key is not None and self._fits.get(key, False):
            return None  # this shape fits the cached cluster (checked once, not per node)
        reason = backend.unfittable_reason(spec, self._nodes)
        if reason is not None and not fresh:
            self._read_nodes(now)
            reason = backend.unfittable_reason(spec, self._nodes)
        if reason is None and key is not None:
            self._fits[key] = True
        return reason

    def _read_nodes(self, now: float) -> None:
        self._nodes, self._nodes_read = backend.core_nodes(self.store), now
        self._fits = {}  # answers hold for one reading of the cluster's shape

    # -- submit -------------------------------------------------------------------------
    def validate(self, document: dict[str, Any]) -> ParsedJob:
        """Translate (OpenPAI v1/v2, MARO, Volcano) and validate a parsed document once.

        Returns:
            The backend's parsed job: ``.specs`` (one job spec; several for a MARO
            schedule), ``.format`` and ``.warnings`` (fields accepted without effect).

        Raises:
            InvalidSpecError: with one entry per problem and its field path.
        """
        try:
            return backend.parse_job(document)
        except ValidationError as exc:  # before ValueError: it is one
            errors = validation_errors(exc)
            raise InvalidSpecError(_summary(errors), errors) from None
        except ValueError as exc:
            spec_errors = getattr(exc, "errors", None)
            if isinstance(spec_errors, list):  # scheduler.spec.SpecError
                errors = [spec_error(e) for e in spec_errors]
                raise InvalidSpecError(_summary(errors), errors) from None
            raise InvalidSpecError(
                f"invalid job spec: {exc}", [{"loc": [], "msg": str(exc), "type": "value_error"}]
            ) from None

    def _known_vcs(self, fresh: bool = False) -> dict[str, Any]:
        """The store's VCs, cached for ``node_cache_s`` seconds like the cluster's shape."""
        now = time.monotonic()
        if fresh or self._vcs is None or now - self._vcs_read > self.node_cache_s:
            self._vcs, self._vcs_read = self.store.vcs(), now
        return self._vcs

    def _check_vc(self, vc: str, parsed: ParsedJob | None = None, index: int = 0) -> None:
        """Refuse a VC the store does not know (skipped while no VC is configured yet).
        Only a "known" answer comes from the cache; an unknown VC is confirmed fresh. The
        refusal names the file's own field (``spec.queue``) for a translated ``parsed``."""
        known = self._known_vcs()
        if known and vc not in known:
            known = self._known_vcs(fresh=True)
        if known and vc not in known:
            msg = f"no virtual cluster {vc!r}; known: {sorted(known)}"
            loc = "vc"
            if parsed is not None:
                loc, msg = parsed.source_error(index, loc, msg)
            raise InvalidSpecError(
                f"invalid job spec: {loc}: {msg}",
                [{"loc": loc.split("."), "msg": msg, "type": "unknown_vc", "input": vc}],
            )

    def admit(self, principal: Principal, document: dict[str, Any]) -> ParsedJob:
        """Every check of a submit but the store's write: parse and validate once, the
        caller's role and VC, the VC exists, the gang can ever be placed, and (several
        jobs) no name is taken. ``submit`` and the dry run (:mod:`scheduler.services.dryrun`)
        both call it, so a dry run refuses exactly what a submit refuses.

        Raises:
            As :meth:`submit` (a single job's name conflict is the store's to find).
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        parsed = self.validate(document)
        for index, spec in enumerate(parsed.specs):
            require_vc(principal, spec.vc)
            self._check_vc(spec.vc, parsed, index)
            reason = self.fit_reason(spec)
            if reason is not None:
                role = re.match(r"role (\S+?):", reason)
                loc = f"roles.{role.group(1)}.resources" if role else "roles"
                loc, msg = parsed.source_error(index, loc, f"can never be placed: {reason}")
                raise InvalidSpecError(
                    f"job can never be placed: {reason}",
                    [{"loc": loc.split("."), "msg": msg, "type": "no_fit"}],
                )
        if len(parsed.specs) > 1:
            for spec in parsed.specs:
                if self.store.get_job(job_key(spec.vc, spec.name)) is not None:
                    raise ConflictError(exists_message(spec.vc, spec.name))
        return parsed

    def submit(self, principal: Principal, document: dict[str, Any]) -> dict[str, Any]:
        """Validate and store a new job; returns the stored job record with ``warnings``
        (list of sentences: fields of a foreign format accepted without effect). A MARO
        schedule stores one job per name (all checked before any is stored) and the answer
        is the first job's record with ``jobs`` listing every name.

        Raises:
            InvalidSpecError (422: invalid, unknown VC, can never be placed),
            ForbiddenError (403, VC not allowed), ConflictError (409, a job of that name
            exists).
        """
        parsed = self.admit(principal, document)
        specs = parsed.specs
        sealed = self._seal(specs[0].name, parsed.secrets)
        jobs: list[JobRecord] = []
        for spec in specs:
            try:
                jobs.append(self.store.create_job(spec, user=principal.name, **sealed))
            except backend.job_exists_error() as exc:
                raise ConflictError(str(exc)) from None
        out: dict[str, Any] = as_dict(jobs[0])
        out["warnings"] = list(parsed.warnings)
        if len(jobs) > 1:
            out["jobs"] = [short_name(j.name) for j in jobs]
        return out

    def _seal(self, job: str, values: dict[str, str] | None) -> dict[str, str]:
        """``{"sealed_secrets": token}`` for ``create_job`` ({} without secrets).
        Raises InvalidSpecError (loc ``secrets``) when this cluster has no usable key."""
        if not values:
            return {}
        try:
            return {"sealed_secrets": backend.seal_secrets(self.secrets_key_file, job, values)}
        except ValueError as exc:  # scheduler.sealed.SealError: names no value
            msg = f"cannot be kept: {exc}; ask the cluster's admin (docs/api.md, Job secrets)"
            raise InvalidSpecError(
                f"invalid job spec: secrets: {msg}",
                [{"loc": ["secrets"], "msg": msg, "type": "no_secrets_key"}],
            ) from None

    def submit_many(self, principal: Principal, documents: list[Any]) -> dict[str, Any]:
        """Validate and store many job documents (``POST /api/v1/jobs:batch``): each goes
        through :meth:`admit` (every check of a single submit) on its own, and every valid
        one is stored in one round trip (:meth:`scheduler.store.Store.create_jobs`).

        Returns ``{"items": [...], "created": n, "failed": m}``, one item per document in
        order: ``{"index", "status": 201, "name", "names", "state", "warnings"}`` or
        ``{"index", "status": 4xx, "name" (when known), "detail"}`` (the status a single
        submit of that document would answer: 403, 409 or 422). A name given twice in one
        batch is a 409 for the later ones.

        Raises ForbiddenError (403) for a principal that may not submit at all.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        items: list[dict[str, Any]] = []
        todo: list[tuple[dict[str, Any], list[JobSpec], str]] = []
        seen: set[str] = set()
        for index, document in enumerate(documents):
            item: dict[str, Any] = {"index": index}
            items.append(item)
            try:
                if not isinstance(document, dict):
                    msg = f"expected a mapping, got {type(document).__name__}"
                    raise InvalidSpecError(
                        f"jobs[{index}]: {msg}",
                        [{"loc": ["jobs", str(index)], "msg": msg, "type": "type_error"}],
                    )
                parsed = self.admit(principal, document)
                item["name"] = parsed.specs[0].name
                for spec in parsed.specs:
                    key = job_key(spec.vc, spec.name)
                    if key in seen:
                        raise ConflictError(
                            f"job {spec.name!r} of VC {spec.vc!r} is given twice in this batch"
                        )
                    seen.add(key)
                sealed = self._seal(parsed.specs[0].name, parsed.secrets)
                item["warnings"] = list(parsed.warnings)
                todo.append((item, parsed.specs, sealed.get("sealed_secrets", "")))
            except ServiceError as exc:
                item.update(status=exc.status, detail=getattr(exc, "errors", None) or str(exc))
        flat = [spec for _, specs, _ in todo for spec in specs]
        tokens = [token for _, specs, token in todo for _ in specs]
        stored = iter(
            self.store.create_jobs(flat, user=principal.name, sealed_secrets=tokens) if flat else []
        )
        for item, specs, _ in todo:
            recs = [next(stored) for _ in specs]
            made = [r for r in recs if r is not None]
            if len(made) < len(recs):
                taken = [s for s, r in zip(specs, recs, strict=True) if r is None]
                item.update(status=409, detail=exists_message(taken[0].vc, taken[0].name))
                continue
            names = [short_name(r.name) for r in made]
            item.update(status=201, names=names, vc=made[0].vc, state=made[0].state)
        created = sum(1 for i in items if i.get("status") == 201)
        return {"items": items, "created": created, "failed": len(items) - created}

    # -- read ---------------------------------------------------------------------------
    def resolve(self, principal: Principal, name: str, vc: str | None = None) -> str:
        """The key (:mod:`scheduler.jobref`) of the job the caller calls ``name``: its job
        of that name in one of its VCs (an admin's: every VC), or in ``vc`` when given.
        ``name`` may also be ``<name>.<vc>`` (:func:`scheduler.jobref.qualified_name`).

        Returns:
            The job key, for :meth:`get` and the other methods that take a job.

        Raises:
            NotFoundError: no such job in the caller's VCs (or in ``vc``, or ``vc`` is not
                one of the caller's); the message names only ``name`` and ``vc``.
            ConflictError: jobs of that name in several of the caller's VCs and no ``vc``:
                the message asks for ``?vc=`` and names only the caller's own VCs.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        try:
            ref_vc, name = parse_ref(name)
        except ValueError:  # not a job name: a record from before names were checked
            return name
        if ref_vc is not None:  # <name>.<vc>: the VC is part of it
            if vc is not None and vc != ref_vc:
                raise NotFoundError(f"job {name!r} not found in VC {vc!r}")
            vc = ref_vc
        if vc is not None:
            if not VC.fullmatch(vc) or not principal.may_use_vc(vc):
                raise NotFoundError(f"job {name!r} not found in VC {vc!r}")
            return job_key(vc, name)
        if principal.role is TokenRole.ADMIN:
            vcs = sorted({DEFAULT_VC, *self._known_vcs(fresh=True)})
        else:
            vcs = sorted(v for v in principal.vcs if VC.fullmatch(v))
        keys = [job_key(v, name) for v in vcs]
        found = [
            j for j in self.store.get_jobs(keys, with_spec=False) if principal.may_use_vc(j.vc)
        ]
        if not found:
            raise NotFoundError(f"job {name!r} not found")
        if len(found) > 1:
            raise ConflictError(
                f"jobs named {name!r} exist in your VCs {sorted(j.vc for j in found)}: "
                "name one with ?vc= (the CLI's --vc)"
            )
        return found[0].name

    def _visible(self, principal: Principal, name: str, uid: str | None = None) -> JobRecord:
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        job = self.store.get_job(name)
        if job is None or not principal.may_use_vc(job.vc):
            raise NotFoundError(f"job {name!r} not found")
        if uid is not None and uid != job.uid:
            raise NotFoundError(
                f"job {name!r} of uid {uid} not found: it was deleted or replaced "
                f"(the job of that name now has uid {job.uid or '(none)'})"
            )
        return job

    def state(self, principal: Principal, name: str, uid: str | None = None) -> JobState:
        """The job's state. Raises NotFoundError as :meth:`get`."""
        return JobState(self._visible(principal, name, uid).state)

    def get(self, principal: Principal, name: str, uid: str | None = None) -> dict[str, Any]:
        """The job record (state, attempt, pending reason, tasks...).

        Args:
            uid: when given, only the submission with this uid (:attr:`JobRecord.uid`):
                a job deleted and submitted again under ``name`` is "not found", so a
                caller following one job never reads another's records.

        Raises:
            NotFoundError: unknown job, a job of a VC the caller may not use, or (with
                ``uid``) a job of that name with another uid.
        """
        job: dict[str, Any] = as_dict(self._visible(principal, name, uid))
        if "tasks" not in job:
            job["tasks"] = as_dict(self.store.tasks(name))
        return job

    def list(
        self,
        principal: Principal,
        *,
        vc: str | None = None,
        state: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Jobs visible to the caller, newest first (``user``: only jobs submitted by it).

        Returns:
            ``{"items": [job...], "total": n matching, "limit": n, "offset": n}``.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        if vc is not None:
            vcs = [vc] if principal.may_use_vc(vc) else []
        elif principal.role is TokenRole.ADMIN:
            vcs = None
        else:
            vcs = list(principal.vcs)
        if vcs == []:
            return {"items": [], "total": 0, "limit": limit, "offset": offset}
        items, total = self.store.list_jobs(
            vcs=vcs, state=state, user=user, limit=limit, offset=offset
        )
        return {"items": as_dict(items), "total": total, "limit": limit, "offset": offset}

    def tasks_of(
        self, principal: Principal, names: builtins.list[str]
    ) -> dict[str, builtins.list[dict[str, Any]]]:
        """Task records of several jobs in one read (the jobs list's placements):
        ``{job: [task...]}`` in the shape of ``TaskOut`` (:mod:`scheduler.api.schemas`),
        ordered by (role, index). Only jobs the caller may see (:meth:`get`'s rule) are
        answered; another VC's job, or one that does not exist, is left out, so a name
        learnt elsewhere reveals nothing."""
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        names = list(dict.fromkeys(names))  # job keys (answers' ``key``)
        if principal.role is not TokenRole.ADMIN:
            jobs = self.store.get_jobs(names, with_spec=False)
            names = [j.name for j in jobs if principal.may_use_vc(j.vc)]
        found = self.store.tasks_of(names) if names else {}
        return {
            job: sorted(as_dict(tasks), key=lambda t: (t.get("role", ""), t.get("index", 0)))
            for job, tasks in found.items()
        }

    def events(self, principal: Principal, name: str) -> dict[str, Any]:
        """The job's event history and its current pending reason.

        Returns:
            ``{"job": name, "state": ..., "pending_reason": ... | None, "events": [...]}``.
        """
        job = as_dict(self._visible(principal, name))
        return {
            "job": job.get("name"),
            "vc": job.get("vc"),
            "state": job.get("state"),
            "pending_reason": job.get("pending_reason"),
            "events": as_dict(self.store.events(name)),
        }

    def stop(self, principal: Principal, name: str, reason: str | None = None) -> dict[str, Any]:
        """Ask for the job to be stopped (the loop and agents carry it out).

        Stopping a finished job is a no-op that returns its record.

        Raises:
            NotFoundError: unknown job, or one the caller may not see.
            ForbiddenError: another user's job, and the caller is neither an admin nor
                the VC's operator (:meth:`TokenInfo.may_control`).
        """
        job = self._visible(principal, name)
        _require_control(principal, job, "stop")
        if JobState(job.state).terminal:
            ended: dict[str, Any] = as_dict(job)
            return ended
        try:
            self.store.request_stop(name, reason=reason or f"stopped by {principal.name}")
        except backend.not_found_errors():
            raise NotFoundError(f"job {name!r} not found") from None
        stopping: dict[str, Any] = as_dict(self.store.get_job(name))
        return stopping

    def delete(self, principal: Principal, name: str, force: bool = False) -> dict[str, Any]:
        """Delete a finished job's records: ``{"name", "deleted": True, "state"}``.

        A job that has not finished is refused, unless ``force``: then it is asked to stop
        and ``{"deleted": False, "state"}`` comes back (delete again once it stopped).

        Raises:
            NotFoundError: unknown job, or one the caller may not see.
            ConflictError: the job has not finished and ``force`` is false.
            ForbiddenError: as :meth:`stop`.
        """
        job = self._visible(principal, name)
        _require_control(principal, job, "delete")
        state = job.state
        if not JobState(state).terminal:
            if not force:
                raise ConflictError(
                    f"job {name!r} is {state}; stop it first or delete with force=true"
                )
            self.stop(principal, name, reason=f"deleted by {principal.name}")
            now = self.store.get_job(name)
            return {
                "name": short_name(name),
                "vc": job.vc,
                "deleted": False,
                "state": now.state if now else state,
            }
        try:
            self.store.delete_job(name)
        except backend.not_found_errors():
            raise NotFoundError(f"job {name!r} not found") from None
        except backend.job_active_error() as exc:
            raise ConflictError(str(exc)) from None
        return {"name": short_name(name), "vc": job.vc, "deleted": True, "state": state}


def _require_control(principal: Principal, job: JobRecord, verb: str) -> None:
    """Raise ForbiddenError (403) unless ``principal`` may stop/delete ``job``: its
    owner, an admin, or the operator of its VC (``operates`` of the token)."""
    if not principal.may_control(job.vc, job.user):
        raise ForbiddenError(
            f"job {job.name!r} was submitted by {job.user!r}: only its owner, an admin or"
            f" an operator of vc {job.vc!r} may {verb} it (token {principal.name!r}"
            " operates no such vc)"
        )
