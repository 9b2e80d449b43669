"""Virtual-cluster accounting: guarantee, max cap, borrowing and what may be reclaimed.

Semantics (OpenPAI virtual clusters / HiveD / YARN capacity scheduler):

- **usage** of a VC is what its running jobs hold (releasing ones left out), plus what
  this cycle binds or claims.
- **guarantee**: a VC always gets this much back when it has pending work. Only the
  components a VC's guarantee sets (> 0) are governed by it; a guarantee of all zeros
  governs every component (the VC owns nothing). E.g. ``{gpu: 8}`` says nothing about cpu.
- **max**: hard cap including borrowed capacity. A zero component of ``max`` means "no cap
  on that component" (``max: {gpu: 32}`` caps GPUs only); an all-zero ``max`` caps all.
- **borrowing**: beyond its guarantee (in a governed component) a VC may use idle capacity
  when ``can_borrow``, but not capacity that other VCs with pending work need to reach
  their own guarantees (that would be preempted back at once); only pending jobs whose
  widest task fits the largest free GPU block count, since the others cannot use idle
  capacity now (they reclaim).
- **guaranteed and borrowing jobs** (whole jobs; OpenPAI HiveD's guaranteed vs
  opportunistic jobs, Zhao et al., "HiveD: Sharing a GPU Cluster for Deep Learning with
  Guarantees", OSDI 2020, with the VC's running jobs in start order as in YARN's capacity
  scheduler): a VC's running jobs are ordered by start time (then name); a job is
  *guaranteed* while the VC's cumulative allocation including it stays within the
  guarantee in every governed component, and *borrowing* from the first job that exceeds
  it onward (see :func:`borrowing_jobs`). A VC with an all-zero guarantee owns nothing, so
  every job of it that holds anything is borrowing. Admission agrees: a job that keeps its
  VC within guarantee in every governed component borrows nothing and is admitted even
  when the VC may not borrow.
- **reclaim**: a pending job that is itself within guarantee (:meth:`VcLedger.within_guarantee`)
  may preempt borrowing jobs of other VCs, as whole jobs; guaranteed jobs are never
  reclaim victims (see ``preemption.py``).

When ``Policy.vc_quota`` is False none of this applies and VCs are names only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from scheduler.core.gang import gang_request
from scheduler.core.model import Job, Node, PendingReason, ReasonKind, RunningJob, VirtualCluster
from scheduler.core.reasons import fmt_dim, reason
from scheduler.core.resources import (
    DIM_NAMES,
    ZERO3,
    Triple,
    add,
    excess,
    iadd,
    isub,
    isub_floor,
    total,
)


def governed_dims(r: Triple) -> tuple[int, ...]:
    """Components (0 cpu_m, 1 memory, 2 gpu) a guarantee governs: its non-zero ones; an
    all-zero guarantee governs all three (the VC owns nothing)."""
    dims = tuple(d for d in (0, 1, 2) if r[d] > 0)
    return dims if dims else (0, 1, 2)


def exceeds(cum: Sequence[int], g: Triple, dims: tuple[int, ...]) -> bool:
    """True when the allocation ``cum`` ([cpu_m, memory, gpu]) is above the guarantee ``g``
    in any of the governed components ``dims``."""
    return any(cum[d] > g[d] for d in dims)


def borrowing_jobs(
    ledger: VcLedger, running: Iterable[RunningJob]
) -> dict[str, tuple[Triple, Triple, int]]:
    """The running jobs that are borrowing (opportunistic), whole-job semantics.

    Each VC's running jobs are ordered by (start_time, name); a job is guaranteed while
    the VC's cumulative allocation including it stays within the VC's guarantee in every
    governed component (see :func:`governed_dims`), and borrowing from the first job that
    exceeds it onward (allocations are non-negative, so that is exactly the jobs whose own
    cumulative allocation exceeds). Source: OpenPAI HiveD guaranteed vs opportunistic jobs
    (Zhao et al., OSDI 2020), YARN capacity scheduler's over-capacity containers.

    Args:
        ledger: gives each VC's guarantee; a VC it does not know has none (all borrowed).
        running: the running jobs.

    Releasing jobs (``RunningJob.releasing``) are on their way out: they are neither
    guaranteed nor borrowing, and hold no place in the order.

    Returns:
        ``{job name: (before, alloc, position)}`` for every borrowing job, where ``before``
        is what the job's VC's jobs started before it hold and ``alloc`` what the job holds,
        both (cpu_m, memory bytes, gpu), and ``position`` its 0-based place in its VC's
        (start_time, name) order. Guaranteed jobs are absent.
    """
    per_vc: dict[str, list[tuple[float, str, Triple]]] = {}
    for rj in running:
        if rj.releasing:
            continue
        per_vc.setdefault(rj.job.vc, []).append((rj.start_time, rj.job.name, rj.held()))
    out: dict[str, tuple[Triple, Triple, int]] = {}
    for vc, jobs in per_vc.items():
        guar = ledger.guarantee_of(vc)
        dims = governed_dims(guar)
        jobs.sort(key=lambda t: (t[0], t[1]))
        cum = ZERO3
        for pos, (_, name, a) in enumerate(jobs):
            before = cum
            cum = add(cum, a)
            if exceeds(cum, guar, dims):
                out[name] = (before, a, pos)
    return out


_UNSET = object()


def task_width(job: Job) -> int:
    """GPUs of the job's widest task (0 for CPU-only jobs)."""
    return max((r.resources.gpu for r in job.roles), default=0)


