"""Victim selection for preemption, as a transactional what-if on the node index.

Modes (``Policy.preemption``, tried in the policy's order; the first that works wins):

    vc-reclaim   the job is itself within its VC's guarantee; victims are *borrowing* jobs
                 of other VCs, as whole jobs: each VC's running jobs in start order (then
                 name) are guaranteed while the VC's cumulative allocation including them
                 stays within its guarantee in every governed component, and borrowing
                 from the first one that exceeds it onward (quota.borrowing_jobs).
                 Guaranteed jobs are never reclaim victims, and a borrowing job whose
                 earlier-started siblings were already taken (this cycle) so that it fits
                 the guarantee again is spared. preemptible=False does not protect a
                 borrowing job. (OpenPAI HiveD guaranteed vs opportunistic jobs, Zhao et
                 al., OSDI 2020; YARN capacity scheduler reclaim of over-capacity work.)
    priority     strictly lower base priority, preemptible, same VC when VCs are enforced.
    queue-order  running jobs the queue order ranks strictly after the job by base priority
                 and the order's own key (LAS level, remaining time; Tiresias, SRTF) --
                 not by aging or submit-time tie-breaks, so equal jobs never evict each other,
                 preemptible, running for at least Policy.preemption_min_runtime_s. When VCs
                 are enforced: jobs of the same VC, and *borrowing* jobs of other VCs (a
                 borrower is opportunistic: its capacity is anybody's who ranks ahead of it;
                 guaranteed jobs of other VCs stay protected), with the same still-borrowing
                 check as vc-reclaim.

Releasing jobs (``RunningJob.releasing``, already preempted or stopped) are never
candidates: they count as victims taken before this cycle. The cycle runs the vc-reclaim
what-if with a borrowing head's EASY holds lifted (those are opportunistic; see
``Reservation.borrowing``); every other what-if sees the holds in force.

Victims are tried least valuable first (lowest priority, then most recently started so the
least work is lost; for queue-order, ranked last first). Candidates are released on the
index in that order, probing whether the gang now fits at doubling intervals; the shortest
fitting prefix is then found by bisection and, when small, each victim is given back if
the gang still fits without it. If the gang never fits, everything is rolled back and
nothing is preempted.

Within one cycle, candidate sets only shrink (victims are taken, binds use capacity, and
jobs come in queue order), so a failed attempt is remembered per (mode, scope, gang shape)
and not repeated for an identical later job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from scheduler.core.gang import GangPlacement, Placer, gang_key
from scheduler.core.index import NodeIndex
from scheduler.core.model import Job, RunningJob, per_node
from scheduler.core.policy import Policy, PreemptionMode
from scheduler.core.queue import OrderContext, QueueOrder, rank_key
from scheduler.core.quota import VcLedger, borrowing_jobs, exceeds, governed_dims
from scheduler.core.resources import (
    ZERO3,
    PrefixSums,
    Triple,
    add,
    fits,
    iadd,
    sub,
    total,
)

MAX_MINIMISE = 16
"""Victim sets larger than this skip the give-back pass (each step is one placement)."""


def _with_last(items: Iterable[RunningJob]) -> Iterator[tuple[RunningJob, bool]]:
    """(item, is_last) pairs, looking one ahead."""
    it = iter(items)
    try:
        prev = next(it)
    except StopIteration:
        return
    for item in it:
        yield prev, False
        prev = item
    yield prev, True


def _least_valuable_first(rj: RunningJob) -> tuple[object, ...]:
    return (rj.job.priority, -rj.start_time, rj.job.name)


class Preemptor:
    """Chooses victims for pending jobs during one cycle.

    Args:
        index, placer, ledger: the cycle's node index, gang placer and VC ledger.
        running: the snapshot's running jobs that are not releasing.
        policy, order, octx: the policy, its queue order and the order context.
        now: current time, seconds.
        releasing: names of the releasing jobs (never victims; they count as taken).
    """

    def __init__(
        self,
        index: NodeIndex,
        placer: Placer,
        ledger: VcLedger,
        running: Sequence[RunningJob],
        policy: Policy,
        order: QueueOrder,
        octx: OrderContext,
        now: float,
        releasing: Iterable[str] = (),
    ) -> None:
        self.index = index
        self.placer = placer
        self.ledger = ledger
        self.policy = policy
        self.order = order
        self.octx = octx
        self.now = now
        self.victims: set[str] = set(releasing)
        self._failed: set[tuple[object, ...]] = set()
        self._per_node: dict[str, dict[int, list[int]]] = {}
        self._running = running
        self._alloc_cache: dict[str, Triple] | None = None
        self._by_value_cache: list[RunningJob] | None = None
        self._scope_cache: dict[
            tuple[object, ...], tuple[list[tuple[Any, RunningJob]], Triple]
        ] = {}
        self._borrowing_cache: dict[str, Any] | None = None
        self._vc_sizes_cache: dict[str, int] | None = None
        self._cursor: dict[tuple[object, ...], int] = {}
        # per VC: [(start_time, name, alloc)] of its borrowing jobs taken as victims so far
        self._taken_by_vc: dict[str, PrefixSums] = {}

    # Built on first use: most cycles preempt nothing and should not pay for them.
    @property
    def _alloc(self) -> dict[str, Triple]:
        if self._alloc_cache is None:
            self._alloc_cache = {rj.job.name: rj.held() for rj in self._running}
        return self._alloc_cache

    @property
    def _by_value(self) -> list[RunningJob]:
        """Running jobs, least valuable first: lowest priority, then most recently started."""
        if self._by_value_cache is None:
            self._by_value_cache = sorted(self._running, key=_least_valuable_first)
        return self._by_value_cache

    @property
    def _vc_sizes(self) -> dict[str, int]:
        """Running jobs per VC."""
        if self._vc_sizes_cache is None:
            sizes: dict[str, int] = {}
            for rj in self._running:
                sizes[rj.job.vc] = sizes.get(rj.job.vc, 0) + 1
            self._vc_sizes_cache = sizes
        return self._vc_sizes_cache

    @property
    def _borrowing(self) -> dict[str, tuple[Triple, Triple, int]]:
        """{borrowing job: (what its VC's earlier-started jobs hold, what it holds, its
        position in its VC's start order)}."""
        if self._borrowing_cache is None:
            self._borrowing_cache = borrowing_jobs(self.ledger, self._running)
        return self._borrowing_cache

    def _still_borrowing(
        self,
        rj: RunningJob,
        local: dict[str, tuple[list[int], list[tuple[int, Triple]]]],
    ) -> bool:
        """Whether a (statically) borrowing job is still borrowing once the victims taken
        so far this cycle and ``local`` (those chosen so far in this selection, per VC: their
        total and (position, alloc) pairs) are gone: removing jobs started before it only
        lowers its VC's cumulative allocation up to it, possibly back within guarantee.
        O(1) unless that is close to happening, then O(log n + len(local)) (n: the VC's
        running jobs)."""
        before, a, pos = self._borrowing[rj.job.name]
        vc = rj.job.vc
        g = self.ledger.guarantee_of(vc)
        dims = governed_dims(g)
        cum = add(before, a)
        taken = self._taken_by_vc.get(vc)
        mine = local.get(vc)
        if taken is None and mine is None:
            return exceeds(cum, g, dims)
        # Fast path: still over the guarantee even if every taken job had started before it.
        low = sub(sub(cum, taken.total if taken else ZERO3), mine[0] if mine else ZERO3)
        if exceeds(low, g, dims):
            return True
        if taken is not None:
            cum = sub(cum, taken.before(pos))
        if mine is not None:
            cum = sub(cum, total(oa for opos, oa in mine[1] if opos < pos))
        return exceeds(cum, g, dims)

    def forget_failures(self) -> None:
        """Drop the memo of what-ifs that failed: free capacity grew (a nomination was
        lifted), so they may succeed now."""
        self._failed.clear()

    def nodes_of(self, rj: RunningJob) -> dict[int, list[int]]:
        """{node id: [cpu_m, memory, gpu]} that running job ``rj`` holds (memoised)."""
        v = self._per_node.get(rj.job.name)
        if v is None:
            v = self._per_node[rj.job.name] = per_node(rj.placements, self.index.id_of)
        return v

    def may_ever_take(self, job: Job, rj: RunningJob) -> bool:
        """Whether ``rj`` may become a victim of ``job`` by queue order as their LAS ranks
        change: preemptible, of no higher priority class (the class orders first), and
        of ``job``'s VC or borrowing now (or VCs not enforced). Guaranteed jobs of other
        VCs, unpreemptible jobs and higher classes never are."""
        scope = job.vc if self.policy.vc_quota else None
        return rj.job.priority <= job.priority and self._in_queue_order_scope(rj, scope)

    def _in_queue_order_scope(self, rj: RunningJob, scope: str | None) -> bool:
        """Whether ``rj`` may ever be a queue-order victim of jobs of ``scope`` (a VC, or
        None for any): preemptible, and of that VC or borrowing (guaranteed jobs of
        other VCs stay protected)."""
        if not rj.job.preemptible:
            return False
        return scope is None or rj.job.vc == scope or rj.job.name in self._borrowing

    # -- candidates -----------------------------------------------------------------------
    def _scoped(
        self, mode: PreemptionMode, scope: str | None
    ) -> tuple[list[tuple[Any, RunningJob]], Triple]:
        """Running jobs that may ever be ``mode`` victims for jobs of ``scope`` (a VC, or
        None for any), in victim order, with the sum of their allocations (built once per
        cycle; the per-job threshold and the victims taken so far are applied lazily)."""
        key = (mode, scope)
        cached = self._scope_cache.get(key)
        if cached is not None:
            return cached
        min_run = self.policy.preemption_min_runtime_s
        items: list[
            tuple[Any, RunningJob]
        ]  # (rank: None, a priority or a rank_key tuple, by mode; job)
        if mode is PreemptionMode.VC_RECLAIM:
            borrowing = self._borrowing
            jobs = [rj for rj in self._running if rj.job.vc != scope and rj.job.name in borrowing]
            # Least valuable first; "most recently started" breaks start-time ties by the
            # name in reverse, the exact reverse of the classification's (start, name)
            # order, so that within a priority a VC's borrowers go latest first and taking
            # one never turns an earlier-started borrower back into a guaranteed job.
            jobs.sort(key=lambda rj: rj.job.name, reverse=True)
            jobs.sort(key=lambda rj: (rj.job.priority, -rj.start_time))
            items = [(None, rj) for rj in jobs]
        elif mode is PreemptionMode.PRIORITY:
            items = [
                (rj.job.priority, rj)
                for rj in self._by_value
                if rj.job.preemptible and (scope is None or rj.job.vc == scope)
            ]
        elif mode is PreemptionMode.QUEUE_ORDER:
            items = [
                (rank_key(self.order, rj.job, self.octx, rj), rj)
                for rj in self._by_value
                if self._in_queue_order_scope(rj, scope) and self.now - rj.start_time >= min_run
            ]
            # ranked last first; among equals the most recently started first
            items.sort(key=lambda kr: (kr[0], kr[1].start_time, kr[1].job.name), reverse=True)
        else:
            raise ValueError(f"Policy.preemption: unknown mode {mode!r}")
        alloc = self._alloc
        cached = self._scope_cache[key] = (items, total(alloc[rj.job.name] for _, rj in items))
        return cached

    def candidates(self, mode: PreemptionMode, job: Job, req: Triple) -> Iterator[RunningJob]:
        """Victim candidates for ``job`` under ``mode``, least valuable first (lazy)."""
        key: tuple[PreemptionMode, str | None]
        if mode is PreemptionMode.VC_RECLAIM:
            if not self.ledger.within_guarantee(job, req):
                return
            key = (mode, job.vc)
        else:
            key = (mode, job.vc if self.policy.vc_quota else None)
        items, _ = self._scoped(*key)
        taken = self.victims
        # Victims are taken roughly in this order and never given back within a cycle:
        # skip the leading run of taken ones once (the lists are sorted, so the early
        # returns below see the same first untaken item either way).
        start = self._cursor.get(key, 0)
        while start < len(items) and items[start][1].job.name in taken:
            start += 1
        self._cursor[key] = start
        if start:
            items = items[start:]
        if mode is PreemptionMode.VC_RECLAIM:
            alloc = self._alloc
            for _, rj in items:
                if rj.job.name in taken:
                    continue
                a = alloc[rj.job.name]
                # releasing it must free something the job asks for
                if (a[0] and req[0]) or (a[1] and req[1]) or (a[2] and req[2]):
                    yield rj
        elif mode is PreemptionMode.PRIORITY:
            for prio, rj in items:
                if prio >= job.priority:
                    return
                if rj.job.name not in taken:
                    yield rj
        else:
            mine = rank_key(self.order, job, self.octx)
            for k, rj in items:
                if not k > mine:
                    return
                if rj.job.name not in taken:
                    yield rj

    # -- selection ------------------------------------------------------------------------
    def select(
        self, mode: PreemptionMode, job: Job, req: Triple
    ) -> tuple[list[RunningJob], GangPlacement, dict[int, list[int]]] | None:
        """Victims whose removal lets ``job``'s gang fit, or None (index unchanged).

        Returns (victims, placement, released): the gang's what-if placement (rolled back
        on the index) and what the victims release per node, ``{node id: [cpu_m, memory,
        gpu]}``.
        """
        if mode is PreemptionMode.VC_RECLAIM and not self.ledger.within_guarantee(job, req):
            return None  # a borrowing job reclaims nothing (and costs nothing to refuse)
        scope = job.vc if self.policy.vc_quota or mode is PreemptionMode.VC_RECLAIM else None
        memo = None
        if not self.order.dynamic:
            # Jobs arrive in queue order, so for equal memo keys a later job has no more
            # candidates than an earlier one (see the module docstring).
            rank: object
            if mode is PreemptionMode.QUEUE_ORDER:
                rank = (job.priority, self.order.key(job, self.octx, None))
            elif mode is PreemptionMode.PRIORITY:
                rank = job.priority
            else:
                rank = None
            memo = (mode, scope, rank, gang_key(job))
            if memo in self._failed:
                return None
        # Necessary condition, cheap: free capacity plus all that the scope's jobs hold.
        _, held = self._scoped(mode, scope)
        rf = self.index.ready_free
        if not fits(req, add(rf, held)):
            result = None
        else:
            result = self._select(mode, job, req, self.candidates(mode, job, req))
        if result is None and memo is not None:
            self._failed.add(memo)
        return result

    def _fits(self, job: Job) -> GangPlacement | None:
        index = self.index
        m = index.mark()
        probe = self.placer.place_gang(job)
        index.rollback(m)
        return probe if isinstance(probe, GangPlacement) else None

    def _select(
        self,
        mode: PreemptionMode,
        job: Job,
        req: Triple,
        cands: Iterator[RunningJob],
    ) -> tuple[list[RunningJob], GangPlacement, dict[int, list[int]]] | None:
        index = self.index
        local: dict[str, tuple[list[int], list[tuple[int, Triple]]]] = {}
        mark = index.mark()
        chosen: list[RunningJob] = []
        found: GangPlacement | None = None
        next_probe = 1
        last_fail = 0
        for rj, is_last in _with_last(cands):
            # A job borrowing in the snapshot may be back within guarantee once earlier-
            # started jobs of its VC are gone (taken before, or chosen above): spare it.
            # Later decisions only see more victims, so every prefix of ``chosen`` (the
            # bisection) and every subset the give-back pass keeps stays valid: giving a
            # victim back only raises the cumulative allocation of the jobs after it.
            if rj.job.vc != job.vc and (
                mode is PreemptionMode.VC_RECLAIM
                or (mode is PreemptionMode.QUEUE_ORDER and self.policy.vc_quota)
            ):
                if not self._still_borrowing(rj, local):
                    continue
                lt = local.get(rj.job.vc)
                if lt is None:
                    lt = local[rj.job.vc] = ([0, 0, 0], [])
                a = self._alloc[rj.job.name]
                iadd(lt[0], a)
                lt[1].append((self._borrowing[rj.job.name][2], a))
            for i, r in self.nodes_of(rj).items():
                index.release(i, r[0], r[1], r[2])
            chosen.append(rj)
            if not fits(req, index.ready_free):
                continue
            if len(chosen) < next_probe and not is_last:
                continue
            found = self._fits(job)
            if found is not None:
                break
            last_fail = len(chosen)
            next_probe = 2 * len(chosen)
        if found is None:
            index.rollback(mark)
            return None
        # Shortest fitting prefix, by bisection over (last_fail, len(chosen)].
        lo, hi = last_fail, len(chosen)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            index.rollback(mark)
            self._release(chosen[:mid])
            probe = self._fits(job)
            if probe is not None:
                hi, found = mid, probe
            else:
                lo = mid
        chosen = chosen[:hi]
        index.rollback(mark)
        self._release(chosen)
        # Give back victims that turn out not to be needed, most valuable first.
        if len(chosen) <= MAX_MINIMISE:
            spared: set[str] = set()
            for rj in reversed(chosen[:-1]):
                m3 = index.mark()
                for i, r in self.nodes_of(rj).items():
                    index.allocate(i, r[0], r[1], r[2])
                probe = self._fits(job)
                if probe is not None:
                    found = probe
                    spared.add(rj.job.name)
                else:
                    index.rollback(m3)
            if spared:
                chosen = [rj for rj in chosen if rj.job.name not in spared]
        index.rollback(mark)
        released: dict[int, list[int]] = {}
        for rj in chosen:
            for i, r in self.nodes_of(rj).items():
                iadd(released.setdefault(i, [0, 0, 0]), r)
        for rj in chosen:
            self.victims.add(rj.job.name)
            if rj.job.name in self._borrowing:
                t = self._taken_by_vc.get(rj.job.vc)
                if t is None:
                    t = self._taken_by_vc[rj.job.vc] = PrefixSums(self._vc_sizes[rj.job.vc])
                t.add(self._borrowing[rj.job.name][2], self._alloc[rj.job.name])
        return chosen, found, released

    def _release(self, jobs: Sequence[RunningJob]) -> None:
        index = self.index
        for rj in jobs:
            for i, r in self.nodes_of(rj).items():
                index.release(i, r[0], r[1], r[2])
