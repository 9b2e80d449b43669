"""The elastic stage: shrink running elastic jobs toward their minimum to start waiting
jobs, and grow them toward their maximum with idle capacity (issue 29).

A role is elastic when ``TaskRole.elastic`` is set: ``replicas`` is its maximum and
``min_available`` its minimum. With ``Policy.elastic``:

* **Shrink** (before any preemption): a pending job blocked for resources may take
  replicas of running elastic jobs of no higher priority, never below their minimum and
  always their highest-index replicas first. Replicas are taken in order of least loss
  (below), one at a time, until the blocked gang fits; if it never fits nothing is taken.
  The shrunk jobs are not preempted: they keep running on fewer replicas, nothing is
  charged to them (no attempt, no restart cost in the simulator). The blocked job is
  reported RESIZING with a nomination on the capacity freed, and binds next cycle.
* **Grow** (after the pending jobs and the ``min_available`` growth of other jobs): idle
  capacity goes one replica at a time to the elastic job whose next replica gains the
  most, until nothing more fits or no job gains.
* **Rebalance** (after grow, issue 36): while the job whose next replica gains most gains
  more than the running job whose last spare replica loses least loses, that replica is
  shrunk for it (:meth:`ElasticStage.rebalance`). AFS reallocates every GPU at each event;
  growing into idle room only, the stage kept a long job's replicas while a new short one
  ran at its minimum.

Sizing policy, after AFS (Hwang et al., "Elastic Resource Sharing for Distributed Deep
Learning", NSDI 2021): give the next GPU to the job with the highest marginal throughput
gain, weighted by the inverse of its remaining length, i.e. the largest increase of its
completion rate ``speedup(n) / remaining``. The speedup table is ``Job.scaling``
(throughput at n replicas relative to 1; linear when empty). The remaining length is the
job's estimate (``estimated_duration_s``) when it has one (AFS with known lengths).
Otherwise the scheduler cannot know it; with an ``adaptive`` policy and finished jobs in
``Snapshot.history`` it is the median remaining service of the finished jobs that attained
more than this job has (:func:`scheduler.core.history.median_residual_service`, the
empirical median residual life, in GPU-seconds; issue 36). Until enough jobs have finished
(or without ``adaptive``), as Tiresias does, 1 + the attained service (GPU-seconds) stands
in for it (Gu et al., NSDI 2019). Why the learned residual: ``1 / (1 + attained)`` makes a
job that has run 1,000 GPU-s weigh 1,000 times less than one that just started, so the
length guess swamps the scaling (the marginal gain per GPU) in every choice; the residual of
a heavy-tailed run-time distribution grows with age far more slowly, so among jobs of
similar expected remaining length the one whose next replica adds most throughput wins,
as in AFS. Shrinking removes the replica whose loss by that same measure is smallest.

Pure: no I/O, no clock; deterministic (ties broken by job name).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from scheduler.core.gang import GangPlacement, Placer
from scheduler.core.grow import missing_replicas
from scheduler.core.history import History, median_residual_service
from scheduler.core.index import NodeIndex
from scheduler.core.model import Bind, Job, RunningJob, Shrink, TaskPlacement
from scheduler.core.queue import attained_service
from scheduler.core.reasons import shrunk_reason
from scheduler.core.resources import Triple


def shrink_keys(placements: Iterable[TaskPlacement]) -> tuple[str, ...]:
    """Task keys (``<role>-<index>``) of a :class:`scheduler.core.model.Shrink`'s
    placements, highest index first (the order they are stopped in)."""
    ps = sorted(placements, key=lambda p: (p.role, -p.index))
    return tuple(f"{p.role}-{p.index}" for p in ps)


def is_elastic(job: Job) -> bool:
    """True when any role of ``job`` is elastic."""
    return any(r.elastic for r in job.roles)


def speedup(job: Job, n: int) -> float:
    """Throughput of ``job`` on ``n`` replicas of its elastic roles relative to one
    (``Job.scaling``; linear when empty; beyond the table the last step's gain repeats,
    never below 0). 0 for n <= 0."""
    if n <= 0:
        return 0.0
    table = job.scaling
    if not table:
        return float(n)
    if n <= len(table):
        return table[n - 1]
    last = table[-1]
    step = table[-1] - table[-2] if len(table) >= 2 else last
    return last + max(step, 0.0) * (n - len(table))


def weight(job: Job, now: float, run: RunningJob | None, history: History | None = None) -> float:
    """AFS' length weight, 1 / remaining length: the estimate (seconds) when the job has
    one; else the median remaining service (GPU-seconds) of ``history``'s finished jobs
    that attained more than the job has (:func:`median_residual_service`; None history or
    too few such jobs: not known); else 1 + its attained service (Tiresias' stand-in).
    Always in (0, 1]."""
    est = job.estimated_duration_s
    if est is not None:
        return 1.0 / max(est, 1.0)
    served = attained_service(job, now, run)
    rest = median_residual_service(history, served)
    if rest is not None:
        return 1.0 / max(rest, 1.0)
    return 1.0 / (1.0 + served)


def elastic_replicas(rj: RunningJob) -> int:
    """Number of ``rj``'s placements that belong to elastic roles."""
    roles = {r.name for r in rj.job.roles if r.elastic}
    return sum(1 for p in rj.placements if p.role in roles)


@dataclass(slots=True)
class _Shrinkable:
    """A running elastic job's replicas that may still be stopped this cycle."""

    rj: RunningJob
    weight: float
    count: int  # elastic replicas it holds now (after this cycle's shrinks)
    spare: list[TaskPlacement]  # stoppable, the next one last (lowest index first)
    taken: list[TaskPlacement] = field(default_factory=list)

    def loss(self) -> float:
        """Completion-rate loss of stopping its next replica."""
        j = self.rj.job
        return (speedup(j, self.count) - speedup(j, self.count - 1)) * self.weight


def _spare(rj: RunningJob) -> list[TaskPlacement]:
    """Elastic placements above each role's minimum, highest index last, interleaved so
    that the list's tail is always the job's highest remaining replica of some role."""
    out: list[TaskPlacement] = []
    for role in rj.job.roles:
        if not role.elastic:
            continue
        mine = sorted((p for p in rj.placements if p.role == role.name), key=lambda p: p.index)
        out.extend(mine[role.gang_min :])
    return out


class ElasticStage:
    """Per-cycle state of the elastic stage (which jobs were shrunk, by how much).

    Args:
        running: the snapshot's running jobs (releasing ones are ignored).
        now: seconds.
        history: finished jobs, for the length weight (:func:`weight`); None: attained
            service stands in.
    """

    def __init__(
        self, running: Sequence[RunningJob], now: float, history: History | None = None
    ) -> None:
        self.now = now
        self.history = history
        self.jobs: dict[str, _Shrinkable] = {}
        for rj in running:
            if rj.releasing or not is_elastic(rj.job):
                continue
            spare = _spare(rj)
            self.jobs[rj.name] = _Shrinkable(
                rj, weight(rj.job, now, rj, history), elastic_replicas(rj), spare
            )
        self.shrinks: list[Shrink] = []
        self.grown: dict[str, int] = {}  # elastic replicas after this cycle's grows

    @property
    def shrunk(self) -> set[str]:
        """Names of the jobs shrunk this cycle (not grown again in the same cycle)."""
        return {s.job for s in self.shrinks}

    def shrink_for(
        self, job: Job, index: NodeIndex, placer: Placer
    ) -> tuple[list[Shrink], GangPlacement] | None:
        """Stop replicas of running elastic jobs until ``job``'s gang fits.

        Only jobs of priority <= ``job.priority`` are shrunk, never below their minimum.
        On success the freed capacity is released in ``index`` and the gang's placement
        stays allocated there (held for ``job``); returns (shrinks, placement). On failure
        the index is unchanged and None is returned.
        """
        heap: list[tuple[float, str]] = []
        for name, s in self.jobs.items():
            if s.spare and s.rj.job.priority <= job.priority and name != job.name:
                heapq.heappush(heap, (s.loss(), name))
        if not heap:
            return None
        widest = max((r.resources.gpu for r in job.roles), default=0)
        mark = index.mark()
        taken: list[tuple[_Shrinkable, TaskPlacement]] = []
        while heap:
            _, name = heapq.heappop(heap)
            s = self.jobs[name]
            p = s.spare.pop()
            s.count -= 1
            taken.append((s, p))
            i = index.id_of.get(p.node)
            if i is not None:
                r = p.resources
                index.release(i, r.cpu_m, r.memory, r.gpu)
            if s.spare:
                heapq.heappush(heap, (s.loss(), name))
            # a placement attempt is worth it only where a task of the job may fit now
            if i is None or index.free_of(i)[2] < widest:
                continue
            gp = placer.place_gang(job)
            if isinstance(gp, GangPlacement):
                return self._commit(job, taken), gp
        index.rollback(mark)
        for s, p in reversed(taken):
            s.spare.append(p)
            s.count += 1
        return None

    def _commit(self, job: Job, taken: list[tuple[_Shrinkable, TaskPlacement]]) -> list[Shrink]:
        per_job: dict[str, list[TaskPlacement]] = {}
        vc_of: dict[str, str] = {}
        for s, p in taken:
            per_job.setdefault(s.rj.name, []).append(p)
            vc_of[s.rj.name] = s.rj.job.vc
            s.taken.append(p)
        out = [
            Shrink(name, tuple(ps), job.name, shrunk_reason(shrink_keys(ps), vc_of[name], job))
            for name, ps in sorted(per_job.items())
        ]
        self.shrinks.extend(out)
        return out

    def grow(
        self,
        jobs: Sequence[RunningJob],
        index: NodeIndex,
        placer: Placer,
        admit: Callable[[RunningJob, Triple], bool],
    ) -> list[Bind]:
        """Give idle capacity to elastic jobs one replica at a time, best marginal gain
        first (AFS), while it gains and fits.

        Args:
            jobs: elastic running jobs with replicas missing (``grow.growing``), not
                shrunk this cycle.
            index, placer: the cycle's (allocations stay journaled).
            admit: as in :func:`scheduler.core.grow.grow`.

        Returns:
            One :class:`Bind` per grown job, its placements carrying the missing replica
            indexes (lowest first).
        """
        state: dict[str, tuple[RunningJob, float, dict[str, list[int]], dict[int, int]]] = {}
        counts: dict[str, int] = {}
        heap: list[tuple[float, str]] = []
        for rj in jobs:
            missing = {
                r: ix
                for r, ix in missing_replicas(rj).items()
                if any(role.name == r and role.elastic for role in rj.job.roles)
            }
            if not missing:
                continue
            near: dict[int, int] = {}
            for p in rj.placements:
                i = index.id_of.get(p.node)
                if i is not None:
                    near[i] = near.get(i, 0) + 1
            w = weight(rj.job, self.now, rj, self.history)
            state[rj.name] = (rj, w, missing, near)
            n = counts[rj.name] = elastic_replicas(rj)
            g = (speedup(rj.job, n + 1) - speedup(rj.job, n)) * w
            if g > 0:
                heapq.heappush(heap, (-g, rj.name))
        added: dict[str, list[TaskPlacement]] = {}
        scores: dict[str, dict[str, dict[str, float]]] = {}
        while heap:
            _, name = heapq.heappop(heap)
            rj, w, missing, near = state[name]
            role_name = next(iter(missing))
            role = next(r for r in rj.job.roles if r.name == role_name)
            gp = placer.place_extra(role, 1, near, partial(admit, rj))
            if not gp.tasks:
                continue  # nothing more fits this job this cycle
            node_id = gp.tasks[0][1]
            replica = missing[role_name].pop(0)
            if not missing[role_name]:
                del missing[role_name]
            added.setdefault(name, []).append(
                TaskPlacement(role.name, replica, index.names[node_id], role.resources)
            )
            scores.setdefault(name, {}).update(gp.scores)
            near[node_id] = near.get(node_id, 0) + 1
            n = counts[name] = counts[name] + 1
            self.grown[name] = n
            g = (speedup(rj.job, n + 1) - speedup(rj.job, n)) * w
            if missing and g > 0:
                heapq.heappush(heap, (-g, name))
        return [Bind(name, tuple(ps), scores.get(name, {})) for name, ps in sorted(added.items())]

    def rebalance(
        self,
        jobs: Sequence[RunningJob],
        index: NodeIndex,
        placer: Placer,
        admit: Callable[[RunningJob, Triple], bool],
        cooldown_s: float = 0.0,
    ) -> list[Shrink]:
        """Move replicas between running elastic jobs when the move gains (AFS): while the
        job whose next replica gains most (``gain = (speedup(n + 1) - speedup(n)) x
        weight``) gains more than the job whose last spare replica loses least (same
        measure, ``loss``) loses, stop that replica. Each move strictly raises
        ``sum(weight x speedup)``, AFS' objective, so the moves end.

        Runs after :meth:`grow` (idle capacity is gone first). The stopped replica's
        capacity stays held this cycle for the gaining job (the replica's task still runs
        until its agent stops it); the gaining job grows into it in a later cycle by
        :meth:`grow`, where it then ranks first unless a pending job takes the room.
        Donors are of priority <= the gaining job's, never below their minimum, and never
        jobs grown this cycle; jobs shrunk this cycle do not gain.

        Args:
            jobs: elastic running jobs with replicas missing (``grow.growing``).
            index, placer: the cycle's (allocations stay journaled).
            admit: as in :func:`scheduler.core.grow.grow` (the taker's VC is charged for
                the held replica this cycle).
            cooldown_s: ``Policy.regrow_cooldown_s``: a job resized less than this long
                ago gives no replica (each job is resized at most once per cool-down;
                ``jobs`` are already filtered by it).

        Returns:
            The shrinks made (also appended to :attr:`shrinks`).
        """
        shrunk = self.shrunk
        takers: dict[str, tuple[RunningJob, float, int]] = {}
        for rj in jobs:
            if rj.name in shrunk or rj.name not in self.jobs:
                continue
            n = self.grown.get(rj.name, elastic_replicas(rj))
            if n < sum(r.replicas for r in rj.job.roles if r.elastic):
                takers[rj.name] = (rj, self.jobs[rj.name].weight, n)
        out: list[Shrink] = []
        while takers:
            name, (rj, w, n) = max(
                takers.items(),
                key=lambda kv: (
                    (speedup(kv[1][0].job, kv[1][2] + 1) - speedup(kv[1][0].job, kv[1][2]))
                    * kv[1][1],
                    kv[0],
                ),
            )
            gain = (speedup(rj.job, n + 1) - speedup(rj.job, n)) * w
            donors = [
                d
                for d in self.jobs.values()
                if d.spare
                and d.rj.name != name
                and d.rj.name not in self.grown
                and d.rj.job.priority <= rj.job.priority
                and (d.rj.resized_at is None or self.now >= d.rj.resized_at + cooldown_s)
            ]
            if not donors:
                break
            d = min(donors, key=lambda x: (x.loss(), x.rj.name))
            if not gain > d.loss():
                break
            role = next(r for r in rj.job.roles if r.elastic)
            mark = index.mark()
            p = d.spare.pop()
            i = index.id_of.get(p.node)
            if i is not None:
                r = p.resources
                index.release(i, r.cpu_m, r.memory, r.gpu)
            near = {i: 1} if i is not None else {}
            gp = placer.place_extra(role, 1, near, partial(admit, rj))
            if not gp.tasks:  # the freed room does not fit the taker's replica
                index.rollback(mark)
                d.spare.append(p)
                del takers[name]
                continue
            d.count -= 1
            d.taken.append(p)
            reason = shrunk_reason(shrink_keys((p,)), d.rj.job.vc, rj.job)  # gains more
            sh = Shrink(d.rj.name, (p,), name, reason)
            out.append(sh)
            self.shrinks.append(sh)
            takers[name] = (rj, w, n + 1)
            if n + 1 >= sum(r.replicas for r in rj.job.roles if r.elastic):
                del takers[name]
        return out
