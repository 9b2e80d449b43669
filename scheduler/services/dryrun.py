"""Dry run of a submit: the checks of a real submit, then where the scheduler would place
the job now, or why it would wait; nothing is stored and no event is written.

```
document -> JobService.admit (the one parse + validation, role, VC, never-fits, names)
         -> backend.snapshot(store)          (read-only, as the loop reads it)
         -> + the job(s) as pending          (first attempt, submitted now, by the caller)
         -> scheduler.core.explain.explain() (one schedule() on that snapshot + per-node
                                              verdicts of the policy's filters)
```

A dry run also checks what would fail the job the moment a task starts: a ``code_dir``
that is not a directory on the cluster share (:func:`code_dir_problem`; 422 naming
``pasture data push``). A submit does not check it (the code may be pushed between submit
and start).

The answer is the core's own decision on the current state: the job would be placed
there if the loop's next cycle saw the same state (other jobs may take the room first).
What the loop alone knows is left out: the adaptive policy's learned thresholds (static
ones are used) and the nominations of preemptions under way.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from scheduler.core.model import Bind
from scheduler.jobref import exists_message, job_key
from scheduler.services import backend
from scheduler.services.errors import ConflictError, InvalidSpecError
from scheduler.services.jobs import JobService
from scheduler.services.principal import Principal

if TYPE_CHECKING:
    from scheduler.core.explain import Explanation
    from scheduler.spec.model import JobSpec


class DryRunService:
    """``dry_run(principal, document)``: see the module docstring.

    Args:
        jobs: the job service whose checks a submit runs (:meth:`JobService.admit`).
        policy: the scheduling policy's name (``loop.policy``), as the loop loads it.
        share: the cluster share as the API sees it (``share_dir``), for ``code_dir``;
            None: not checked.
    """

    def __init__(
        self, jobs: JobService, policy: str = "pasture", share: Path | None = None
    ) -> None:
        self.jobs = jobs
        self.policy = policy
        self.share = share

    def dry_run(self, principal: Principal, document: dict[str, Any]) -> dict[str, Any]:
        """Validate ``document`` as a submit would and place it on a snapshot.

        Returns:
            ``{"format", "warnings": [sentence], "jobs": [{"name", "vc", "priority",
            "placed": bool, "placements": [{"role", "index", "node"}], "pending_reason":
            {"kind", "message"} | None, "rejected": {role: {filter: nodes}}, "nodes": n}]}``
            (the ``DryRunOut`` schema).

        Raises:
            InvalidSpecError (422), ForbiddenError (403), ConflictError (409): exactly as
            :meth:`JobService.submit` would for the same document and caller.
        """
        parsed = self.jobs.admit(principal, document)
        problems = [p for s in parsed.specs if (p := code_dir_problem(s.code_dir, self.share))]
        if problems:
            raise InvalidSpecError("; ".join(str(p["msg"]) for p in problems), problems)
        store = self.jobs.store
        for spec in parsed.specs:  # a single job's name is checked by the store's write
            if store.get_job(job_key(spec.vc, spec.name)) is not None:
                raise ConflictError(exists_message(spec.vc, spec.name))
        now = store.now()
        snap = backend.snapshot(store)
        added = tuple(backend.core_job(s, principal.name, now) for s in parsed.specs)
        snap = replace(snap, pending=snap.pending + added)
        policy = backend.load_policy(self.policy)
        out = [
            _job_out(
                spec,
                backend.explain(snap, policy, job_key(spec.vc, spec.name), now),
                len(snap.nodes),
            )
            for spec in parsed.specs
        ]
        return {"format": parsed.format, "warnings": list(parsed.warnings), "jobs": out}


def _job_out(spec: JobSpec, explanation: Explanation, n_nodes: int) -> dict[str, Any]:
    """One ``DryRunJobOut`` from the core's explanation of ``spec``'s job."""
    outcome = explanation.outcome
    placed = isinstance(outcome, Bind)
    return {
        "name": spec.name,
        "vc": spec.vc,
        "priority": spec.priority,
        "placed": placed,
        "placements": [
            {"role": p.role, "index": p.index, "node": p.node}
            for p in sorted(outcome.placements, key=lambda p: (p.role, p.index))
        ]
        if isinstance(outcome, Bind)
        else [],
        "pending_reason": None
        if isinstance(outcome, Bind)
        else {"kind": outcome.kind.value, "message": outcome.message},
        "rejected": {role: dict(explanation.rejected_count(role)) for role in spec.roles},
        "nodes": n_nodes,
    }


def code_dir_problem(code_dir: str | None, share: Path | None) -> dict[str, Any] | None:
    """Why ``code_dir`` (a job spec's, relative to the share or absolute inside it) would
    fail the job's tasks at start, as one 422 problem ``{"loc": ["code_dir"], "msg",
    "input"}``; None when it is a directory of ``share`` (or there is nothing to check).

    Directories under ``<share>/jobs/`` (jobs' own, scoped per VC) are not looked at, so
    that no answer tells a tenant whether another VC's job directory exists; the agent
    checks those at start as it checks every ``code_dir``
    (``scheduler.agent.startup.code_dir_of``).
    """
    if not code_dir or share is None:
        return None
    raw = PurePosixPath(code_dir)
    path = Path(raw) if raw.is_absolute() else share / raw
    root = share.resolve()
    resolved = path.resolve()
    if resolved != root and root not in resolved.parents:
        msg = f"code_dir {code_dir!r} is outside the cluster share {share}"
        return {"loc": ["code_dir"], "msg": msg, "input": code_dir}
    rel = resolved.relative_to(root)
    if rel.parts[:1] == ("jobs",) or resolved.is_dir():
        return None
    msg = (
        f"code_dir {code_dir!r}: no such directory on the cluster share, so every task would"
        f" fail at start; copy your code there first: pasture data push ./DIR {rel.as_posix()}"
    )
    return {"loc": ["code_dir"], "msg": msg, "input": code_dir}
