"""Node service: list, cordon, uncordon, drain, delete (each of the four leaves a node
event: who, when, why, and the jobs with tasks on the node).

Reading nodes is open to every role; changing a node's state needs an admin or agent
token (agent tokens are what automation such as the on-prem Pulumi stack uses to drain).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scheduler.services import backend
from scheduler.services.errors import ConflictError, NotFoundError
from scheduler.services.principal import Principal, require_role
from scheduler.services.records import as_dict
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.store import Store

DELETE_SILENCE_S = 30.0
"""Least silence (s, store clock) of a node ``delete`` accepts without ``force``, beyond
its fence bound: a node still heartbeating is refused (its tasks would run twice)."""

# action -> the NodeState value (scheduler.core.model.NodeState) the store records.
ACTIONS = {"cordon": "cordoned", "uncordon": "ready", "drain": "draining"}


@dataclass(frozen=True)
class NodeAllocated:
    """What the ledger holds on one node, summed over every job (no job is named, so every
    role may see it): ``cpu_m`` millicores, ``memory`` bytes, ``gpu`` devices, ``tasks``."""

    cpu_m: int = 0
    memory: int = 0
    gpu: int = 0
    tasks: int = 0


class NodeService:
    """Use cases on nodes. Args: store: the backend store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def list(self, principal: Principal) -> list[dict[str, Any]]:
        """Every node: name, address, state, capacity, allocated, labels, last heartbeat."""
        nodes: list[dict[str, Any]] = as_dict(self.store.list_nodes())
        return nodes

    def get(self, principal: Principal, name: str) -> dict[str, Any]:
        """One node with its ``events`` (automatic cordons, operators' actions...). An
        operator's event names only the affected jobs the caller may see (``jobs``: job
        names); the others are only counted (``other_jobs``), as on the node's
        allocations. Raises NotFoundError for an unknown node."""
        node = self.store.get_node(name)
        if node is None:
            raise NotFoundError(f"node {name!r} not found")
        events = [self._event_view(principal, e) for e in self.store.node_events(name)]
        return {**as_dict(node), "events": events}

    def events(self, principal: Principal, name: str) -> dict[str, Any]:
        """``{node, known, events, forgotten}``: the node's events (as :meth:`get`) and
        the events of it being forgotten (:meth:`Store.forgotten_nodes`: a node gone for
        good, e.g. an AKS node scaled down or Spot-evicted, whose record was removed), so
        that a node is still accounted for after its record is gone. Raises
        NotFoundError when the node is neither known nor forgotten."""
        known = self.store.get_node(name) is not None
        events = [self._event_view(principal, e) for e in self.store.node_events(name)]
        forgotten = [e for e in self.store.forgotten_nodes() if e.get("node") == name]
        if not known and not events and not forgotten:
            raise NotFoundError(f"node {name!r} not found (neither known nor forgotten)")
        return {"node": name, "known": known, "events": events, "forgotten": forgotten}

    def forgotten(self, principal: Principal) -> builtins.list[dict[str, Any]]:
        """Every forgotten-node event kept (the newest 100), oldest first:
        ``[{time (s), node, reason}]``."""
        return self.store.forgotten_nodes()

    @staticmethod
    def _event_view(principal: Principal, event: dict[str, Any]) -> dict[str, Any]:
        jobs = event.get("jobs")
        if not isinstance(jobs, list):
            return event
        seen = [j for j in jobs if isinstance(j, dict) and principal.may_use_vc(j.get("vc", ""))]
        return {
            **event,
            "jobs": [j.get("name", "") for j in seen],
            "other_jobs": len(jobs) - len(seen),
        }

    def allocated(self, principal: Principal, node: str | None = None) -> dict[str, NodeAllocated]:
        """What the ledger allocates per node, summed (``{node: NodeAllocated}``; a node
        with nothing allocated is absent). With ``node``, only that node's entry (raises
        NotFoundError for an unknown node). Sums name no job, so the figures are the same
        for every caller, as the totals of ``GET /api/v1/status`` are."""
        if node is not None:
            self.get(principal, node)
        sums: dict[str, list[int]] = {}
        for a in self.store.ledger().values():
            if node is not None and a.node != node:
                continue
            got = sums.setdefault(a.node, [0, 0, 0, 0])
            got[0] += a.cpu_m
            got[1] += a.memory
            got[2] += a.gpu
            got[3] += 1
        return {n: NodeAllocated(*v) for n, v in sums.items()}

    def allocations(self, principal: Principal, name: str) -> dict[str, Any]:
        """What is allocated on node ``name``, as far as the caller may see it.

        The API's visibility rule (:meth:`TokenInfo.may_use_vc`, as in
        :class:`scheduler.services.jobs.JobService`): tasks of jobs in the caller's VCs are
        listed one by one; tasks of other VCs' jobs are only summed, with no job name.

        Returns:
            ``{"tasks": [Allocation...] sorted by (job, role, index), "others": {"tasks": n,
            "cpu_m": millicores, "memory": bytes, "gpu": devices}}``.

        Raises:
            NotFoundError: unknown node.
        """
        self.get(principal, name)
        mine = [a for a in self.store.ledger().values() if a.node == name]
        vcs = {j.name: j.vc for j in self.store.get_jobs({a.job for a in mine}, with_spec=False)}
        tasks, others = [], {"tasks": 0, "cpu_m": 0, "memory": 0, "gpu": 0}
        for a in mine:
            if principal.may_use_vc(vcs.get(a.job, "")):
                tasks.append(a)
            else:
                others["tasks"] += 1
                others["cpu_m"] += a.cpu_m
                others["memory"] += a.memory
                others["gpu"] += a.gpu
        return {"tasks": sorted(tasks, key=lambda a: (a.job, a.role, a.index)), "others": others}

    def check_change(self, principal: Principal, name: str) -> None:
        """The refusals of :meth:`set_state` without changing anything (a form asks for
        confirmation only after these).

        Raises:
            ForbiddenError: a user token. NotFoundError: unknown node.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.AGENT)
        self.get(principal, name)

    def set_state(
        self, principal: Principal, name: str, action: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Cordon (no new tasks), uncordon (ready) or drain (cordon and move tasks off),
        with a node event saying who, when, why and which jobs had tasks on the node then
        (a drain requeues exactly those: the loop moves every task off a draining node).

        Args:
            action: ``cordon``, ``uncordon`` or ``drain``.
            reason: the operator's why (free text, kept in the event; None: none given).

        Returns:
            The node (as :meth:`get`) with ``affected_jobs``: names of the jobs with tasks
            on the node, as far as the caller may see them, and ``affected_other_jobs``:
            how many others.

        Raises:
            ForbiddenError: a user token. NotFoundError: unknown node.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.AGENT)
        why = (reason or "").strip()
        jobs = self._jobs_on(name)
        text = f"{action} by {principal.name}" + (f": {why}" if why else "")
        event = {"action": action, "by": principal.name, "why": why, "jobs": jobs}
        try:
            self.store.set_node_state(name, ACTIONS[action], reason=text, event=event)
        except backend.not_found_errors():
            raise NotFoundError(f"node {name!r} not found") from None
        view = self._event_view(principal, {"jobs": jobs})
        return {
            **self.get(principal, name),
            "affected_jobs": view["jobs"],
            "affected_other_jobs": view["other_jobs"],
        }

    def _jobs_on(self, name: str) -> builtins.list[dict[str, Any]]:
        """``[{name, uid, vc}]`` of the jobs the ledger gives tasks on node ``name`` (what
        an operator's event records; :meth:`_event_view` filters it per caller)."""
        held = sorted({a.job for a in self.store.ledger().values() if a.node == name})
        return [
            {"name": j.name, "uid": j.uid, "vc": j.vc}
            for j in self.store.get_jobs(held, with_spec=False)
        ]

    def delete(self, principal: Principal, name: str, *, force: bool = False) -> dict[str, Any]:
        """Delete node ``name`` (``pasture node delete``): it is lost now, its tasks are
        requeued without charge, and the loop removes its record (:meth:`Store.delete_node`).

        Refused while the node may still run tasks: its last heartbeat is younger than its
        fence bound (:func:`scheduler.rules.health.fenced_after_s`) or :data:`DELETE_SILENCE_S`,
        whichever is longer, unless ``force`` (the operator knows the machine is gone).
        A forced delete of a node heard from within its fence bound revokes its lease: its
        agent renews nothing more, its tasks are fenced by their lease, and the loop
        requeues them once the fence bound since the revoke has passed.

        Raises:
            ForbiddenError: not an admin token. NotFoundError: unknown node.
            ConflictError: the node heartbeated too recently (the message says when).
        """
        from scheduler.rules.health import fenced_after_s

        require_role(principal, TokenRole.ADMIN)
        node = self.store.get_node(name)
        if node is None:
            raise NotFoundError(f"node {name!r} not found")
        silent = self.store.now() - node.heartbeat
        need = max(fenced_after_s(node.fence_s), DELETE_SILENCE_S)
        if not force and node.state != "lost" and silent < need:
            raise ConflictError(
                f"node {name!r} heartbeated {silent:.0f} s ago; delete needs {need:.0f} s "
                "of silence (its tasks may still run): stop or drain its agent first, or "
                "delete with force=true when the machine is gone"
            )
        jobs = self._jobs_on(name)
        event = {"action": "delete", "by": principal.name, "why": "", "jobs": jobs}
        # forced while it may still run tasks: revoke its lease and let the loop requeue
        # its tasks only once they are surely fenced (no retry beside a running task)
        fencing = node.state != "lost" and silent < fenced_after_s(node.fence_s)
        # a heartbeat answered just before the revoke renewed the lease at most now
        fence_until = self.store.now() + fenced_after_s(node.fence_s) if fencing else None
        try:
            self.store.delete_node(
                name, f"deleted by {principal.name}", event=event, fence_until=fence_until
            )
        except backend.not_found_errors():
            raise NotFoundError(f"node {name!r} not found") from None
        view = self._event_view(principal, {"jobs": jobs})
        return {
            **self.get(principal, name),
            "affected_jobs": view["jobs"],
            "affected_other_jobs": view["other_jobs"],
        }
