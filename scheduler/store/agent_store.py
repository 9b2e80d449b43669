"""The agent's side of the store: the only reads and writes a node's credential needs.

:class:`NodeStore` is what :class:`scheduler.agent.agent.Agent` uses. It works with the
per-node Redis ACL user of :mod:`scheduler.store.acl` (``node-<name>``), so every write
goes to this node's own keys::

    register_node  HSET node:<n> (state kept; lost -> ready), SADD nodes,
                   XADD node:<n>:reports {kind: register}, PUBLISH notify:loop
    heartbeat      script: HSET node:<n> heartbeat/usage, usage history and the
                   cluster's per-minute sums; lost -> ready with a {kind: node} report
    report_task    script lua.NODE_REPORT: XADD node:<n>:reports {kind: task, job, key,
                   attempt, state, ...}, SADD reports:pending, PUBLISH notify:loop only
                   when the node was not pending yet (one round trip)
    (every XADD)   SADD reports:pending <n> in the same transaction, so the loop reads
                   only the streams of nodes with something queued
    wait_bindings  BLPOP node:<n>:wake (written by the commit and the loop's task updates)
    reads          node:<n>:tasks (bindings), node:<n>:launch:<job> (the spec, user and
                   sealed secrets token of a job bound here: written by the commit,
                   deleted by the release), job:<job>:tasks (task records: desired
                   state, peers' addresses and ports), TIME; never job:<job> itself

The loop applies the reports (:func:`scheduler.store.reports.apply_node_reports`) only for
tasks the ledger binds to this node, so a stolen node credential cannot change another
node's tasks, a job, a VC, a token or the ledger.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from scheduler.states import TaskState
from scheduler.store.lua import NODE_HEARTBEAT, NODE_REPORT
from scheduler.store.nodes import heartbeat_args
from scheduler.store.records import Launch, NodeRecord, TaskRecord
from scheduler.store.store import Store

# Entries a node's report stream keeps at most (approximate trim at XADD): a loop that is
# down for long loses the oldest reports beyond this, never memory.
REPORTS_MAXLEN = 10000

# Node fields whose change the loop must see as a new ledger version (capacity, labels,
# state, address, ports): a registration that changes one says so in its report.
_VERSIONED = ("address", "cpu_m", "memory", "gpu", "gpu_model", "labels", "state", "port_range")


class NodeStore:
    """One node's narrow view of the store (see the module docstring).

    Args:
        client: a redis-py client (``decode_responses=True``), normally logged in as the
            node's ACL user ``node-<node>``.
        node: this node's name; every write is to this node's keys.
        prefix: key prefix (default ``pasture:``).
    """

    def __init__(self, client: redis.Redis, node: str, prefix: str | None = None) -> None:
        self._s = Store(client) if prefix is None else Store(client, prefix)
        self.r = client
        self.p = self._s.p
        self.node = node
        self._heartbeat = client.register_script(NODE_HEARTBEAT)
        self._node_report = client.register_script(NODE_REPORT)

    @classmethod
    def from_settings(cls, redis_settings: Any, node: str, **kwargs: Any) -> NodeStore:
        """NodeStore of ``node`` for a :class:`scheduler.settings.RedisSettings`."""
        return cls(redis_settings.client(**kwargs), node)

    # ---- keys and channels ----------------------------------------------------------
    def reports_key(self, node: str | None = None) -> str:
        """The report stream of ``node`` (default this node): ``node:<node>:reports``."""
        return self._s.k("node", node or self.node, "reports")

    @property
    def loop_channel(self) -> str:
        return self._s.loop_channel

    def node_channel(self, node: str) -> str:
        return self._s.node_channel(node)

    def subscribe(self, *channels: str) -> redis.client.PubSub:
        """A PubSub on ``channels`` (only this node's channel is permitted)."""
        return self._s.subscribe(*channels)

    # ---- reads ----------------------------------------------------------------------
    def now(self) -> float:
        """Redis server time in seconds."""
        return self._s.now()

    def node_bindings(self, node: str) -> list[tuple[str, str]]:
        """(job, task key) pairs the ledger binds to ``node`` (this node's set)."""
        return self._s.node_bindings(node)

    def wait_bindings(self, node: str, timeout_s: float) -> bool:
        """Block until this node's agent is woken or ``timeout_s`` passes
        (:meth:`scheduler.store.Store.wait_bindings`)."""
        self._own(node)
        return self._s.wait_bindings(node, timeout_s)

    def bound_tasks(self, node: str) -> dict[tuple[str, str], TaskRecord]:
        """This node's bound tasks (:meth:`scheduler.store.Store.bound_tasks`)."""
        self._own(node)
        return self._s.bound_tasks(node)

    def task(self, job: str, key: str) -> TaskRecord | None:
        """The task record ``key`` (``<role>-<index>``) of ``job``, or None."""
        return self._s.task(job, key)

    def launch(self, node: str, job: str) -> Launch | None:
        """This node's launch record of ``job`` (:meth:`scheduler.store.Store.launch`), or
        None: the job's record itself is not readable by a node's user."""
        self._own(node)
        return self._s.launch(node, job)

    def tasks(self, job: str) -> list[TaskRecord]:
        """Tasks of the job's current attempt (its peers included: the discovery
        environment), in role declaration order of the job's spec as this node's launch
        record holds it (any order when it holds none)."""
        raw = self.r.hgetall(self._s.k("job", job) + ":tasks")
        tasks = [TaskRecord.from_dict(json.loads(v)) for v in raw.values()]
        launch = self._s.launch(self.node, job)
        order = {r: i for i, r in enumerate((launch.spec if launch else {}).get("roles", {}))}
        return sorted(tasks, key=lambda t: (order.get(t.role, 99), t.index))

    def sealed_secrets(self, job: str) -> str | None:
        """The job's sealed secrets token (opened at task start-up) from this node's launch
        record, or None."""
        launch = self._s.launch(self.node, job)
        return (launch.sealed_secrets or None) if launch else None

    # ---- writes (own keys only) -----------------------------------------------------
    def register_node(self, node: NodeRecord) -> NodeRecord:
        """Create or update this node's record from its agent. Keeps a cordoned / draining
        state; a lost node becomes ready. The loop bumps the version on the register
        report when capacity, labels, address, ports or state changed.

        Raises ValueError when ``node.name`` is not this store's node.
        """
        self._own(node.name)
        nk = self._s.k("node", node.name)
        now = self.now()
        old = self.r.hgetall(nk)
        if old.get("revoked") == "1":  # force-deleted (NodesMixin.delete_node): stays so
            node.revoked = True
            return node
        state = old.get("state", "ready")
        if state == "lost" or state not in ("ready", "cordoned", "draining"):
            state = "ready"
        node.state, node.heartbeat, node.registered = state, now, now
        fields = {
            "name": node.name,
            "address": node.address,
            "cpu_m": str(node.cpu_m),
            "memory": str(node.memory),
            "gpu": str(node.gpu),
            "gpu_model": node.gpu_model or "",
            "labels": json.dumps(node.labels),
            "state": state,
            "port_range": json.dumps(list(node.port_range)),
            "heartbeat": str(now),
            "registered": str(now),
            "usage": json.dumps(node.usage),
            "executor": node.executor,
            # the agent's lease and fence: the loop declares the node lost only after the
            # fence has surely run out (scheduler/store/lease.py, docs/faults.md)
            "lease_s": str(node.lease_s),
            "fence_s": str(node.fence_s),
            # heartbeats further apart than two intervals are a gap (lua.HEARTBEAT)
            "heartbeat_interval_s": str(node.heartbeat_interval_s),
            # whom its tasks run as: the login `job exec` uses (services/jobexec.py)
            "task_users": node.task_users,
            "task_login": node.task_login,
        }
        changed = any(old.get(k) != fields[k] for k in _VERSIONED)
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(nk, mapping=fields)
        pipe.sadd(self._s.k("nodes"), node.name)
        pipe.xadd(
            self.reports_key(),
            {"kind": "register", "changed": "1" if changed else "0"},
            maxlen=REPORTS_MAXLEN,
            approximate=True,
        )
        pipe.sadd(self._s.k("reports", "pending"), self.node)
        pipe.publish(self.loop_channel, "node")
        pipe.execute()
        return node

    def heartbeat(self, node: str, usage: dict[str, Any]) -> str:
        """Record a heartbeat with a usage report (``{cpu_percent, memory_used, ...}``);
        returns the node's state ('' when not registered). Usage sampling as
        :meth:`scheduler.store.store.Store.heartbeat`."""
        self._own(node)
        return str(self._heartbeat(args=[*heartbeat_args(self.p, node, usage), REPORTS_MAXLEN]))

    def report_task(
        self,
        job: str,
        key: str,
        attempt: int,
        node: str,
        state: TaskState | str,
        exit_code: int | None = None,
        message: str = "",
        handle: str = "",
        cause: str = "",
        diagnosis: dict[str, Any] | None = None,
        pipe: redis.client.Pipeline | None = None,
        usage: dict[str, Any] | None = None,
    ) -> bool:
        """Queue a report on a task of this node (state running / succeeded / failed /
        stopped / lost, exit code, message, executor handle, infrastructure cause or "";
        ``usage``: the ended task's totals ``{cpu_s, max_rss}``,
        :meth:`scheduler.agent.taskusage.TaskUsageSampler.final`)
        for the loop, which applies it when the ledger binds ``job``/``key`` at ``attempt``
        to this node. One round trip (lua.NODE_REPORT: XADD, SADD, and a PUBLISH when it
        made the node pending); with ``pipe`` only queued on it (a caller reporting many
        at once). Returns True
        (queued; whether it applies is the loop's decision). Raises ValueError for
        another node."""
        self._own(node)
        fields = {
            "kind": "task",
            "job": job,
            "key": key,
            "attempt": str(attempt),
            "state": str(state),
            "exit_code": "" if exit_code is None else str(exit_code),
            "message": message,
            "handle": handle,
            "cause": cause,
            # issue 19: the failure's class (scheduler.rules.diagnosis), JSON
            "diagnosis": json.dumps(diagnosis) if diagnosis else "",
            # issue 34: CPU seconds and peak resident bytes at its end (sacct's), JSON
            "usage": json.dumps(usage) if usage else "",
        }
        args = [self.p, self.node, REPORTS_MAXLEN]
        for k, v in fields.items():
            args += [k, v]
        self._node_report(args=args, client=pipe or self.r)
        return True

    def request_cordon(self, node: str, reason: str) -> bool:
        """Ask the loop to cordon this node with ``reason`` (the GPU health probe, issue
        19): a ``{kind: cordon}`` report; the loop cordons it if it is ready
        (:meth:`scheduler.store.store.Store.request_cordon`). Returns True (queued)."""
        self._own(node)
        pipe = self.r.pipeline(transaction=True)
        pipe.xadd(
            self.reports_key(),
            {"kind": "cordon", "reason": reason[:1000]},
            maxlen=REPORTS_MAXLEN,
            approximate=True,
        )
        pipe.sadd(self._s.k("reports", "pending"), self.node)
        pipe.publish(self.loop_channel, "node")
        pipe.execute()
        return True

    def _own(self, node: str) -> None:
        if node != self.node:
            raise ValueError(f"this store writes only node {self.node!r}'s records, got {node!r}")


__all__ = ["NODE_HEARTBEAT", "REPORTS_MAXLEN", "Launch", "NodeStore"]
