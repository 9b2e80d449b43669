"""Leases, fencing and lost-node detection: the arithmetic the agent and the loop share.

Pure (no Redis, no clock: callers pass monotonic readings). The argument for why a task
never runs in two places at once is in docs/faults.md; in short:

- an agent renews its lease with every heartbeat it gets an answer to; the lease runs
  from the moment the heartbeat was *sent* (agent's monotonic clock), so it never starts
  later than the heartbeat the store recorded;
- when ``lease_s`` passes without a renewal the agent (and, for the process executor, a
  watchdog next to each task) kills its tasks; they are surely dead ``fence_s`` after the
  last renewing heartbeat was sent (``fence_s = lease_s + the executor's kill bound``);
- the loop declares the node lost only after it has *observed* the node silent for
  :func:`lost_after_s`, which is longer than ``fence_s`` even when the two clocks run at
  rates that differ by :data:`CLOCK_RATE_BOUND` each. Only clock *rates* matter, never
  their offsets (nothing compares timestamps taken on different machines).
"""

from __future__ import annotations

CLOCK_RATE_BOUND = 1e-3
"""Largest rate error of a monotonic clock against real time (1000 ppm). Linux's NTP
discipline slews CLOCK_MONOTONIC by at most 500 ppm (``MAXFREQ``, kernel/time/ntp.c), and
an undisciplined quartz oscillator is specified within about 100 ppm; 1000 ppm covers
both with room to spare."""

UNHEALTHY_FRACTION = 0.55
"""Share of watched nodes that, when stale at the same time, makes the loop stop declaring
nodes lost (a *disruption*). Kubernetes' node lifecycle controller uses the same default
(``--unhealthy-zone-threshold=0.55``, kube-controller-manager): when that many nodes of a
zone stop reporting together, a shared cause (the store, the network, the control plane)
is far likelier than independent node failures, and evicting would restart everything."""

UNHEALTHY_MIN_NODES = 3
"""Fewest stale nodes that can make a disruption: Kubernetes counts a zone unhealthy only
with more than 2 not-ready nodes (``notReadyNodes > 2``, nodelifecycle
ComputeZoneState), so one or two failed machines in a small cluster are still handled as
lost nodes."""


DEFAULT_LEASE_S = 180.0
"""An agent's lease when its settings give none (s, agent clock). Long enough that a store
outage of 2 minutes (a Redis restart, a Sentinel failover) fences nothing: the last
renewal was sent at most one heartbeat interval (5 s) before the outage began and the
first one after it answers within another interval, so outages up to ``lease - 2 x
heartbeat interval`` (170 s with the defaults) restart no task. Kubernetes keeps a silent
node's pods running 40 s + 5 min (node-monitor grace period + default eviction
toleration), Slurm a silent slurmd's jobs 300 s (``SlurmdTimeout``)."""

DEFAULT_LOST_AFTER_S = 300.0
"""``loop.heartbeat_timeout_s`` by default (s): observed silence after which the loop
declares a node lost (Slurm's ``SlurmdTimeout`` default; Kubernetes evicts after 340 s).
Always above the default lease's fence (180 s + kill bound), see :func:`lost_after_s`."""


def default_lease_s(heartbeat_interval_s: float) -> float:
    """An agent's lease when its settings give none: :data:`DEFAULT_LEASE_S`, and at least
    three heartbeat intervals (two heartbeats may be lost, or slow, without the agent
    fencing itself)."""
    return max(DEFAULT_LEASE_S, 3.0 * heartbeat_interval_s)


def fence_s(lease_s: float, kill_bound_s: float) -> float:
    """Seconds (agent clock) from a renewing heartbeat's send until the agent's tasks are
    surely dead when no renewal follows: the lease plus the executor's kill bound."""
    return lease_s + kill_bound_s


def lost_after_s(heartbeat_timeout_s: float, node_fence_s: float) -> float:
    """Observed silence (s, loop's monotonic clock) after which the loop may declare a node
    lost and requeue its tasks: ``heartbeat_timeout_s``, but never before the node's fence
    has surely run out, i.e. more than ``fence_s * (1 + rho) / (1 - rho)`` with
    ``rho = CLOCK_RATE_BOUND`` (the agent's clock may run slow, the loop's fast)."""
    rho = CLOCK_RATE_BOUND
    return max(heartbeat_timeout_s, node_fence_s * (1 + rho) / (1 - rho))


def is_disruption(stale: int, watched: int) -> bool:
    """Whether ``stale`` silent nodes out of ``watched`` (nodes not already lost) are a
    cluster-wide disruption rather than node failures (see :data:`UNHEALTHY_FRACTION`)."""
    return stale >= UNHEALTHY_MIN_NODES and watched > 0 and stale / watched >= UNHEALTHY_FRACTION


class HeartbeatWatch:
    """How long the loop has *observed* each node silent.

    A node's silence runs from the loop's monotonic time at which it first saw the node's
    current heartbeat value, so it never exceeds the real silence, and is measured only
    over time the loop could read the store: :meth:`blind` (the store did not answer, or
    the loop did not run) restarts every node's silence from the next reading. A gap
    between two readings longer than ``max_gap_s`` counts as blindness too (the store may
    have hung rather than refused, leaving agents no chance to heartbeat).

    Args:
        max_gap_s: longest gap between two readings still counted as observed; the loop
            uses half the heartbeat timeout, so that a node declared lost had at least
            half the timeout of answering store to heartbeat in.
    """

    def __init__(self, max_gap_s: float) -> None:
        self.max_gap_s = max_gap_s
        self._seen: dict[str, tuple[float, float]] = {}
        self._last: float | None = None

    def blind(self) -> None:
        """The store could not be read (or the loop stopped): forget every observation."""
        self._seen.clear()
        self._last = None

    def silences(self, heartbeats: dict[str, float], now: float) -> dict[str, float]:
        """Record one reading ``{node: heartbeat value}`` at monotonic ``now`` (s) and
        return ``{node: observed silence in seconds}``."""
        if self._last is not None and now - self._last > self.max_gap_s:
            self._seen.clear()
        self._last = now
        out = {}
        for node, hb in heartbeats.items():
            seen = self._seen.get(node)
            if seen is None or seen[0] != hb:
                seen = (hb, now)
                self._seen[node] = seen
            out[node] = now - seen[1]
        for node in [n for n in self._seen if n not in heartbeats]:
            del self._seen[node]
        return out


__all__ = [
    "CLOCK_RATE_BOUND",
    "DEFAULT_LEASE_S",
    "DEFAULT_LOST_AFTER_S",
    "UNHEALTHY_FRACTION",
    "UNHEALTHY_MIN_NODES",
    "HeartbeatWatch",
    "default_lease_s",
    "fence_s",
    "is_disruption",
    "lost_after_s",
]
