"""A scheduling policy is data: which stages run, in which order, with which weights.

The service, the simulator's baselines and the tests all build :class:`Policy` values; the
named configurations people compare (fifo, capacity, drf, tiresias-las, pasture, ...) live in
:mod:`scheduler.core.presets`. Plugin names refer to the explicit registries in the core
(filters, scorers, queue orders); an unknown name raises ``ValueError`` at construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Backfill(StrEnum):
    """Backfill mode.

    NONE: a blocked job blocks nobody unless ``strict_order`` is False (then later jobs
        simply go ahead, which can starve wide jobs; aging counters that).
    EASY: EASY backfill (Lifka 1995; Mu'alem & Feitelson, IEEE TPDS 2001): the first blocked
        job gets a reservation (earliest time its gang fits, from running jobs' estimated
        ends); a later job may start only if it does not delay that reservation. Without a
        duration estimate a job may only use capacity the reservation does not need.
        Three bounds keep backfill from hurting when estimates are missing or wrong:
        (1) ``Policy.backfill_horizon_s``: once the job has been the head that long, only jobs
        known to end before a finite shadow time start around it (then strict FIFO);
        (2) with ``Policy.adaptive``, the same as soon as the head would fit but for jobs
        started around it (:func:`scheduler.core.reservation.starved`);
        (3) a reservation whose shadow time is unknown (the gang fits only when jobs
        without estimates end) is not taken when QUEUE_ORDER preemption is on and the
        queue order can clear the way: every running job on the nodes it would use is
        one the job may preempt once it ranks ahead (its own VC's, or a borrower). Where
        another VC's guaranteed or an unpreemptible job sits there, no rank ever frees
        those nodes, so the reservation holds them (a drain), without bound (2): that
        bound compares with a FIFO schedule, and LAS is not FIFO.
    """

    NONE = "none"
    EASY = "easy"


class PreemptionMode(StrEnum):
    """Reasons the core may choose victims.

    VC_RECLAIM: a VC with pending work below its guarantee takes back capacity other VCs
        borrowed. Victims are only borrowing jobs of other VCs, taken whole (a VC's running
        jobs in start order are guaranteed until their running total exceeds the guarantee;
        from there on they borrow; OpenPAI HiveD, Zhao et al., OSDI'20).
    PRIORITY: a pending job may preempt strictly lower-priority preemptible jobs in the
        same VC.
    QUEUE_ORDER: a pending job may preempt running jobs that the queue order ranks after it
        (used by Tiresias-LAS and SRTF, whose order changes as jobs run). With VCs
        enforced: jobs of its own VC and borrowing jobs of other VCs.
    """

    VC_RECLAIM = "vc-reclaim"
    PRIORITY = "priority"
    QUEUE_ORDER = "queue-order"


@dataclass(frozen=True, slots=True)
class Policy:
    """A scheduling policy.

    Attributes:
        name: label for reports.
        queue_order: key of the queue-order registry: "priority-fifo" (priority, then
            submit time), "fifo" (submit time only), "drf" (VC dominant share, ascending;
            Ghodsi et al., NSDI'11), "las" (Tiresias discretised 2D-LAS on attained
            GPU-service; Gu et al., NSDI'19), "srtf" (shortest estimated remaining time).
        filters: filter plugin names, applied in order (cheap, most selective first).
        scorers: (scorer name, weight) pairs; a node's score is the weighted sum.
        backfill: see :class:`Backfill`.
        strict_order: when True, the first job that cannot be placed (and has no
            reservation mechanism to protect it) stops the cycle (strict FIFO).
        vc_quota: enforce VC guarantee / max / borrowing semantics.
        preemption: which preemption modes are enabled (see :class:`PreemptionMode`).
        aging_per_hour: priority points a pending job gains per hour of waiting, so that
            nothing starves. 0 disables aging.
        las_thresholds: attained-service thresholds (GPU-seconds) between LAS queues.
        max_jobs_per_cycle: how many pending jobs one cycle examines (None = all).
        preemption_min_runtime_s: a running job younger than this is not chosen as a
            queue-order victim (avoids thrashing).
        backfill_horizon_s: EASY starvation guard. When the reserved head job has been
            the head longer than this (since :func:`scheduler.core.reservation.head_since`),
            jobs whose end the reservation cannot bound (no estimate, or an unknown shadow
            time) no longer start around it: the head then starts no later than it would
            under strict FIFO from that moment on.
            None = no time guard.
        adaptive: adapt to the cluster (:func:`scheduler.core.adapt.adapt`): plain
            2D-LAS with one tenant, ``las_thresholds`` from ``Snapshot.history`` with more
            (static values until enough jobs have finished); EASY reservations ordered by
            learned residual run times, and starved once backfill alone blocks the head
            (:mod:`scheduler.core.reservation`).
        starve_limit: Tiresias' STARVELIMIT / PROMOTEKNOB (Gu et al., NSDI'19, section 4.2):
            with the ``las`` order, a preempted job that has waited at least this many
            times its run time so far (all attempts) is promoted to the highest LAS queue
            (:mod:`scheduler.core.starvation`). None = no promotion.
        elastic: run the elastic stage (:mod:`scheduler.core.elastic`): shrink running
            elastic jobs toward their minimum before preempting anyone for a blocked job,
            and grow them toward their maximum with idle capacity, sized by marginal
            throughput per GPU (AFS, Hwang et al., NSDI'21). Jobs without elastic roles
            are unaffected. False: elastic roles grow like ``min_available`` gangs
            (:mod:`scheduler.core.grow`) and are never shrunk.
        regrow_cooldown_s: with ``elastic``, a job shrunk at ``RunningJob.resized_at`` is
            not grown again (nor given replicas by a rebalance) before this many seconds
            have passed: the stopped replicas must leave the rendezvous first (torchrun: a
            stopped agent stays a participant of the round until its keep-alive expires,
            1 s x 5 as pasture sets it, torch's default 15 s; a replica joining before that
            may join a round that cannot complete). 0 = no cool-down.
    """

    name: str = "default"
    queue_order: str = "priority-fifo"
    filters: tuple[str, ...] = ("schedulable", "gpu-model", "node-selector", "resource-fit")
    scorers: tuple[tuple[str, float], ...] = (("best-fit", 1.0), ("gang-locality", 1.0))
    backfill: Backfill = Backfill.EASY
    strict_order: bool = False
    vc_quota: bool = True
    preemption: tuple[PreemptionMode, ...] = (PreemptionMode.VC_RECLAIM, PreemptionMode.PRIORITY)
    aging_per_hour: float = 1.0
    las_thresholds: tuple[float, ...] = (3600.0, 36000.0)
    max_jobs_per_cycle: int | None = None
    preemption_min_runtime_s: float = 0.0
    backfill_horizon_s: float | None = None
    adaptive: bool = False
    starve_limit: float | None = None
    elastic: bool = False
    regrow_cooldown_s: float = 0.0

    def __post_init__(self) -> None:
        """Validate the values and coerce enum-valued strings. The names of plugins and of
        the queue order are checked against their registries where they are looked up
        (:func:`scheduler.core.plugins.check_plugin_names`,
        :func:`scheduler.core.queue.queue_order`, both called by
        :func:`scheduler.core.scheduler.schedule`).

        Raises:
            ValueError: an unknown backfill or preemption mode; a policy
                without ``resource-fit``; a non-finite scorer weight; unsorted or negative
                LAS thresholds; a negative aging rate or min runtime; max_jobs_per_cycle < 1.
        """
        import math

        def fail(field: str, expected: str, got: object) -> None:
            raise ValueError(f"Policy.{field}: expected {expected}, got {got!r}")

        try:
            object.__setattr__(self, "backfill", Backfill(self.backfill))
        except ValueError:
            fail("backfill", f"one of {[b.value for b in Backfill]}", self.backfill)
        modes = []
        for m in self.preemption:
            try:
                modes.append(PreemptionMode(m))
            except ValueError:
                fail("preemption", f"modes from {[p.value for p in PreemptionMode]}", m)
        object.__setattr__(self, "preemption", tuple(modes))
        object.__setattr__(self, "filters", tuple(self.filters))
        object.__setattr__(self, "scorers", tuple((n, float(w)) for n, w in self.scorers))
        object.__setattr__(self, "las_thresholds", tuple(float(t) for t in self.las_thresholds))
        if "resource-fit" not in self.filters:
            fail("filters", "a list including 'resource-fit'", list(self.filters))
        for n, w in self.scorers:
            if not math.isfinite(w):
                fail("scorers", "finite weights", (n, w))
        th = self.las_thresholds
        if any(t < 0 for t in th) or list(th) != sorted(th):
            fail("las_thresholds", "ascending non-negative GPU-seconds", th)
        if self.aging_per_hour < 0 or not math.isfinite(self.aging_per_hour):
            fail("aging_per_hour", "a finite number >= 0", self.aging_per_hour)
        if self.preemption_min_runtime_s < 0:
            fail("preemption_min_runtime_s", "seconds >= 0", self.preemption_min_runtime_s)
        h = self.backfill_horizon_s
        if h is not None and not (h >= 0 and math.isfinite(h)):
            fail("backfill_horizon_s", "None or finite seconds >= 0", h)
        k = self.starve_limit
        if k is not None and not (k > 0 and math.isfinite(k)):
            fail("starve_limit", "None or a finite number > 0", k)
        c = self.regrow_cooldown_s
        if not (c >= 0 and math.isfinite(c)):
            fail("regrow_cooldown_s", "finite seconds >= 0", c)
        if self.max_jobs_per_cycle is not None and self.max_jobs_per_cycle < 1:
            fail("max_jobs_per_cycle", "None or an int >= 1", self.max_jobs_per_cycle)
