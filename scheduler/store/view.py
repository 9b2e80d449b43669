"""The loop's copy of what the ledger version guards: nodes, VCs and the ledger.

Every write that changes allocations, a node's capacity or state, or the VCs bumps the
ledger ``version`` (README.md). :class:`LedgerView` keeps those three read models in the
loop's memory, tagged with the version they are exact at, and re-reads them only when the
store's version is not the one it tracked (a version gap)::

    refresh(store)     GET version; equal to the view's -> nothing read
                       (else: nodes, VCs, ledger read again: a full resync)
    committed(...)     the loop's own commit moved the version by exactly one:
                       its binds and grows are added to the view, which follows
    released(...)      the loop's own releases, likewise (entries dropped)
    invalidate()       after a refused commit or a failed cycle: the next refresh
                       re-reads everything

So a change by anyone else (the API cordoning a node, a second loop, an agent's
registration applied from its report, a restore from backup) always shows up as a gap and
a full re-read; the loop's own writes cost no read at all. The commit script still checks
the version, job states and node states itself, so a view that is somehow stale can only
get a Decision refused, never double-allocate.

Heartbeat times change all the time without a version bump: :meth:`nodes_now` reads them
alone (one HGET per node, one round trip) over the cached records.
"""

from __future__ import annotations

from typing import Any

from scheduler.store.records import Allocation, NodeRecord


class LedgerView:
    """Nodes (without usage), VCs and ledger at ``version`` (see the module docstring)."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.nodes: dict[str, NodeRecord] = {}
        self.vcs: dict[str, dict[str, Any]] = {}
        self.ledger: dict[str, Allocation] = {}
        self._by_job: dict[str, set[str]] = {}  # job -> its ledger keys
        self.resyncs = 0  # full re-reads so far (for tests and the bench)

    def refresh(self, store: Any) -> int:
        """Bring the view to the store's version (a full re-read on a gap); returns it.
        The version is read first, so data changed meanwhile shows up as the next gap."""
        version = store.version()
        if version != self.version:
            self.nodes = {n.name: n for n in store.list_nodes(with_usage=False)}
            self.vcs = store.vcs()
            self.ledger = store.ledger()
            self._by_job = {}
            for key, a in self.ledger.items():
                self._by_job.setdefault(a.job, set()).add(key)
            self.version = version
            self.resyncs += 1
        return version

    def nodes_now(self, store: Any) -> dict[str, NodeRecord]:
        """The cached node records with their current heartbeat times (read now)."""
        beats = store.heartbeats(list(self.nodes))
        for name, rec in self.nodes.items():
            rec.heartbeat = beats.get(name, rec.heartbeat)
        return dict(self.nodes)

    def committed(self, before: int, after: int, payload: dict[str, Any]) -> None:
        """The loop's commit of ``payload`` at version ``before`` answered ``after``."""
        if self.version != before or after not in (before, before + 1):
            self.invalidate()
            return
        for b in [*payload["binds"], *payload["grows"]]:
            for t in b["tasks"]:
                key = f"{b['job']}/{t['key']}"
                self.ledger[key] = Allocation.from_dict(t["alloc"])
                self._by_job.setdefault(b["job"], set()).add(key)
        self.version = after

    def released(self, job: str, entries: int, after: int) -> None:
        """The loop released ``job`` (``entries`` dropped; version ``after``)."""
        if not entries:
            return
        if self.version is None or after != self.version + 1:
            self.invalidate()
            return
        keys = self._by_job.pop(job, set())
        if len(keys) != entries:  # the view did not hold what the store dropped
            self.invalidate()
            return
        for key in keys:
            self.ledger.pop(key, None)
        self.version = after

    def invalidate(self) -> None:
        """Forget the version: the next :meth:`refresh` re-reads everything."""
        self.version = None
