"""Why not that node? A per-node account of one pending job, for people and the API.

``schedule()`` never scans every node (it uses the index); ``explain()`` does, once, for one
job: for each of its roles and each node it runs the policy's filters in order and records
the first that rejects, or the per-stage scores of a node that passes. It also reports what
``schedule()`` decided for that job on the same snapshot, so the two can be read together.
Scores are computed against the node's free capacity in the snapshot, with no task of the
job placed yet (gang-locality is then 0 everywhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from scheduler.core.model import Bind, PendingReason, Snapshot
from scheduler.core.plugins import FILTERS, SCORERS
from scheduler.core.policy import Policy
from scheduler.core.resources import sub
from scheduler.core.scheduler import schedule

_NONE: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node judged for one task role.

    Attributes:
        node: node name.
        role: task role name.
        rejected_by: name of the first filter that rejected the node, None if it passed.
        scores: per-scorer score in [0, 1] of a passing node (empty when rejected).
        total: weighted sum of ``scores`` (None when rejected).
    """

    node: str
    role: str
    rejected_by: str | None
    scores: Mapping[str, float]
    total: float | None


@dataclass(frozen=True, slots=True)
class Explanation:
    """A pending job's outcome this cycle and every node's verdict for each of its roles.

    Attributes:
        job: job name.
        outcome: its Bind, or its PendingReason, from ``schedule()`` on the same input.
        nodes: verdicts, role by role (declaration order), nodes in snapshot order.
    """

    job: str
    outcome: Bind | PendingReason
    nodes: tuple[NodeVerdict, ...]

    def rejected_count(self, role: str) -> Mapping[str, int]:
        """{filter name: nodes it rejected} for ``role``."""
        out: dict[str, int] = {}
        for v in self.nodes:
            if v.role == role and v.rejected_by is not None:
                out[v.rejected_by] = out.get(v.rejected_by, 0) + 1
        return out


def explain(snapshot: Snapshot, policy: Policy, job_name: str, now: float) -> Explanation:
    """Explain ``job_name``'s placement (see the module docstring).

    Cost: O(nodes x roles x (filters + scorers)); meant for one job on request, not for
    the scheduling loop.

    Raises:
        KeyError: ``job_name`` is not among the snapshot's pending jobs.
    """
    job = next((j for j in snapshot.pending if j.name == job_name), None)
    if job is None:
        raise KeyError(f"job {job_name!r} is not pending in this snapshot")
    decision = schedule(snapshot, policy, now)
    outcome: Bind | PendingReason | None = next(
        (b for b in decision.binds if b.job == job_name), None
    )
    if outcome is None:
        outcome = decision.pending[job_name]
    filters = [FILTERS[n] for n in policy.filters]
    scorers = [(n, SCORERS[n].score, w) for n, w in policy.scorers]
    verdicts = []
    for role in job.roles:
        req = role.resources.triple()
        for node in snapshot.nodes:
            cap = node.capacity.triple()
            free = sub(cap, node.allocated.triple())
            rejected = next((f.name for f in filters if not f.check(node, free, role)), None)
            if rejected is not None:
                verdicts.append(NodeVerdict(node.name, role.name, rejected, _NONE, None))
                continue
            scores = {n: fn(cap, free, req, 0) for n, fn, _ in scorers}
            total = sum(w * scores[n] for n, _, w in scorers)
            verdicts.append(
                NodeVerdict(node.name, role.name, None, MappingProxyType(scores), total)
            )
    return Explanation(job_name, outcome, tuple(verdicts))