class VcLedger:
    """Per-VC usage and pending demand during one cycle.

    Args:
        vcs: the snapshot's virtual clusters.
        running: running jobs (their allocations are the initial usage; releasing jobs
            are left out).
        pending: pending jobs (their gang requests are the initial demand).
        nodes: every node (capacity of ready nodes is the denominator of DRF shares).
        enabled: ``Policy.vc_quota``.
        track_usage: False skips summing running jobs and nodes (nothing but VC admission
            and DRF shares reads usage; the cycle's fixed cost matters to the simulator).
    """

    def __init__(
        self,
        vcs: Iterable[VirtualCluster],
        running: Iterable[RunningJob],
        pending: Iterable[Job],
        nodes: Iterable[Node],
        enabled: bool,
        track_usage: bool = True,
    ) -> None:
        self.enabled = enabled
        self.vcs: dict[str, VirtualCluster] = {v.name: v for v in vcs}
        self.guarantee: dict[str, Triple] = {n: v.guarantee.triple() for n, v in self.vcs.items()}
        self.governed = {n: governed_dims(g) for n, g in self.guarantee.items()}
        # accumulators (list[int], see resources.py), changed in place as the cycle goes
        self.usage: dict[str, list[int]] = {}
        self.demand: dict[str, list[int]] = {}
        # the same demand by the job's widest task in GPUs: {vc: {gpus: [c, m, g]}}
        self.demand_by_width: dict[str, dict[int, list[int]]] = {}
        self._usable: dict[tuple[str, int], list[int]] = {}  # usable_demand, until demand changes
        self._held_cache: dict[tuple[object, ...], tuple[int, list[str]]] = {}
        self.total = [0, 0, 0]
        if not track_usage:
            return
        for rj in running:
            if rj.releasing:
                continue  # going away; its VC should not be charged for it
            iadd(self.usage.setdefault(rj.job.vc, [0, 0, 0]), rj.held())
        # Once per pending job and per node every cycle (its fixed cost): plain local ints
        # rather than resources.py calls.
        for j in pending:
            d = self.demand.setdefault(j.vc, [0, 0, 0])
            w = self.demand_by_width.setdefault(j.vc, {}).setdefault(task_width(j), [0, 0, 0])
            c, m, g = gang_request(j)
            d[0] += c
            d[1] += m
            d[2] += g
            w[0] += c
            w[1] += m
            w[2] += g
        tc = tm = tg = 0
        for n in nodes:
            if n.state == "ready":
                cap = n.capacity
                tc += cap.cpu_m
                tm += cap.memory
                tg += cap.gpu
        self.total = [tc, tm, tg]

    # -- state changes --------------------------------------------------------------------
    def charge(self, vc: str, req: Triple, job: Job | None = None) -> None:
        """Add ``req`` to the VC's usage and remove it from its pending demand (and
        ``job``'s gang from the demand by width, when given)."""
        self._held_cache.clear()
        iadd(self.usage.setdefault(vc, [0, 0, 0]), req)
        isub_floor(self.demand.setdefault(vc, [0, 0, 0]), req)
        if job is not None:
            self._forget_width(job)

    def drop_demand(self, vc: str, req: Triple, job: Job | None = None) -> None:
        """Forget pending demand that cannot be served (job unplaceable for good)."""
        self._held_cache.clear()
        isub_floor(self.demand.setdefault(vc, [0, 0, 0]), req)
        if job is not None:
            self._forget_width(job)

    def adjust_usage(self, vc: str, delta: Triple, sign: int = 1) -> None:
        """Add ``sign * delta`` to the VC's usage only, for a tentative charge that the
        caller takes back (with ``sign=-1``) before the cycle goes on: pending demand and
        the held-capacity cache, which does not read the VC's own usage, stay as they are."""
        u = self.usage.setdefault(vc, [0, 0, 0])
        if sign >= 0:
            iadd(u, delta)
        else:
            isub(u, delta)

    def _forget_width(self, job: Job) -> None:
        self._usable.clear()
        w = self.demand_by_width.get(job.vc, {}).get(task_width(job))
        if w is not None:
            isub_floor(w, gang_request(job))

    def _held(self, vc: str, d: int, block: int | None) -> tuple[int, list[str]]:
        """Idle capacity in component ``d`` held for other VCs' guarantees, and which VCs
        hold it (cached until usage or demand changes; the VC's own usage, which
        admitting extra replicas changes, does not enter it)."""
        key = (vc, d, block)
        cached = self._held_cache.get(key)
        if cached is not None:
            return cached
        held = 0
        holders = []
        for other, og in self.guarantee.items():
            if other == vc:
                continue
            dem = self.usable_demand(other, block)
            if not dem or dem[d] <= 0:
                continue
            unmet = og[d] - self.usage.get(other, ZERO3)[d]
            if unmet > 0:
                held += min(unmet, dem[d])
                holders.append(other)
        out = self._held_cache[key] = (held, holders)
        return out

    def usable_demand(self, vc: str, block: int | None) -> list[int] | None:
        """Pending demand of ``vc`` from jobs whose widest task needs at most ``block``
        GPUs (all of it when ``block`` is None)."""
        if block is None:
            return self.demand.get(vc)
        out = self._usable.get((vc, block))
        if out is not None:
            return out
        by_width = self.demand_by_width.get(vc)
        if not by_width:
            return None
        out = self._usable[(vc, block)] = list(total(v for w, v in by_width.items() if w <= block))
        return out

    # -- queries --------------------------------------------------------------------------
    def known(self, vc: str) -> bool:
        return not self.enabled or vc in self.vcs

    def share(self, vc: str) -> float:
        """Dominant share: max over resources of usage / ready capacity (Ghodsi et al.)."""
        u = self.usage.get(vc)
        if u is None:
            return 0.0
        return max((u[k] / self.total[k] if self.total[k] else 0.0) for k in (0, 1, 2))

    def guarantee_of(self, vc: str) -> Triple:
        """The VC's guarantee (cpu_m, memory bytes, gpu); (0, 0, 0) for an unknown VC."""
        return self.guarantee.get(vc, ZERO3)

    def borrowed(self, vc: str) -> Triple:
        """Usage above guarantee, per component (a component with no guarantee counts whole)."""
        return excess(self.usage.get(vc, ZERO3), self.guarantee_of(vc))

    def within_guarantee(self, job: Job, req: Triple) -> bool:
        """True when the job, started now, would be a guaranteed job of its VC: the VC's
        usage plus ``req`` (cpu_m, memory bytes, gpu) stays within the guarantee in every
        governed component (the same test :func:`borrowing_jobs` applies to running jobs,
        the job coming last in start order), and the job asks for at least one governed
        component (otherwise the guarantee holds nothing for it). Reclaim may serve it.
        False when VCs are not enforced, the VC is unknown or its guarantee is all zero."""
        if not self.enabled or job.vc not in self.vcs:
            return False
        g = self.guarantee[job.vc]
        if not any(g):
            return False
        u = self.usage.get(job.vc, ZERO3)
        dims = self.governed[job.vc]
        if not any(req[d] > 0 for d in dims):
            return False
        return not exceeds(add(u, req), g, dims)

    def admit(
        self,
        job: Job,
        req: Triple,
        ready_free: Sequence[int],
        block: Callable[[], int] | None = None,
    ) -> PendingReason | None:
        """None when the job's VC may take ``req`` now, else the reason it may not.

        ``ready_free`` is the free capacity summed over ready nodes, per component;
        ``block()`` the most GPUs free on one ready node (called only when needed): idle
        capacity is held for another VC's guarantee only for its pending jobs whose tasks
        fit such a block (a job that cannot use idle capacity now would reclaim instead;
        holding fragmented idle GPUs for it only keeps them idle). Without ``block`` all
        pending demand holds.
        """
        if not self.enabled:
            return None
        v = self.vcs.get(job.vc)
        if v is None:
            return reason(
                ReasonKind.UNKNOWN_VC,
                f"vc {job.vc} does not exist",
                vc=job.vc,
                known=sorted(self.vcs),
            )
        u = self.usage.get(job.vc, ZERO3)
        if v.max is not None:
            cap = v.max.triple()
            capped = governed_dims(cap)  # zero components are uncapped, all zero caps all
            for d in (2, 0, 1):
                if d in capped and u[d] + req[d] > cap[d]:
                    return reason(
                        ReasonKind.VC_MAX,
                        f"vc {job.vc} is at its max of {fmt_dim(d, cap[d])} "
                        f"(holds {fmt_dim(d, u[d])}, the job needs {fmt_dim(d, req[d])})",
                        vc=job.vc,
                        resource=DIM_NAMES[d],
                        max=cap[d],
                        used=u[d],
                        requested=req[d],
                    )
        g = self.guarantee[job.vc]
        blk: object = _UNSET
        for d in (2, 0, 1):
            if d not in self.governed[job.vc]:
                continue
            borrow = max(u[d] + req[d] - g[d], 0) - max(u[d] - g[d], 0)
            if borrow <= 0:
                continue
            if not v.can_borrow:
                return reason(
                    ReasonKind.VC_QUOTA,
                    f"vc {job.vc} is at its guarantee of {fmt_dim(d, g[d])} and may not borrow "
                    f"(holds {fmt_dim(d, u[d])}, the job needs {fmt_dim(d, req[d])})",
                    vc=job.vc,
                    resource=DIM_NAMES[d],
                    guarantee=g[d],
                    used=u[d],
                    requested=req[d],
                )
            if blk is _UNSET:
                blk = block() if block is not None else None
            held, holders = self._held(job.vc, d, blk)  # type: ignore[arg-type]
            if holders and borrow > ready_free[d] - held:
                return reason(
                    ReasonKind.VC_QUOTA,
                    f"vc {job.vc} would borrow {fmt_dim(d, borrow)} beyond its guarantee, but "
                    f"the idle capacity is held for the guarantee of vc {', '.join(holders)}",
                    vc=job.vc,
                    resource=DIM_NAMES[d],
                    borrow=borrow,
                    held_for=holders,
                )
        return None
