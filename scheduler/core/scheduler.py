"""One scheduling cycle: ``schedule(snapshot, policy, now) -> Decision``.

Pipeline (the order matters; see comments in :meth:`_Cycle.consider`):

    Snapshot ──> NodeIndex (free capacity by node class / free GPUs / free cpu)
             ──> VcLedger  (usage, guarantee, max, pending demand per VC)
             ──> queue order (registry: priority-fifo, fifo, drf, las, srtf) + aging
    for each pending job, in order (at most Policy.max_jobs_per_cycle):
        strict order blocked?      -> QUEUE_ORDER
        VC admission               -> UNKNOWN_VC / VC_MAX / VC_QUOTA
        gang placement (filters -> scorers -> transactional gang), around the EASY
          reservation's holds                                     -> Bind
        else preemption what-if (vc-reclaim, priority, queue-order) -> Preemption + PREEMPTING
        else reason (NO_FIT_EVER / INSUFFICIENT_RESOURCES / GANG_INCOMPLETE / RESERVATION),
          and the first job blocked for resources gets the EASY reservation
    then running gangs placed at min_available get their other replicas as they fit (grow.py)
    with Policy.elastic: a blocked job first tries shrinking running elastic jobs
      (-> Shrink + RESIZING), before preemption; idle capacity last grows elastic jobs by
      marginal gain (elastic.py)
    ──> Decision(binds, preemptions, pending reasons, version)

A job that preempts is reported pending with kind PREEMPTING and is bound in a later cycle,
after its victims have released: binding it in the same cycle would put two allocations on
the same GPUs in the ledger until the victims stop. Its claim on capacity that is free now
is held for the rest of the cycle so that later jobs cannot take it.

Pure: no I/O, no clock (``now`` is an argument), no randomness; node and job order in the
snapshot only matter as tie-breakers, and identical inputs give identical Decisions.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator

from scheduler.core.adapt import adapt
from scheduler.core.elastic import ElasticStage, is_elastic
from scheduler.core.failure import failure_reason, invalid_job
from scheduler.core.gang import GangFailure, GangPlacement, Placer, gang_key, gang_request
from scheduler.core.grow import grow, growing
from scheduler.core.index import NodeIndex
from scheduler.core.model import (
    Bind,
    Decision,
    Job,
    Node,
    NodeState,
    PendingReason,
    Preemption,
    ReasonKind,
    RunningJob,
    Snapshot,
    TaskPlacement,
)
from scheduler.core.plugins import check_plugin_names
from scheduler.core.policy import Backfill, Policy, PreemptionMode
from scheduler.core.pool import ReleasingPool
from scheduler.core.preemption import Preemptor
from scheduler.core.queue import OrderContext, full_key, queue_order
from scheduler.core.quota import VcLedger
from scheduler.core.reasons import job_ref, jobs_ref, preempted_reason, preemption_phrase, reason
from scheduler.core.reservation import Reservation, reserve, starved
from scheduler.core.resources import Triple, as_triple, iadd

INF = math.inf


def schedule(snapshot: Snapshot, policy: Policy, now: float) -> Decision:
    """Decide which pending gangs to bind and which running jobs to preempt.

    Args:
        snapshot: nodes, VCs, pending and running jobs (see :class:`Snapshot`).
        policy: queue order, plugins, backfill, VC and preemption settings (data).
        now: current time in seconds (same clock as submit/start times).

    Returns:
        A :class:`Decision`: binds (whole gangs), preemptions, and a reason for every
        pending job not bound. Deterministic for equal inputs.

    Raises:
        ValueError: a policy naming unknown plugins, or a snapshot with duplicate node or
            pending job names.
    """
    if not snapshot.pending and not growing(snapshot.running):
        return Decision(version=snapshot.version)
    return _Cycle(snapshot, adapt(policy, snapshot.history, snapshot.vcs), now).run()


class _Cycle:
    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.now = now
        self.order = queue_order(policy.queue_order)
        check_plugin_names(policy.filters, policy.scorers)
        names = set()
        for j in snapshot.pending:
            if j.name in names:
                raise ValueError(f"Snapshot.pending: job {j.name!r} appears more than once")
            names.add(j.name)
        sel_keys = sorted({k for j in snapshot.pending for r in j.roles for k in r.node_selector})

        if sel_keys:

            def class_key(n: Node, _keys: list[str] = sel_keys) -> Hashable:
                labels = n.labels
                return (n.state, n.gpu_model, tuple([labels.get(k) for k in _keys]))

        else:

            def class_key(n: Node, _keys: list[str] = sel_keys) -> Hashable:
                return (n.state, n.gpu_model)

        self.index = NodeIndex(snapshot.nodes, class_key)
        self.placer = Placer(self.index, policy)
        self.ledger = VcLedger(
            snapshot.vcs,
            snapshot.running,
            snapshot.pending,
            snapshot.nodes,
            policy.vc_quota,
            track_usage=policy.vc_quota or self.order.dynamic,
        )
        self._ready_classes = [c.cid for c in self.index.classes if c.rep.state is NodeState.READY]
        self.octx = OrderContext(now, policy, self.ledger.share)
        self.binds: list[Bind] = []
        self.preemptions: list[Preemption] = []
        self.reasons: dict[str, PendingReason] = {}
        self.nominations: dict[str, tuple[TaskPlacement, ...]] = {}
        releasing = [rj for rj in snapshot.running if rj.releasing]
        self.preemptor = Preemptor(
            self.index,
            self.placer,
            self.ledger,
            [rj for rj in snapshot.running if not rj.releasing] if releasing else snapshot.running,
            policy,
            self.order,
            self.octx,
            now,
            releasing=[rj.job.name for rj in releasing],
        )
        # Capacity releasing jobs still hold and nominated holds (pool.py).
        self.pool = ReleasingPool(self.index, releasing, self.preemptor.nodes_of)
        if snapshot.nominations:
            self.pool.hold_nominations(snapshot.nominations, names)
        self.elastic = (
            ElasticStage(snapshot.running, now, snapshot.history if policy.adaptive else None)
            if policy.elastic
            else None
        )
        self.bound_ends: list[tuple[float, str, dict[int, list[int]]]] = []
        self.reservation: Reservation | None = None
        self.declined = False  # EASY declined an unbounded reservation (see _reserve)
        self.strict_blocker: str | None = None
        # every job's VC, so that a reason's message names a job of another VC only as "a
        # job of VC <vc>" (reasons.job_ref): the message is stored on the job and shown to
        # its owner, who must not learn another tenant's job names. The details keep the
        # names (structured facts for the loop, the simulator and tests; never stored or
        # served: the commit stores kind and message only).
        self._vc_of: dict[str, str] = {j.name: j.vc for j in snapshot.pending}
        self._vc_of.update((rj.job.name, rj.job.vc) for rj in snapshot.running)
        # Within a cycle free capacity only shrinks (binds, claims, holds), so a gang shape
        # that failed once fails again: remember it, per capacity view ("held" = with the
        # reservation's holds in force). Reasons are reused while nothing changed (epoch).
        self._failed: dict[tuple[object, ...], tuple[int, GangFailure]] = {}
        self._reasons_by_shape: dict[tuple[object, ...], tuple[int, PendingReason]] = {}
        self.epoch = 0

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> Decision:
        limit = self.policy.max_jobs_per_cycle
        examined = 0
        skipped = None
        blocked: dict[str, PendingReason] = {}  # per VC: the reason names the blocker
        for job in self._ordered():
            if limit is not None and examined >= limit:
                if skipped is None:  # one shared (immutable) reason for all of them
                    skipped = reason(
                        ReasonKind.CYCLE_LIMIT,
                        f"not examined this cycle (at most {limit} jobs per cycle)",
                        limit=limit,
                    )
                self.reasons[job.name] = skipped
                continue
            examined += 1
            if self.strict_blocker is not None:
                # strict FIFO: everything after the blocker waits; one shared reason (a
                # long FIFO queue otherwise spends most of the cycle building them)
                if job.vc not in blocked:
                    blocker = self.strict_blocker
                    blocker_vc = self._vc_of.get(blocker)
                    blocked[job.vc] = reason(
                        ReasonKind.QUEUE_ORDER,
                        f"waiting behind {job_ref(blocker, blocker_vc, job.vc)} "
                        "(strict queue order)",
                        blocked_by=blocker,
                    )
                self.reasons[job.name] = blocked[job.vc]
                continue
            self.consider(job)
        to_grow = growing(self.snapshot.running)
        el = self.elastic
        if el is None:
            grows = grow(to_grow, self.index, self.placer, self._admit_one)
        else:
            plain = [rj for rj in to_grow if not is_elastic(rj.job)]
            grows = grow(plain, self.index, self.placer, self._admit_one)
            shrunk = el.shrunk
            cool = self.policy.regrow_cooldown_s
            elastic = [
                rj
                for rj in to_grow
                if is_elastic(rj.job)
                and rj.name not in shrunk
                and (rj.resized_at is None or self.now >= rj.resized_at + cool)
            ]
            grows += el.grow(elastic, self.index, self.placer, self._admit_one)
            el.rebalance(elastic, self.index, self.placer, self._admit_one, cool)
        return Decision(
            binds=tuple(self.binds),
            grows=tuple(grows),
            shrinks=tuple(el.shrinks) if el is not None else (),
            preemptions=tuple(self.preemptions),
            pending=self.reasons,
            version=self.snapshot.version,
            nominations=self.nominations,
        )

    def _ordered(self) -> Iterator[Job]:
        order, ctx = self.order, self.octx
        pending = self.snapshot.pending
        if not order.dynamic:
            yield from sorted(pending, key=lambda j: full_key(order, j, ctx))
            return
        # Dynamic (DRF): within a VC the order is fixed; across VCs re-pick after each job,
        # because binds change the VCs' shares.
        per_vc: dict[str, list[Job]] = {}
        for j in pending:
            per_vc.setdefault(j.vc, []).append(j)
        queues = [
            sorted(per_vc[vc], key=lambda j: full_key(order, j, ctx)) for vc in sorted(per_vc)
        ]
        positions = [0] * len(queues)  # next job of each VC's queue
        while True:
            best: int | None = None
            best_key: tuple[object, ...] | None = None
            for q, jobs in enumerate(queues):
                pos = positions[q]
                if pos < len(jobs):
                    k = full_key(order, jobs[pos], ctx)
                    if best_key is None or k < best_key:
                        best, best_key = q, k
            if best is None:
                return
            job = queues[best][positions[best]]
            positions[best] += 1
            yield job

    def _block(self) -> int:
        """Most GPUs free on one ready node now."""
        i = self.index.largest_free(self._ready_classes)
        return max(self.index.free_gpu[i], 0) if i is not None else 0

    # -- capacity coming free (pool.py) ---------------------------------------------------
    def _lift_nomination(self, name: str) -> None:
        """Give the job back what was held for it, just before it is considered. Free
        capacity grows, so what was memoised as failing this cycle may fit now."""
        if self.pool.lift(name):
            self.epoch += 1
            self._failed.clear()
            self.preemptor.forget_failures()

    def _try_wait_release(self, job: Job, req: Triple) -> bool:
        """A job that fits once releasing jobs are gone waits for them (PREEMPTING,
        nominated) instead of preempting more: the part of its what-if placement that is
        free now is held, the rest is taken from the pool."""
        mark = self.pool.release_live()
        if mark is None:
            return False
        probe = self.placer.place_gang(job)
        self.index.rollback(mark)
        if not isinstance(probe, GangPlacement):
            return False
        self.epoch += 1
        waits = self.pool.claim(probe.per_node())
        self.ledger.charge(job.vc, req, job)
        self.nominations[job.name] = probe.placements(job, self.index.names)
        names = jobs_ref([(w, self._vc_of.get(w)) for w in waits], job.vc)
        self.reasons[job.name] = reason(
            ReasonKind.PREEMPTING,
            f"waiting for {names} to release (already stopping); binds once they do",
            victims=waits,
            mode="releasing",
        )
        return True

    # -- one job --------------------------------------------------------------------------
    def consider(self, job: Job) -> None:
        name = job.name
        req = gang_request(job)
        if name in self.pool.nominated:
            self._lift_nomination(name)
        bad = invalid_job(job)
        if bad is not None:
            self.ledger.drop_demand(job.vc, req, job)
            self.reasons[name] = reason(ReasonKind.NO_FIT_EVER, f"invalid job: {bad}")
            return
        # VC admission first: a job its VC may not run now must neither take capacity nor
        # get a reservation nor preempt anyone.
        why = self.ledger.admit(job, req, self.index.ready_free, self._block)
        if why is not None:
            if why.kind is ReasonKind.UNKNOWN_VC:
                self.ledger.drop_demand(job.vc, req, job)
            self.reasons[name] = why
            return
        result, held_back = self._try_place(job)
        if isinstance(result, GangPlacement):
            self._bind(job, result)
            return
        # Blocked only by the reservation: wait for it rather than preempt around it.
        if held_back:
            res = self.reservation
            assert res is not None
            when = "" if res.time == INF else f" (due at t={res.time:.0f}s)"
            res_vc = self._vc_of.get(res.job)
            self.reasons[name] = reason(
                ReasonKind.RESERVATION,
                f"waiting behind reservation for {job_ref(res.job, res_vc, job.vc)}{when}",
                blocked_by=res.job,
                reservation_time=res.time,
            )
            return
        if self.elastic is not None and self._try_shrink(job, req):
            return
        if self.policy.preemption and (
            self._try_wait_release(job, req) or self._try_preempt(job, req)
        ):
            return
        assert result is not None  # None only when held back (handled above)
        shape = gang_key(job)
        cached = self._reasons_by_shape.get(shape)
        if cached is not None and cached[0] == self.epoch:
            why = cached[1]
        else:
            why = failure_reason(self.index, self.placer, job, result)
            self._reasons_by_shape[shape] = (self.epoch, why)
        if why.kind is ReasonKind.NO_FIT_EVER:
            self.ledger.drop_demand(job.vc, req, job)
            self.reasons[name] = why
            return
        if self.policy.backfill is Backfill.EASY:
            if self.reservation is None and not self.declined:
                res = self.reservation = self._reserve(job)
                if res is not None:
                    drain = self._ranked(res)  # kept under LAS: no FIFO to starve against
                    res.starved = not drain and starved(
                        res, job, self.index, self.placer, self.snapshot.running,
                        self.preemptor.nodes_of, self.now, self.policy.backfill_horizon_s,
                        self.policy.adaptive,
                    )  # fmt: skip
                    self.epoch += 1
                    t = res.time
                    if t != INF:
                        extra = f"; reserved to start by t={t:.0f}s"
                    elif drain:
                        names = ", ".join(self.index.names[i] for i in res.nodes)
                        extra = f"; holding what frees on {names} for it"
                    else:
                        extra = ""
                    why = reason(why.kind, why.message + extra, **why.details, reserved_at=t)
        elif self.policy.strict_order:
            self.strict_blocker = name
        self.reasons[name] = why

    def _bind(self, job: Job, gp: GangPlacement) -> None:
        self.epoch += 1
        placements = gp.placements(job, self.index.names)
        self.binds.append(Bind(job.name, placements, gp.scores))
        self.ledger.charge(job.vc, as_triple(gp.alloc), job)
        est = job.estimated_duration_s
        end = self.now + est if est is not None else INF
        self.bound_ends.append((end, job.name, gp.per_node()))

    def _admit_one(self, rj: RunningJob, req: Triple) -> bool:
        """One more task of running job ``rj`` (:mod:`scheduler.core.grow`): admitted and
        charged against its VC, or False."""
        if self.ledger.admit(rj.job, req, self.index.ready_free, self._block) is not None:
            return False
        self.ledger.charge(rj.vc, req)
        return True

    def _try_place(self, job: Job) -> tuple[GangPlacement | GangFailure | None, bool]:
        """Place with the reservation's holds in force. Returns (result, held_back) where
        held_back says the gang would have fit without the holds, or that a starved
        reservation holds it back (result None, not tried)."""
        res = self.reservation
        shape = gang_key(job)
        if res is None:
            return self._place_memo(job, shape, False), False
        est = job.estimated_duration_s
        if res.time != INF and est is not None and self.now + est <= res.time:
            # EASY: a job that ends before the shadow time cannot delay the reservation.
            res.lift(self.index)
            result = self._place_memo(job, shape, False)
            res.apply(self.index)
            return result, False
        # A borrowing head's holds are opportunistic (HiveD): a job within its VC's
        # guarantee takes them when nothing else fits it, as reclaim may take a
        # borrower's capacity (lending protection admitted the head on that promise).
        guaranteed = res.borrowing and self.ledger.within_guarantee(job, gang_request(job))
        if res.starved and not guaranteed:
            # Starvation guard (reservation.starved): nothing whose end is
            # unbounded starts around it any more (strict FIFO behind it from now on).
            return None, True
        result = self._place_memo(job, shape, True)
        if isinstance(result, GangPlacement):
            return result, False
        if (shape, False) in self._failed:
            return result, False  # fails even without the holds
        res.lift(self.index)
        if guaranteed:
            result = self._place_memo(job, shape, False)
            res.apply(self.index)
            return result, False
        mark = self.index.mark()
        probe = self.placer.place_gang(job)
        self.index.rollback(mark)
        res.apply(self.index)
        if isinstance(probe, GangFailure):
            self._failed[(shape, False)] = (self.epoch, probe)
        return result, isinstance(probe, GangPlacement)

    def _place_memo(
        self, job: Job, shape: tuple[object, ...], held: bool
    ) -> GangPlacement | GangFailure:
        """place, skipping gangs known to fail. A failure recorded in an earlier epoch still
        proves the gang fails now, but its details (how many tasks fit) may be stale, so
        the placement is re-run once per epoch for an exact reason."""
        known = self._failed.get((shape, False))
        if known is None and held:
            known = self._failed.get((shape, True))
        if known is not None and known[0] == self.epoch:
            return known[1]
        result = self._place_charging(job)
        if isinstance(result, GangFailure):
            self._failed[(shape, held)] = (self.epoch, result)
        return result

    def _place_charging(self, job: Job) -> GangPlacement | GangFailure:
        """place_gang, admitting replicas beyond min_available against the VC ledger as if
        the gang were already charged; usage is restored afterwards (_bind charges what was
        actually placed)."""
        if not any(r.replicas > r.gang_min for r in job.roles):
            return self.placer.place_gang(job)
        ledger = self.ledger
        added = [0, 0, 0]

        def charge(req: Triple) -> None:
            ledger.adjust_usage(job.vc, req)
            iadd(added, req)

        def ok(req: Triple) -> bool:
            if ledger.admit(job, req, self.index.ready_free, self._block) is not None:
                return False
            charge(req)
            return True

        charge(gang_request(job))
        try:
            return self.placer.place_gang(job, ok)
        finally:
            ledger.adjust_usage(job.vc, as_triple(added), -1)

    # -- EASY reservation -----------------------------------------------------------------
    def _reserve(self, job: Job) -> Reservation | None:
        """The EASY reservation for ``job`` with its holds applied, or None (no placement
        even when everything ends, or declined: see :func:`reservation.reserve`)."""
        res = reserve(
            job,
            self.index,
            self.placer,
            self.snapshot.running,
            self.preemptor.victims,
            self.preemptor.nodes_of,
            self.bound_ends,
            self.now,
            self.snapshot.history if self.policy.adaptive else None,
        )
        if res is None:
            return None
        res.borrowing = not self.ledger.within_guarantee(job, gang_request(job))
        if self._ranked(res) and self._rank_clears(job, res):
            # No bounded shadow time: holding idle capacity for an unknown time is what
            # makes backfill hurt. Where queue-order preemption is on, the blocked job is
            # protected by its queue rank instead (under LAS the jobs in its way fall to
            # lower queues as they run, and it preempts them), so no holds are taken;
            # unless a job in its way never becomes its victim (another VC's guaranteed
            # job): then only a drain frees those nodes, and the holds stay.
            self.declined = True
            return None
        res.apply(self.index)
        return res

    def _ranked(self, res: Reservation) -> bool:
        """An unbounded reservation under queue-order preemption: declined where the rank
        clears the way, else kept as a drain (see _reserve)."""
        return res.time == INF and PreemptionMode.QUEUE_ORDER in self.policy.preemption

    def _rank_clears(self, job: Job, res: Reservation) -> bool:
        """Whether ``job``'s LAS rank alone can clear its way on the reservation's nodes:
        every running job there may become its queue-order victim
        (:meth:`Preemptor.may_ever_take`)."""
        nodes = set(res.nodes)
        for rj in self.snapshot.running:
            if rj.releasing or rj.name == job.name:
                continue
            if nodes.isdisjoint(self.preemptor.nodes_of(rj)):
                continue
            if not self.preemptor.may_ever_take(job, rj):
                return False
        return True

    # -- elastic shrink (elastic.py) ------------------------------------------------------
    def _try_shrink(self, job: Job, req: Triple) -> bool:
        """Shrink running elastic jobs until ``job``'s gang fits; on success hold its
        placement, charge its VC, nominate it and report it RESIZING."""
        assert self.elastic is not None
        found = self.elastic.shrink_for(job, self.index, self.placer)
        if found is None:
            return False
        shrinks, gp = found
        self.epoch += 1
        self.ledger.charge(job.vc, req, job)
        self.nominations[job.name] = gp.placements(job, self.index.names)
        vc_of = {rj.name: rj.job.vc for rj in self.snapshot.running}
        names = jobs_ref([(s.job, vc_of.get(s.job)) for s in shrinks], job.vc)
        self.reasons[job.name] = reason(
            ReasonKind.RESIZING,
            f"shrinking elastic {names}; binds once their replicas stop",
            resized=[s.job for s in shrinks],
        )
        return True

    # -- preemption -----------------------------------------------------------------------
    def _try_preempt(self, job: Job, req: Triple) -> bool:
        """Try each enabled preemption mode; on success record the victims, hold the part
        of the gang's what-if placement that is free now (so later jobs this cycle leave
        it), charge the job to its VC and report it PREEMPTING. Capacity releasing jobs
        still hold and nobody has claimed counts as coming free: the what-if uses it first,
        so that no more is preempted than needed beside it."""
        index = self.index
        res = self.reservation
        for mode in self.policy.preemption:
            # a borrowing head's EASY holds are opportunistic: reclaim may take them (HiveD)
            lift = res is not None and res.borrowing and mode is PreemptionMode.VC_RECLAIM
            if lift and res is not None:
                res.lift(index)
            mark = self.pool.release_live()
            found = self.preemptor.select(mode, job, req)
            if mark is not None:
                index.rollback(mark)
            if found is not None:
                self.pool.claim(found[1].per_node(), found[2])
            if lift and res is not None:
                res.apply(index)  # what the nomination left free
            if found is None:
                continue
            chosen, placement, _ = found
            self.epoch += 1
            self.ledger.charge(job.vc, req, job)
            self.nominations[job.name] = placement.placements(job, index.names)
            why = preemption_phrase(mode, job)
            for rj in chosen:
                self.preemptions.append(
                    Preemption(rj.job.name, job.name, preempted_reason(rj.job.vc, job, mode))
                )
            names = jobs_ref([(rj.job.name, rj.job.vc) for rj in chosen], job.vc)
            self.reasons[job.name] = reason(
                ReasonKind.PREEMPTING,
                f"preempting {names} ({why}); binds once they release",
                victims=[rj.job.name for rj in chosen],
                mode=str(mode),
            )
            return True
        return False
