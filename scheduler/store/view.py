"""The loop's copies: what the ledger version guards (nodes, VCs and the ledger:
:class:`LedgerView`) and the active jobs (:class:`JobsView`).

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

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from scheduler.core.model import Node, NodeState, TaskPlacement
from scheduler.core.resources import Resources
from scheduler.spec.model import JobSpec
from scheduler.store.records import Allocation, JobRecord, NodeRecord

if TYPE_CHECKING:
    from scheduler.store.store import Store


class LedgerView:
    """Nodes (without usage), VCs and ledger at ``version`` (see the module docstring)."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.nodes: dict[str, NodeRecord] = {}
        self.vcs: dict[str, dict[str, Any]] = {}
        self.ledger: dict[str, Allocation] = {}
        self._by_job: dict[str, set[str]] = {}  # job -> its ledger keys
        # derived from the ledger, kept up to date entry by entry (see derived())
        self.allocated: dict[str, Resources] = {}  # node -> what its entries hold
        self.used_ports: dict[str, set[int]] = {}
        self.used_gpus: dict[str, set[int]] = {}
        self._core_nodes: dict[str, Node] = {}  # the core's Node, rebuilt when changed
        self._changed_nodes: set[str] = set()
        self._placements: dict[str, tuple[TaskPlacement, ...]] = {}
        self.resyncs = 0  # full re-reads so far (for tests and the bench)

    def refresh(self, store: Store) -> int:
        """Bring the view to the store's version (a full re-read on a gap); returns it.
        The version is read first, so data changed meanwhile shows up as the next gap."""
        version = store.version()
        if version != self.version:
            self.nodes = {n.name: n for n in store.list_nodes(with_usage=False)}
            self.vcs = store.vcs()
            ledger = store.ledger()
            self.ledger, self._by_job = {}, {}
            self.allocated, self.used_ports, self.used_gpus = {}, {}, {}
            self._core_nodes, self._placements = {}, {}
            for key, a in ledger.items():
                self._add(key, a)
            self.version = version
            self.resyncs += 1
        return version

    def nodes_now(self, store: Store) -> dict[str, NodeRecord]:
        """The cached node records with their current heartbeat times and heartbeat gaps
        (read now)."""
        beats = store.heartbeats_and_gaps(list(self.nodes))
        for name, rec in self.nodes.items():
            if name in beats:
                rec.heartbeat, rec.gap_from, rec.gap_to = beats[name]
        return dict(self.nodes)

    def committed(self, before: int, after: int, payload: dict[str, Any]) -> None:
        """The loop's commit of ``payload`` at version ``before`` answered ``after``."""
        if self.version != before or after not in (before, before + 1):
            self.invalidate()
            return
        for b in [*payload["binds"], *payload["grows"]]:
            for t in b["tasks"]:
                self._add(f"{b['job']}/{t['key']}", Allocation.from_dict(t["alloc"]))
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
            self._remove(key)
        self.version = after

    def _add(self, key: str, a: Allocation) -> None:
        if key in self.ledger:
            self._remove(key)
        self.ledger[key] = a
        self._by_job.setdefault(a.job, set()).add(key)
        self.allocated[a.node] = self.allocated.get(a.node, Resources()) + Resources(
            a.cpu_m, a.memory, a.gpu
        )
        self.used_ports.setdefault(a.node, set()).update(a.ports)
        self.used_gpus.setdefault(a.node, set()).update(a.gpus)
        self._changed_nodes.add(a.node)
        self._placements.pop(a.job, None)

    def _remove(self, key: str) -> None:
        a = self.ledger.pop(key, None)
        if a is None:
            return
        keys = self._by_job.get(a.job)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_job[a.job]
        self.allocated[a.node] = self.allocated[a.node] - Resources(a.cpu_m, a.memory, a.gpu)
        self.used_ports[a.node].difference_update(a.ports)
        self.used_gpus[a.node].difference_update(a.gpus)
        self._changed_nodes.add(a.node)
        self._placements.pop(a.job, None)

    def core_nodes(self) -> tuple[Node, ...]:
        """The core's nodes (capacity, what the ledger allocates there, labels, state);
        only nodes whose entries changed are built again."""
        out = []
        for name, n in self.nodes.items():
            node = self._core_nodes.get(name)
            if node is None or name in self._changed_nodes or node.state.value != n.state:
                node = self._core_nodes[name] = Node(
                    name=n.name,
                    capacity=Resources(n.cpu_m, n.memory, n.gpu),
                    allocated=self.allocated.get(n.name, Resources()),
                    labels=dict(n.labels),
                    gpu_model=n.gpu_model,
                    state=NodeState(n.state),
                )
            out.append(node)
        self._changed_nodes.clear()
        return tuple(out)

    def placements(self, job: str) -> tuple[TaskPlacement, ...]:
        """The ledger's placements of ``job`` by (role, index); () when it holds none."""
        out = self._placements.get(job)
        if out is None:
            allocs = sorted(
                (self.ledger[k] for k in self._by_job.get(job, ())), key=lambda a: (a.role, a.index)
            )
            out = self._placements[job] = tuple(
                TaskPlacement(
                    role=a.role,
                    index=a.index,
                    node=a.node,
                    resources=Resources(a.cpu_m, a.memory, a.gpu),
                )
                for a in allocs
            )
        return out

    def invalidate(self) -> None:
        """Forget the version: the next :meth:`refresh` re-reads everything."""
        self.version = None


