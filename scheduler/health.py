"""Node health for the loop: which silent nodes are lost, and when not to believe silence.

The loop calls :meth:`NodeHealth.check` once per cycle with the nodes it read and
:meth:`NodeHealth.blind` whenever a cycle failed (the store did not answer). The rules
(docs/faults.md):

- a node is lost once the loop *observed* it silent (no new heartbeat value) for longer
  than :func:`~scheduler.store.lease.lost_after_s`: the heartbeat timeout, and never before
  the node's agent has surely fenced its tasks;
- silence is only counted over time the loop could read the store: an outage of the store
  or of the loop restarts every node's silence when the store answers again, so agents
  get a full timeout to heartbeat after any outage;
- when so many nodes are silent at once that a shared cause is likelier
  (:func:`~scheduler.store.lease.is_disruption`, Kubernetes' unhealthy-zone rule), no node
  is declared lost: the cluster condition ``disruption`` is raised instead
  (``Store.cluster_status()["condition"]``, ``GET /status``) and cleared when it ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from scheduler.store.lease import HeartbeatWatch, is_disruption, lost_after_s
from scheduler.store.records import NodeRecord

log = logging.getLogger("pasture.loop")


class NodeHealth:
    """Lost-node detection and the disruption condition over one store.

    Args:
        store: the :class:`scheduler.store.Store`.
        heartbeat_timeout_s: ``loop.heartbeat_timeout_s`` (s).
        clock: monotonic clock (s) silences are measured on.
    """

    def __init__(
        self, store: Any, heartbeat_timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.timeout = heartbeat_timeout_s
        self.clock = clock
        # a gap of half the timeout between two readings counts as not observed: a node
        # then declared lost had at least half the timeout of answering store to heartbeat
        self._watch = HeartbeatWatch(max_gap_s=heartbeat_timeout_s / 2)
        self._condition: dict[str, Any] | None = None
        self._condition_read = False  # a restarted loop reads the one it may have left

    def blind(self) -> None:
        """The store could not be read: restart every silence at the next reading."""
        self._watch.blind()

    def check(self, nodes: dict[str, NodeRecord], now: float) -> list[str]:
        """Mark lost the nodes observed silent past their limit, or raise the condition
        instead (see the module docstring). ``nodes`` (name -> record) is updated in place;
        ``now`` (s, store clock) dates the condition. Returns the names marked lost."""
        if not self._condition_read:
            self._condition, self._condition_read = self.store.condition(), True
        silent = self._watch.silences({n: r.heartbeat for n, r in nodes.items()}, self.clock())
        watched = [r for r in nodes.values() if r.state != "lost"]
        stale = []
        for r in watched:
            limit = lost_after_s(self.timeout, r.fence_s)
            if silent[r.name] > limit:
                stale.append((r, silent[r.name], limit))
        if is_disruption(len(stale), len(watched)):
            if self._condition is None:
                self._condition = {
                    "kind": "disruption",
                    "since": now,
                    "message": f"{len(stale)} of {len(watched)} nodes silent at once; "
                    "not declaring them lost (a shared cause is likelier: store, network)",
                    "nodes": sorted(r.name for r, _, _ in stale),
                }
                log.warning("cluster condition: %s", self._condition["message"])
                self.store.set_condition(self._condition)
            return []
        if self._condition is not None:
            log.warning("cluster condition %s cleared", self._condition["kind"])
            self._condition = None
            self.store.set_condition(None)
        for r, quiet, limit in stale:
            reason = f"no heartbeat observed for {quiet:.1f} s (limit {limit:.1f} s)"
            log.warning("node %s lost: %s", r.name, reason)
            nodes[r.name] = self.store.set_node_state(r.name, "lost", reason)
        return [r.name for r, _, _ in stale]
