"""What the cluster has already run: the learned input of adaptive policies.

The core stays pure: it never measures anything itself. Whoever drives it (the service's
loop, the simulator) records each job that *finished* (completed, not preempted) in a
:class:`HistoryWindow` and passes ``window.history()`` as ``Snapshot.history``. A policy with
``adaptive=True`` then derives its thresholds from it with
:func:`scheduler.core.adapt.adapt`; every other policy ignores it.

Rules (each from a published system, none tuned on a trace):

* **One tenant: plain Tiresias 2D-LAS** (Gu et al., NSDI'19: thresholds 1 and 10
  GPU-hours, the paper's, as the ``tiresias-las`` baseline uses them; no
  ``preemption_min_runtime_s`` floor). Where VC guarantees do not split the cluster
  (``Policy.vc_quota`` off, or fewer than two VCs with a guaranteed GPU share, see
  :func:`scheduler.core.adapt.tenants`) pasture's other rules have nothing to protect:
  there is no reclaim, so neither the floor (which keeps a job just restarted after
  reclaim from being evicted again by queue order) nor tail-only demotion has a reason to
  exist, and each measurably moved the mean both ways against plain 2D-LAS (scheduler/sim/README.md,
  "The adaptive policy"). EASY backfill is dropped too: with queue-order preemption a
  wide job is protected by its LAS rank, and the reservations EASY still took (for jobs
  with a bounded shadow time) only ever cost mean JCT against plain 2D-LAS (up to 1.6% on
  the synthetic wide-gang cases at 1,000 and 2,000 jobs, no gain seen anywhere). The
  policy is then Tiresias-LAS with Tiresias' own STARVELIMIT where the policy sets
  ``starve_limit`` (``pasture`` does since issue 36; the ``tiresias-las`` baseline does
  not, so there the two differ by that rule alone). This is a rule on the cluster's
  configuration (its VCs), known at run time, not a constant taken from a trace; it was
  chosen after measuring, which the README says.
* **Two or more tenants: LAS queue thresholds at quantiles of finished jobs' attained
  service** (Tiresias, Gu et al., NSDI'19, section 4.2: discretised 2D-LAS whose queue
  thresholds follow the distribution of job service; the Gittins-index variant uses that
  same distribution). Thresholds at the 0.9 and 0.99 quantiles: LAS exists to keep the
  heavy tail from blocking the many short jobs, so only the tail is demoted: the first
  queue holds the 90% of jobs that the cluster's own history calls ordinary (FIFO among
  them, never preempted by queue order for their age), the second the longest tenth, the
  third the longest hundredth (three queues as in Tiresias' evaluation). Each demotion
  costs a job a restart when it is then preempted, and with guarantees a demoted job of
  one VC is also a reclaim candidate of another (restarts compound), so demoting the
  median job (a threshold at the 0.5 quantile) would put that cost on half the jobs.
  Chosen from this rule before measuring it (a first version at the 0.5 and 0.9
  quantiles was measured and is reported in scheduler/sim/README.md).
* **EASY without estimates: where the head's capacity frees first** (used by
  :func:`scheduler.core.reservation.reserve`): a running job's likely end is now plus the
  median further run time of finished jobs that ran as long (:func:`median_residual_s`,
  the empirical median residual life). The starvation guard of adaptive policies needs
  no learned value (:func:`scheduler.core.reservation.starved`). (A learned horizon, the
  0.9 quantile of run times, was used before; on a heavily loaded cluster heads outwait
  it routinely and EASY then collapsed into strict FIFO: openb, 1,000 jobs at load 0.8,
  fifo-backfill 1.42x fifo; with the rule that replaced it 0.18x.)
* **A quantile is used only once it is estimable**: n * min(q, 1 - q) >= 5 finished jobs
  (the usual normal-approximation rule for the binomial count behind an order statistic:
  50 jobs for the 0.9 quantile, 500 for the 0.99). Before that the policy's static values
  apply.

How fast it adapts: the window keeps the last ``size`` finished jobs (default 1,000: the 0.9
quantile's binomial standard error is then sqrt(0.09 / 1000) ~ 0.01, i.e. within about one
percentile), so a change in the workload is fully reflected after ``size`` completions and
half-way after ``size / 2``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

MIN_TAIL_COUNT = 5  # n * min(q, 1 - q) >= 5 before quantile q is trusted


@dataclass(frozen=True, slots=True)
class History:
    """Finished jobs observed so far (a recent window of them).

    Attributes:
        runtimes_s: seconds each finished job held an allocation (all attempts), ascending.
        services_gpu_s: GPU-seconds each finished job attained (GPUs x run time, all
            attempts), ascending.
    """

    runtimes_s: tuple[float, ...] = ()
    services_gpu_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        """Raises ValueError: a negative, non-finite or unsorted sample."""
        for name in ("runtimes_s", "services_gpu_s"):
            xs = getattr(self, name)
            if any(not math.isfinite(x) or x < 0 for x in xs) or list(xs) != sorted(xs):
                raise ValueError(f"History.{name}: expected ascending finite values >= 0")


def quantile(sorted_xs: tuple[float, ...], q: float) -> float | None:
    """The q-quantile (nearest rank) of an ascending sample, or None while it is not
    estimable (fewer than ``MIN_TAIL_COUNT / min(q, 1 - q)`` values)."""
    n = len(sorted_xs)
    if n == 0 or n * min(q, 1.0 - q) < MIN_TAIL_COUNT:
        return None
    return sorted_xs[min(n - 1, max(0, math.ceil(q * n) - 1))]


def median_residual_s(history: History | None, elapsed_s: float) -> float | None:
    """Median further run time of a job that has run ``elapsed_s`` seconds, from finished
    jobs' run times: the median of (r - elapsed) over finished run times r > elapsed (the
    empirical median residual life), or None while fewer than ``2 * MIN_TAIL_COUNT``
    finished jobs ran that long (then nothing is known about its end)."""
    return None if history is None else _median_residual(history.runtimes_s, elapsed_s)


def median_residual_service(history: History | None, attained_gpu_s: float) -> float | None:
    """Median further service (GPU-seconds) of a job that has attained ``attained_gpu_s``:
    the median of (s - attained) over finished jobs' services s > attained (the empirical
    median residual, as :func:`median_residual_s` for run times), or None while fewer than
    ``2 * MIN_TAIL_COUNT`` finished jobs attained that much."""
    return None if history is None else _median_residual(history.services_gpu_s, attained_gpu_s)


def _median_residual(sorted_xs: Sequence[float], x: float) -> float | None:
    """Median of (v - x) over the values v > x of ascending ``sorted_xs``, or None while
    fewer than ``2 * MIN_TAIL_COUNT`` values exceed x."""
    i = bisect_right(sorted_xs, x)
    n = len(sorted_xs) - i
    if n < 2 * MIN_TAIL_COUNT:
        return None
    return sorted_xs[i + (n - 1) // 2] - x


class HistoryWindow:
    """Mutable recorder of the last ``size`` finished jobs, for the loop or the simulator.

    ``record`` is O(1); ``history()`` sorts once per change (O(size log size)) and is cached.
    """

    def __init__(self, size: int = 1000) -> None:
        """Raises ValueError: size < 1."""
        if size < 1:
            raise ValueError(f"HistoryWindow.size: expected an int >= 1, got {size!r}")
        self._jobs: deque[tuple[float, float]] = deque(maxlen=size)
        self._cached: History | None = History()

    def record(self, runtime_s: float, service_gpu_s: float) -> None:
        """One finished job: its total run time (s) and attained GPU-seconds."""
        self._jobs.append((max(float(runtime_s), 0.0), max(float(service_gpu_s), 0.0)))
        self._cached = None

    def history(self) -> History:
        """The window as a :class:`History` (immutable; safe to put in a Snapshot)."""
        if self._cached is None:
            self._cached = History(
                tuple(sorted(r for r, _ in self._jobs)),
                tuple(sorted(s for _, s in self._jobs)),
            )
        return self._cached
