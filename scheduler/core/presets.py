"""Named policies: the configurations of the one core that people compare.

Every name here is a :class:`~scheduler.core.policy.Policy` value; the service's loop picks
one by name (``loop.policy`` in scheduler.yaml, default ``pasture``) and the simulator
replays traces under each of them side by side. None of them is a fork of the core.

    fifo           strict FIFO: submit order, the first job that does not fit blocks all
                   (no backfill, no VCs, no preemption).
    fifo-backfill  FIFO with EASY backfill (Lifka 1995; Mu'alem & Feitelson, TPDS 2001).
                   No duration estimates are given, so later jobs only use capacity the
                   head job's reservation does not need; adaptive: the head is planned
                   where capacity is likeliest to free first (learned residual run
                   times), and once it would fit but for jobs started around it, nothing
                   unbounded starts around it any more (scheduler.core.reservation).
    capacity       YARN capacity scheduler as Philly ran it (Jeon et al., ATC'19): per-VC
                   FIFO within guaranteed shares, idle capacity lent out and reclaimed by
                   preemption when its owner has pending work.
    drf            Dominant Resource Fairness across VCs (Ghodsi et al., NSDI'11): the VC
                   with the smallest dominant share goes first.
    tiresias-las   Tiresias discretised 2D-LAS (Gu et al., NSDI'19): queues by attained
                   GPU-service (thresholds in GPU-seconds), FIFO inside a queue,
                   preemption of jobs in lower queues; no duration knowledge.
    srtf-oracle    shortest remaining time first with the true durations (the simulator
                   fills Job.estimated_duration_s): an optimistic reference, not for use.
    pasture        the service default: priority classes, VC guarantees with borrowing and
                   reclaim, gangs, 2D-LAS inside a priority class (queue-order preemption
                   within a VC and of other VCs' borrowing jobs, not of jobs younger than
                   5 minutes), EASY backfill for jobs whose shadow time is bounded.
                   Adaptive (scheduler.core.history): with one tenant (fewer than two
                   VCs with a guaranteed GPU share) it is plain Tiresias-LAS (thresholds
                   1 and 10 GPU-hours, no 5-minute floor, no backfill); with two or
                   more, the LAS thresholds are the 0.9 and 0.99 quantiles of finished
                   jobs' attained GPU-service (Tiresias, Gu et al., NSDI'19) once 50 /
                   500 jobs have finished. Tiresias' STARVELIMIT
                   (scheduler.core.starvation) is on with limit 2 (issue 36): a
                   preempted job that has waited twice its run time so far is promoted
                   to the first LAS queue, so wide gangs demoted after a short attempt
                   do not starve; the limit was fitted on syn-16gpu alone and checked on
                   the other suite traces (scheduler/sim/README.md, "STARVELIMIT").
                   A reservation whose shadow time is unknown (no estimates) holds
                   nothing where the LAS rank can clear the wide job's way by
                   preemption; where another VC's guaranteed job sits in it, it holds
                   (a drain; Backfill.EASY in scheduler.core.policy).
                   Aging is off: the core adds it to the priority continuously, ahead of
                   the LAS level, so any positive rate turns LAS into longest-wait-first and
                   makes queue-order preemption thrash (Philly 5,000-job replay: 9,146
                   preemptions at 1/h, 213 at 0). Priority classes still order first.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from scheduler.core.policy import Backfill, Policy, PreemptionMode

# Every preset is this base with what makes it itself (issue 14 item 5): no backfill, no
# VCs, no preemption, no aging, submit order.
BASE = Policy(
    name="base",
    queue_order="fifo",
    backfill=Backfill.NONE,
    strict_order=False,
    vc_quota=False,
    preemption=(),
    aging_per_hour=0.0,
)

# Tiresias-LAS plus the elastic stage (issue 29): jobs with elastic roles are shrunk before
# anyone is preempted and grown by marginal gain (AFS-style weights with attained service
# standing in for the unknown remaining time).
ELASTIC = replace(
    BASE,
    name="elastic",
    queue_order="las",
    preemption=(PreemptionMode.QUEUE_ORDER,),
    las_thresholds=(3600.0, 36000.0),
    elastic=True,
    # learns finished jobs' services: the stage's length weight is the median remaining
    # service of jobs that attained as much (issue 36; adapt() leaves this preset's other
    # values as they are: no VCs, no backfill)
    adaptive=True,
)

PRESETS = MappingProxyType(
    {
        "fifo": replace(BASE, name="fifo", strict_order=True),
        "fifo-backfill": replace(
            BASE, name="fifo-backfill", backfill=Backfill.EASY, strict_order=True, adaptive=True
        ),
        "capacity": replace(
            BASE, name="capacity", vc_quota=True, preemption=(PreemptionMode.VC_RECLAIM,)
        ),
        "drf": replace(BASE, name="drf", queue_order="drf"),
        "tiresias-las": replace(
            BASE,
            name="tiresias-las",
            queue_order="las",
            preemption=(PreemptionMode.QUEUE_ORDER,),
            las_thresholds=(3600.0, 36000.0),
        ),
        "srtf-oracle": replace(
            BASE, name="srtf-oracle", queue_order="srtf", preemption=(PreemptionMode.QUEUE_ORDER,)
        ),
        "pasture": replace(
            BASE,
            name="pasture",
            queue_order="las",
            backfill=Backfill.EASY,
            vc_quota=True,
            preemption=(
                PreemptionMode.VC_RECLAIM,
                PreemptionMode.PRIORITY,
                PreemptionMode.QUEUE_ORDER,
            ),
            las_thresholds=(3600.0, 36000.0),
            preemption_min_runtime_s=300.0,
            adaptive=True,
            # Tiresias' STARVELIMIT (scheduler.core.starvation), the limit fitted on ONE
            # trace (syn-16gpu, 2,000 jobs @0.8: the largest of 1, 2, 4 with p99 <= 1.5x
            # the best baseline's) and checked on every other (scheduler/sim/README.md)
            starve_limit=2.0,
            elastic=True,  # only jobs with elastic roles are resized (issue 29)
            # a shrunk replica leaves torchrun's rendezvous within its keep-alive (1 s x 5,
            # set by scheduler.rules.discovery.elastic_env); a regrow after that joins the
            # survivors' next round (issue 36: shrink and regrow within 10 s)
            regrow_cooldown_s=6.0,
        ),
        "elastic": ELASTIC,
        # AFS-like baseline: the same stage given each job's true length (AFS' length
        # weight; the simulator passes true durations as estimates).
        "afs-like": replace(
            BASE,
            name="afs-like",
            queue_order="srtf",
            preemption=(PreemptionMode.QUEUE_ORDER,),
            elastic=True,
        ),
        # AFS' sizing with true lengths in elastic's own queue (2D-LAS, no lengths): the
        # same stage and order as "elastic", only the length weight known (nothing to
        # learn, so not adaptive). elastic / afs-las isolates the sizing; afs-las /
        # afs-like is what knowing lengths in the queue order adds (issue 36,
        # scheduler/sim/README.md "fifth round").
        "afs-las": replace(ELASTIC, name="afs-las", adaptive=False),
    }
)

# Policies whose replay gives the core each job's true duration as its estimate.
ORACLE_ESTIMATES = frozenset({"srtf-oracle", "afs-like", "afs-las"})
# Policies whose replay runs every trace job as an elastic job (scheduler/sim/profiles.py);
# the others (pasture included, whose elastic stage only acts on elastic jobs) replay the
# trace's rigid jobs.
ELASTIC_REPLAY = frozenset({"elastic", "afs-like", "afs-las"})
DEFAULT_POLICY = "pasture"


def get_preset(name: str) -> Policy:
    """The named policy.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; expected one of {', '.join(PRESETS)}") from None
