"""Node health for the loop: which silent nodes are lost, and when not to believe silence.

The loop calls :meth:`NodeHealth.check` once per cycle with the nodes it read and
:meth:`NodeHealth.blind` whenever a cycle failed (the store did not answer). The rules
(docs/faults.md, "Node lifecycle"):

- a node is lost once the loop *observed* it silent (no new heartbeat value) for longer
  than :func:`~scheduler.store.lease.lost_after_s`: the heartbeat timeout, and never before
  the node's agent has surely fenced its tasks;
- silence is only counted over time the loop could read the store: an outage of the store
  or of the loop restarts every node's silence when the store answers again, so agents
  get a full timeout to heartbeat after any outage;
- the disruption guard is computed over a *window*, not cycle by cycle: a node counts as
  silent when it has not renewed its lease within the last lease period (its ``lease_s``;
  half the heartbeat timeout for an agent without a lease), and a node declared lost within
  the last heartbeat timeout still counts. When that many nodes are silent together
  (:func:`~scheduler.store.lease.is_disruption`, Kubernetes' unhealthy-zone rule) the
  cluster condition ``disruption`` is raised (``Store.cluster_status()["condition"]``,
  ``GET /status``) and nodes are not declared lost at the ordinary limit; the condition is
  cleared when every node it names has heartbeated again or was declared lost (one node
  coming back does not release the others at the ordinary limit). Staggered heartbeats
  no longer let the nodes of one outage be declared lost one cycle apart, each alone a
  minority;
- a disruption only delays: a node silent for longer than ``disruption_lost_after_s`` is
  declared lost even in a disruption, at most one node every ``disruption_interval_s``
  (Kubernetes' secondary eviction rate, ``--secondary-node-eviction-rate``, which is
  0.01 nodes/s; here never zero, so that nodes the cloud removed for good, as on a Spot
  eviction or an autoscaler scale-down, give back their tasks and GPUs in bounded time).
  With ``k`` such nodes the last is lost at most
  ``disruption_lost_after_s + (k - 1) * disruption_interval_s`` (+ one reading interval)
  after it went silent;
- a node whose Kubernetes Node object is gone (``node_gone``; the loop in a Kubernetes pod
  asks the API server, :mod:`scheduler.k8s.capacity`) is lost as soon as its fence
  has surely run out, disruption or not: the cloud removed the machine (such nodes count
  toward no disruption; the API server is asked about a node at most every
  :data:`GONE_RECHECK_S`);
- a node an operator deleted (``pasture node delete``, :meth:`Store.delete_node`) is lost
  at once; its record is removed at the next check, after the loop requeued its tasks. A
  forced delete of a node that may still run tasks revokes its lease instead: it is lost
  (and its tasks requeued) only once its ``fence_until`` passed, so no retry starts while
  the old tasks may still run. A node whose Kubernetes Node object is gone is deleted the
  same way (a scale-down or a Spot eviction: VMSS instances never come back under the
  same name), so that its lost record counts toward no pool's maxCount and no alert; the
  store keeps an event of each forgotten node (:meth:`Store.forgotten_nodes`).

Each declaration leaves a node event and a log line saying why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from scheduler.store.lease import CLOCK_RATE_BOUND, HeartbeatWatch, is_disruption, lost_after_s
from scheduler.store.records import NodeRecord

log = logging.getLogger("pasture.loop")

NodeGone = Callable[[Iterable[str]], set[str]]
"""``names -> the names among them whose Kubernetes Node object no longer exists``."""

DISRUPTION_LOST_FACTOR = 4.0
"""``disruption_lost_after_s`` defaults to this many heartbeat timeouts."""
DISRUPTION_INTERVAL_FACTOR = 0.5
"""``disruption_interval_s`` defaults to this many heartbeat timeouts."""
GONE_RECHECK_S = 10.0
"""The API server is asked about one silent node at most once per this many seconds."""


def fenced_after_s(node_fence_s: float) -> float:
    """Observed silence (s, loop clock) after which a node's tasks are surely fenced: its
    ``fence_s`` stretched by the clock-rate bound (as in :func:`lost_after_s`)."""
    rho = CLOCK_RATE_BOUND
    return node_fence_s * (1 + rho) / (1 - rho)


class NodeHealth:
    """Lost-node detection and the disruption condition over one store.

    Args:
        store: the :class:`scheduler.store.Store`.
        heartbeat_timeout_s: ``loop.heartbeat_timeout_s`` (s).
        clock: monotonic clock (s) silences are measured on.
        disruption_lost_after_s: observed silence (s) after which a node is lost even in a
            disruption; default :data:`DISRUPTION_LOST_FACTOR` heartbeat timeouts (never
            below the node's ordinary limit).
        disruption_interval_s: at most one node is declared lost in a disruption per this
            many seconds; default :data:`DISRUPTION_INTERVAL_FACTOR` heartbeat timeouts.
        node_gone: asks which nodes no longer have a Kubernetes Node object (None: not on
            Kubernetes). Asked only about nodes silent past their lease; an error it raises
            is logged and the nodes are treated as present.
    """

    def __init__(
        self,
        store: Any,
        heartbeat_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        disruption_lost_after_s: float | None = None,
        disruption_interval_s: float | None = None,
        node_gone: NodeGone | None = None,
    ) -> None:
        self.store = store
        self.timeout = heartbeat_timeout_s
        self.clock = clock
        self.disruption_lost_after_s = (
            DISRUPTION_LOST_FACTOR * heartbeat_timeout_s
            if disruption_lost_after_s is None
            else disruption_lost_after_s
        )
        self.disruption_interval_s = (
            DISRUPTION_INTERVAL_FACTOR * heartbeat_timeout_s
            if disruption_interval_s is None
            else disruption_interval_s
        )
        self.node_gone = node_gone
        # a gap of half the timeout between two readings counts as not observed: a node
        # then declared lost had at least half the timeout of answering store to heartbeat
        self._watch = HeartbeatWatch(max_gap_s=heartbeat_timeout_s / 2)
        self._condition: dict[str, Any] | None = None
        self._condition_read = False  # a restarted loop reads the one it may have left
        self._recent_lost: dict[str, float] = {}  # node -> clock when declared lost
        self._last_disruption_loss: float | None = None
        self._deleted_seen: set[str] = set()  # deleted nodes seen lost by one check
        self._asked: dict[str, float] = {}  # node -> clock when node_gone was asked

    def blind(self) -> None:
        """The store could not be read: restart every silence at the next reading."""
        self._watch.blind()

    def _window_s(self, r: NodeRecord) -> float:
        """How long a node may go without a heartbeat before it counts as silent for the
        disruption guard: its lease (half the timeout without one), at most its limit."""
        lease = r.lease_s if r.lease_s > 0 else self.timeout / 2
        return min(lease, lost_after_s(self.timeout, r.fence_s))

    def check(self, nodes: dict[str, NodeRecord], now: float) -> list[str]:
        """Mark lost the nodes observed silent past their limit, or raise the condition
        instead (see the module docstring). ``nodes`` (name -> record) is updated in place;
        ``now`` (s, store clock) dates the condition and events. Returns the names marked
        lost."""
        if not self._condition_read:
            self._condition, self._condition_read = self.store.condition(), True
        mono = self.clock()
        self._forget_deleted(nodes)
        silent = self._watch.silences({n: r.heartbeat for n, r in nodes.items()}, mono)
        lost: dict[str, str] = {}
        for r in nodes.values():  # force-deleted: lost once the revoked lease surely ran out
            if r.revoked and r.state != "lost" and now >= r.fence_until:
                lost[r.name] = f"{r.state_reason}; its lease was revoked and its fence has run out"
        watched = [r for r in nodes.values() if r.state != "lost" and not r.revoked]
        self._recent_lost = {
            n: t
            for n, t in self._recent_lost.items()
            if mono - t <= self.timeout and n in nodes and nodes[n].state == "lost"
        }
        suspects = [r for r in watched if silent[r.name] > self._window_s(r)]
        stale = [r for r in suspects if silent[r.name] > lost_after_s(self.timeout, r.fence_s)]
        gone = self._gone(suspects, silent)
        for name in gone:
            lost[name] = "its Kubernetes Node object is gone (the cloud removed the machine)"
        # a machine the cloud removed is no sign of a disruption: counted nowhere
        watched = [r for r in watched if r.name not in lost]
        suspects = [r for r in suspects if r.name not in lost]
        stale = [r for r in stale if r.name not in lost]
        counted = len(suspects) + len(self._recent_lost)
        total = len(watched) + len(self._recent_lost)
        # a raised condition holds while any node it names is still silent: one node
        # coming back does not release the others at the ordinary limit (issue 32 item 7)
        named = set(self._condition.get("nodes", [])) if self._condition is not None else set()
        holding = any(r.name in named for r in suspects)
        disrupted = bool(suspects) and (is_disruption(counted, total) or holding)
        if disrupted and stale:
            self._raise(suspects, counted, total, now)
        elif not disrupted and self._condition is not None:
            log.warning("cluster condition %s cleared", self._condition["kind"])
            self._condition = None
            self.store.set_condition(None)
        if disrupted:
            lost.update(self._lost_in_disruption(stale, silent, mono, exclude=lost))
        else:
            for r in stale:
                limit = lost_after_s(self.timeout, r.fence_s)
                quiet = silent[r.name]
                lost.setdefault(
                    r.name, f"no heartbeat observed for {quiet:.1f} s (limit {limit:.1f} s)"
                )
        for name, reason in lost.items():
            log.warning("node %s lost: %s", name, reason)
            if name in gone:  # gone for good: forgotten once its tasks are requeued
                nodes[name] = self.store.delete_node(name, f"lost: {reason}")
                continue
            nodes[name] = self.store.set_node_state(name, "lost", reason)
            self.store.add_node_event(name, f"lost: {reason}")
            if name not in gone:
                self._recent_lost[name] = mono
        return sorted(lost)

    def _gone(self, suspects: list[NodeRecord], silent: dict[str, float]) -> list[str]:
        """Suspects whose Node object is gone and whose fence has surely run out."""
        mono = self.clock()
        ask = [
            r
            for r in suspects
            if r.executor == "kubernetes"
            and silent[r.name] > fenced_after_s(r.fence_s)
            and mono - self._asked.get(r.name, -GONE_RECHECK_S) >= GONE_RECHECK_S
        ]
        if self.node_gone is None or not ask:
            return []
        self._asked = {n: t for n, t in self._asked.items() if mono - t < GONE_RECHECK_S}
        self._asked.update((r.name, mono) for r in ask)
        try:
            gone = self.node_gone([r.name for r in ask])
        except Exception as exc:  # the API server is one more thing that can be down
            log.warning("cannot ask Kubernetes which nodes are gone: %s", exc)
            return []
        return [r.name for r in ask if r.name in gone]

    def _raise(self, suspects: list[NodeRecord], counted: int, of: int, now: float) -> None:
        if self._condition is not None:
            return
        self._condition = {
            "kind": "disruption",
            "since": now,
            "message": f"{counted} of {of} nodes silent within a lease period; not "
            "declaring them lost at the ordinary limit (a shared cause is likelier: store, "
            f"network); a node silent {self.disruption_lost_after_s:g} s is lost anyway, "
            f"one every {self.disruption_interval_s:g} s",
            "nodes": sorted({r.name for r in suspects} | set(self._recent_lost)),
        }
        log.warning("cluster condition: %s", self._condition["message"])
        self.store.set_condition(self._condition)

    def _lost_in_disruption(
        self,
        stale: list[NodeRecord],
        silent: dict[str, float],
        mono: float,
        exclude: dict[str, str],
    ) -> dict[str, str]:
        """The one node (the longest silent) past ``disruption_lost_after_s`` that the rate
        limit lets go now, as ``{name: reason}``."""
        due = [
            r
            for r in stale
            if r.name not in exclude
            and silent[r.name]
            > max(self.disruption_lost_after_s, lost_after_s(self.timeout, r.fence_s))
        ]
        last = self._last_disruption_loss
        if not due or (last is not None and mono - last < self.disruption_interval_s):
            return {}
        r = max(due, key=lambda r: (silent[r.name], r.name))
        self._last_disruption_loss = mono
        return {
            r.name: f"no heartbeat observed for {silent[r.name]:.1f} s during a disruption "
            f"(limit in a disruption {self.disruption_lost_after_s:g} s, at most one node "
            f"every {self.disruption_interval_s:g} s)"
        }

    def _forget_deleted(self, nodes: dict[str, NodeRecord]) -> None:
        """Remove the records of nodes an operator deleted once the loop has seen them
        lost (their tasks were marked lost in the cycle that read them so)."""
        for name in [n for n, r in nodes.items() if r.deleted and r.state == "lost"]:
            if name in self._deleted_seen:
                log.warning(
                    "node %s forgotten: %s; its tasks were requeued",
                    name,
                    nodes[name].state_reason or "deleted",
                )
                self.store.record_forgotten(name, nodes[name].state_reason or "deleted")
                self.store.forget_node(name)
                del nodes[name]
                self._deleted_seen.discard(name)
            else:  # first seen: the lifecycle pass of this cycle requeues its tasks
                self._deleted_seen.add(name)
