"""Dry run of a submit: the checks of a real submit, then where the scheduler would place
the job now, or why it would wait; nothing is stored and no event is written.

```
document -> JobService.admit (the one parse + validation, role, VC, never-fits, names)
         -> backend.snapshot(store)          (read-only, as the loop reads it)
         -> + the job(s) as pending          (first attempt, submitted now, by the caller)
         -> scheduler.core.explain.explain() (one schedule() on that snapshot + per-node
                                              verdicts of the policy's filters)
```

The answer is the core's own decision on the current state: the job would be placed
there if the loop's next cycle saw the same state (other jobs may take the room first).
What the loop alone knows is left out: the adaptive policy's learned thresholds (static
ones are used) and the nominations of preemptions under way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scheduler.core.model import Bind
from scheduler.services import backend
from scheduler.services.errors import ConflictError
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
    """

    def __init__(self, jobs: JobService, policy: str = "pasture") -> None:
        self.jobs = jobs
        self.policy = policy

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
        store = self.jobs.store
        for spec in parsed.specs:  # a single job's name is checked by the store's write
            if store.get_job(spec.name) is not None:
                raise ConflictError(f"job {spec.name!r} already exists")
        now = store.now()
        snap = backend.snapshot(store)
        added = tuple(backend.core_job(s, principal.name, now) for s in parsed.specs)
        snap = replace(snap, pending=snap.pending + added)
        policy = backend.load_policy(self.policy)
        out = [
            _job_out(spec, backend.explain(snap, policy, spec.name, now), len(snap.nodes))
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