class JobsView:
    """The loop's copy of the active jobs' records and their validated specs.

    :meth:`read` reads ``jobs:active`` and takes the marks (``Store.take_marks``) each
    cycle, but reads records only of new jobs, of jobs in ``jobs:changed`` (stop requests,
    preemptions) and of ``stale`` ones (set by the loop: jobs its commit preempted); on a
    full pass every record. The loop applies its own transitions and binds to
    ``records`` as it writes them. Specs are read and validated once per (name,
    created); a stored spec that no longer validates (a record from before a rule was
    added, a restored backup) goes to ``invalid`` (``{name: why}``) instead, for the loop
    to fail that job: one bad record never fails a whole cycle."""

    def __init__(self) -> None:
        self.records: dict[str, JobRecord] = {}
        self.specs: dict[tuple[str, float], JobSpec] = {}
        self.stale: set[str] = set()
        self.invalid: dict[str, str] = {}

    def forget(self) -> None:
        """Drop the records: the next :meth:`read` reads every one."""
        self.records.clear()

    def committed(self, payload: dict[str, Any], at: float) -> None:
        """Apply what the commit script wrote for ``payload``'s binds (state scheduled at
        ``at``, the commit's Redis time) without reading it; its preempted jobs are read
        next time."""
        for b in payload["binds"]:
            job = self.records.get(b["job"])
            if job is not None:
                job.state, job.reason = "scheduled", "placed on " + b["nodes"]
                job.scheduled_time = job.updated = at
                job.pending_reason = None
        self.stale = {p["job"] for p in payload["preemptions"]}

    def read(self, store: Store, full: bool) -> tuple[list[JobRecord], set[str]]:
        """``(active jobs with a spec, by name; jobs:dirty)`` (see the class docstring)."""
        names = store.active_job_names()
        dirty, changed = store.take_marks()
        for name in [n for n in self.records if n not in names]:
            del self.records[name]
        # task reports (dirty) leave the record as it was: only new jobs and records
        # changed by someone else are read
        want = names if full else (names - set(self.records)) | ((changed | self.stale) & names)
        self.stale = set()
        for rec in store.get_jobs(sorted(want), with_spec=False):
            self.records[rec.name] = rec
        live = {(j.name, j.created) for j in self.records.values()}
        for key in [k for k in self.specs if k not in live]:
            del self.specs[key]
        missing = [j.name for j in self.records.values() if (j.name, j.created) not in self.specs]
        for name in [n for n in self.invalid if n not in self.records]:
            del self.invalid[name]
        for name, raw in store.job_specs(missing).items():
            if name in self.records:
                try:
                    self.specs[(name, self.records[name].created)] = JobSpec.model_validate(raw)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    where = ".".join(str(x) for x in err["loc"])
                    self.invalid[name] = f"{where}: {err['msg']}".replace("\0", "\\0")[:300]
        active = [
            self.records[n]
            for n in sorted(self.records)
            if (n, self.records[n].created) in self.specs
        ]
        return active, dirty
