"""Queue orders: in which order a cycle looks at pending jobs.

Every order compares, in this sequence: effective priority (higher first), the order's own
key, submit time, job name (so equal inputs give equal orders). Effective priority is
``priority + aging_per_hour * hours waited since submit_time`` (aging, so nothing starves;
a running job's wait ended when it started).

Registry (:data:`QUEUE_ORDERS`), keyed by ``Policy.queue_order``:

    priority-fifo  no own key: priority, then submit order.
    fifo           no own key either; with equal priorities (or aging) it is submit order.
    drf            the dominant share of the job's VC, ascending (Dominant Resource
                   Fairness, Ghodsi et al., NSDI'11). The share changes as the cycle binds
                   jobs, so this order is *dynamic*: the cycle re-picks the next VC after
                   every bind.
    las            Tiresias discretised 2D-LAS (Gu et al., NSDI'19): the queue level from
                   attained GPU-service (GPU-seconds; core-seconds for CPU-only jobs), with
                   ``Policy.las_thresholds`` between levels; FIFO inside a level. With
                   ``Policy.starve_limit``, a job starved that long relative to its run
                   time so far is promoted to the first level (Tiresias' STARVELIMIT,
                   :mod:`scheduler.core.starvation`).
    srtf           shortest estimated remaining time first (estimate minus time already
                   served); jobs without an estimate go last.

The same keys rank running jobs (``run`` argument) for queue-order preemption: a running
job's attained service includes ``(now - start_time) x its GPUs``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from scheduler.core.model import Job, RunningJob
from scheduler.core.policy import Policy
from scheduler.core.starvation import promoted, saved_s

INF = float("inf")


@dataclass(slots=True)
class OrderContext:
    """What queue-order keys may look at.

    Attributes:
        now: current time, seconds.
        policy: the cycle's policy (aging, LAS thresholds).
        vc_share: ``vc_share(vc) -> float``, the VC's current dominant share in [0, 1+].
    """

    now: float
    policy: Policy
    vc_share: Callable[[str], float]


@dataclass(frozen=True, slots=True)
class QueueOrder:
    """A named queue order.

    Attributes:
        name: registry key.
        key: ``key(job, ctx, run) -> tuple``, the order's own key (smaller first); ``run``
            is the job's RunningJob when ranking a running job, else None.
        dynamic: True when the key changes as jobs are bound within one cycle.
    """

    name: str
    key: Callable[[Job, OrderContext, RunningJob | None], tuple[object, ...]]
    dynamic: bool = False


def job_width(job: Job, run: RunningJob | None = None) -> tuple[int, float]:
    """(GPUs, cores) the job holds when running, or requests (its gang) when pending."""
    gpu = cpu_m = 0
    if run is not None:
        for p in run.placements:
            gpu += p.resources.gpu
            cpu_m += p.resources.cpu_m
    else:
        for r in job.roles:
            gpu += r.resources.gpu * r.gang_min
            cpu_m += r.resources.cpu_m * r.gang_min
    return gpu, cpu_m / 1000.0


def attained_service(job: Job, now: float, run: RunningJob | None = None) -> float:
    """GPU-seconds received (core-seconds for CPU-only jobs), including the current run."""
    served = job.attained_service
    if run is not None:
        gpus, cores = job_width(job, run)
        served += max(now - run.start_time, 0.0) * (gpus if gpus > 0 else cores)
    return served


def effective_priority(job: Job, ctx: OrderContext, run: RunningJob | None = None) -> float:
    """Priority plus aging: ``priority + aging_per_hour * hours waited``."""
    rate = ctx.policy.aging_per_hour
    if not rate:
        return float(job.priority)
    until = run.start_time if run is not None else ctx.now
    return job.priority + rate * max(until - job.submit_time, 0.0) / 3600.0


def _no_key(job: Job, ctx: OrderContext, run: RunningJob | None) -> tuple[object, ...]:
    return ()


def _drf_key(job: Job, ctx: OrderContext, run: RunningJob | None) -> tuple[object, ...]:
    return (ctx.vc_share(job.vc),)


def las_service(job: Job, ctx: OrderContext, run: RunningJob | None = None) -> float:
    """The service that sets the job's LAS level: :func:`attained_service` (GPU-seconds),
    or for a job promoted by ``Policy.starve_limit`` what it received since the promotion,
    in seconds of the promoted attempt saved by its last checkpoint (0 while pending, and
    for a job that declares no checkpoints; :mod:`scheduler.core.starvation` says why
    seconds, not GPU-seconds, and why saved ones)."""
    if promoted(job, ctx.now, ctx.policy.starve_limit, run):
        return 0.0 if run is None else saved_s(job, max(ctx.now - run.start_time, 0.0))
    return attained_service(job, ctx.now, run)


def _las_key(job: Job, ctx: OrderContext, run: RunningJob | None) -> tuple[object, ...]:
    return (bisect_right(ctx.policy.las_thresholds, las_service(job, ctx, run)),)


def _srtf_key(job: Job, ctx: OrderContext, run: RunningJob | None) -> tuple[object, ...]:
    est = job.estimated_duration_s
    if est is None:
        return (1, INF)
    gpus, cores = job_width(job, run)
    width = gpus if gpus > 0 else cores
    served = job.attained_service / width if width > 0 else 0.0
    if run is not None:
        served += max(ctx.now - run.start_time, 0.0)
    return (0, max(est - served, 0.0))


QUEUE_ORDERS: Mapping[str, QueueOrder] = MappingProxyType(
    {
        "priority-fifo": QueueOrder("priority-fifo", _no_key),
        "fifo": QueueOrder("fifo", _no_key),
        "drf": QueueOrder("drf", _drf_key, dynamic=True),
        "las": QueueOrder("las", _las_key),
        "srtf": QueueOrder("srtf", _srtf_key),
    }
)


def queue_order(name: str) -> QueueOrder:
    """The registered order named ``name`` (``Policy.queue_order``).

    Raises:
        ValueError: naming ``Policy.queue_order``, the known names and ``name``.
    """
    try:
        return QUEUE_ORDERS[name]
    except KeyError:
        raise ValueError(
            f"Policy.queue_order: expected one of {sorted(QUEUE_ORDERS)}, got {name!r}"
        ) from None


def full_key(
    order: QueueOrder, job: Job, ctx: OrderContext, run: RunningJob | None = None
) -> tuple[object, ...]:
    """The complete sort key: (-effective priority, own key..., submit time, name)."""
    own = order.key(job, ctx, run)
    return (-effective_priority(job, ctx, run), *own, job.submit_time, job.name)


def rank_key(
    order: QueueOrder, job: Job, ctx: OrderContext, run: RunningJob | None = None
) -> tuple[object, ...]:
    """The key queue-order preemption compares: (-base priority, own key...). A pending
    job may preempt only jobs whose rank is strictly greater; neither aging nor the
    submit-time / name tie-breakers count, so waiting longer or being older never evicts a
    peer (that would ping-pong equal jobs every ``preemption_min_runtime_s``)."""
    return (-job.priority, *order.key(job, ctx, run))
