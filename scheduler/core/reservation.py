"""EASY backfill's reservation (Lifka 1995; Mu'alem & Feitelson, IEEE TPDS 2001).

The first job blocked for resources gets the earliest time its gang fits as running jobs
end (by their estimates) and the capacity it needs that nothing frees before then, which
later jobs may not take (the holds). Split out of :mod:`scheduler.core.scheduler` (issue 14
item 5); the cycle decides when to reserve, when to decline and what may use the holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from scheduler.core.gang import GangPlacement, Placer, gang_request
from scheduler.core.history import History, median_residual_s
from scheduler.core.index import NodeIndex
from scheduler.core.model import Job, RunningJob
from scheduler.core.resources import excess, iadd

INF = math.inf


@dataclass(slots=True)
class Reservation:
    """EASY reservation of the first job blocked for resources.

    Attributes:
        job: its name.
        time: shadow time (seconds) at which its gang fits, INF if only when jobs without
            estimates end.
        holds: {node id: [cpu_m, memory, gpu]} that later jobs may not take now, because the
            reservation needs it and nothing releases it before ``time``.
        applied: what is currently taken from the index for the holds.
        starved: the job has been the head longer than ``Policy.backfill_horizon_s``: only jobs
            known to end before a finite ``time`` may still start around it.
        borrowing: the job would run beyond its VC's guarantee (not
            ``VcLedger.within_guarantee``): its holds are opportunistic, so a job within its
            guarantee may take them, by placement or vc-reclaim (the reservation keeps what
            is left).
        nodes: node ids of the planned placement (whose running jobs it waits for).
    """

    job: str
    time: float
    holds: dict[int, list[int]]
    applied: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    starved: bool = False
    borrowing: bool = False
    nodes: tuple[int, ...] = ()

    def apply(self, index: NodeIndex) -> None:
        """Take the holds from ``index`` (as much of each as is free now)."""
        applied = {}
        for i, h in self.holds.items():
            take = (
                max(min(h[0], index.free_cpu[i]), 0),
                max(min(h[1], index.free_mem[i]), 0),
                max(min(h[2], index.free_gpu[i]), 0),
            )
            if any(take):
                index.allocate(i, *take)
                applied[i] = take
        self.applied = applied

    def lift(self, index: NodeIndex) -> None:
        """Give the applied holds back to ``index``."""
        for i, take in self.applied.items():
            index.release(i, *take)
        self.applied = {}


def reserve(
    job: Job,
    index: NodeIndex,
    placer: Placer,
    running: Sequence[RunningJob],
    victims: Collection[str],
    nodes_of: Callable[[RunningJob], dict[int, list[int]]],
    bound_ends: Sequence[tuple[float, str, dict[int, list[int]]]],
    now: float,
    history: History | None = None,
) -> Reservation | None:
    """Earliest time the gang fits as running jobs end (by estimate), and the capacity
    it needs that nothing releases before then (Lifka 1995; Mu'alem & Feitelson 2001).

    Running jobs are released in order of estimated end (victims chosen this cycle end
    now; jobs without an estimate end at INF). Within the INF group the likeliest to end
    first go first: by now + the median further run time of finished jobs that ran as
    long (``history``, :func:`scheduler.core.history.median_residual_s`) where that is
    known, then oldest first. Oldest first alone bets that the job that has run longest
    ends first; under decreasing-hazard run times (GPU clusters: Jeon et al., ATC'19;
    Hu et al., SC'21) it is the likeliest to run longest, and the holds would sit on the
    nodes that free last. The gang is probed at each distinct finite end time, and within
    the INF group after 1, 2, 4, ... releases, so the cost stays near O(jobs released)
    rather than O(running jobs x probes).

    Raises nothing; returns None when the gang fits nowhere even with everything ended.
    """
    events: list[tuple[float, float, float, str, RunningJob | dict[int, list[int]]]] = []
    for rj in running:
        likely = rj.start_time
        if rj.job.name in victims:
            end = now
        elif rj.job.estimated_duration_s is not None:
            end = max(rj.start_time + rj.job.estimated_duration_s, now)
        else:
            end = INF
            rest = median_residual_s(history, now - rj.start_time)
            # known residuals first (by predicted end), then the unknown, oldest first
            likely = now + rest if rest is not None else INF
        events.append((end, likely, rj.start_time, rj.job.name, rj))
    for end, name, per in bound_ends:
        events.append((end, INF, now, name, per))
    events.sort(key=lambda e: (e[0], e[1], e[2], e[3]))
    mark = index.mark()
    need = gang_request(job)
    released: dict[int, list[int]] = {}
    found: GangPlacement | None = None
    time = INF
    in_inf = 0
    next_probe = 1
    for pos, (end, _l, _s, _n, what) in enumerate(events):
        per = what if isinstance(what, dict) else nodes_of(what)
        for i, v in per.items():
            index.release(i, v[0], v[1], v[2])
            acc = released.setdefault(i, [0, 0, 0])
            iadd(acc, v)
        last = pos + 1 == len(events)
        if end == INF:
            in_inf += 1
            if in_inf < next_probe and not last:
                continue
        elif not last and events[pos + 1][0] == end:
            continue  # release everything ending at the same time before probing
        rf = index.ready_free
        if rf[0] < need[0] or rf[1] < need[1] or rf[2] < need[2]:
            continue
        m = index.mark()
        probe = placer.place_gang(job)
        index.rollback(m)
        if isinstance(probe, GangPlacement):
            found, time = probe, end
            break
        if end == INF:
            next_probe = 2 * in_inf
    index.rollback(mark)
    if found is None:
        return None
    holds: dict[int, list[int]] = {}
    for i, v in found.per_node().items():
        rel = released.get(i, (0, 0, 0))
        h = list(excess(v, rel))
        if any(h):
            holds[i] = h
    return Reservation(job.name, time, holds, nodes=tuple(sorted(found.per_node())))


def head_since(job: Job, running: Sequence[RunningJob]) -> float:
    """When ``job`` became the head of the queue, as far as a stateless core can tell: the
    latest start among running jobs submitted no later than it (the jobs ahead of it in
    submit order that started last), else its submit time. Never later than the truth, so
    a starvation bound measured from it holds; measured from the submit time instead, a
    long queue would make every new head "starved" at once and EASY would collapse into
    strict FIFO for good.
    """
    t = job.submit_time
    for rj in running:
        if rj.job.submit_time <= job.submit_time and rj.start_time > t:
            t = rj.start_time
    return t


def starved(
    res: Reservation,
    job: Job,
    index: NodeIndex,
    placer: Placer,
    running: Sequence[RunningJob],
    nodes_of: Callable[[RunningJob], dict[int, list[int]]],
    now: float,
    horizon_s: float | None,
    adaptive: bool,
) -> bool:
    """Whether nothing whose end is unbounded may start around the reserved head any more
    (see ``Reservation.starved``). Two rules, either suffices:

    * ``horizon_s`` (``Policy.backfill_horizon_s``): the head has been the head longer
      than that (:func:`head_since`);
    * ``adaptive``: backfill is what blocks it. The head would fit now if the jobs that
      started after it became the head (:func:`head_since`: jobs started around it) were
      gone; under strict FIFO those jobs would not be running and it would start. From
      then on it waits only for them: it starts by head-since + twice the longest run
      (the jobs that ran when it became head end within one longest run, and so do the
      ones started around it before the rule fired; property-tested). No constant: the
      rule compares the schedule with the FIFO one it replaces (EASY's promise, Lifka
      1995, kept without estimates).

    ``res``'s holds are applied on entry and on return.
    """
    since = head_since(job, running)
    if horizon_s is not None and now - since > horizon_s:
        return True
    if not adaptive:
        return False
    later = [rj for rj in running if rj.start_time > since]
    if not later:
        return False
    res.lift(index)
    mark = index.mark()
    for rj in later:
        for i, v in nodes_of(rj).items():
            index.release(i, v[0], v[1], v[2])
    fits = isinstance(placer.place_gang(job), GangPlacement)
    index.rollback(mark)
    res.apply(index)
    return fits
