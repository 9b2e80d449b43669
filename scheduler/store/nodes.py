"""Nodes: registration, heartbeats (with usage samples) and node states (``nodes``,
``node:<node>``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduler.store.base import NodeNotFoundError, StoreBase
from scheduler.store.codec import as_json, encode_fields
from scheduler.store.records import NodeRecord

USAGE_SAMPLE_S = 5.0  # at most one usage-history sample per node per this many seconds
USAGE_SAMPLES = 720  # samples kept per node: one hour at USAGE_SAMPLE_S


def heartbeat_args(prefix: str, node: str, usage: dict[str, Any]) -> list[Any]:
    """ARGV of the heartbeat scripts (lua.HEARTBEAT / lua.NODE_HEARTBEAT): prefix, node,
    usage JSON, usage sample JSON ('' = none), sample interval (s), samples kept.

    The report's per-task figures (``usage["tasks"]``, :mod:`scheduler.agent.taskusage`)
    go only into the history sample (:func:`usage_sample`), never into the node's
    ``usage`` field that every token reads (``GET /nodes``): they name jobs."""
    sample = usage_sample(usage)
    node_usage = {k: v for k, v in usage.items() if k != "tasks"} if usage else usage
    return [
        prefix,
        node,
        json.dumps(node_usage),
        json.dumps(sample) if sample else "",
        USAGE_SAMPLE_S,
        USAGE_SAMPLES,
    ]


NODE_STATES = ("ready", "cordoned", "draining", "lost")

VERSIONED_NODE_FIELDS = (
    "address",
    "cpu_m",
    "memory",
    "gpu",
    "gpu_model",
    "labels",
    "state",
    "port_range",
    "lease_s",
    "fence_s",
)
"""Node fields that the loop keeps in its view between ledger versions (capacity, labels,
state, address, ports, and the lease and fence bounds its lost-node rule reads): a
registration that changes one makes a new version, so the loop reads the node again."""


def registration(
    node: NodeRecord, old: Mapping[str, str], now: float
) -> tuple[dict[str, str], bool]:
    """An agent's registration of ``node`` over the node's stored hash ``old`` ({} when
    new), at ``now`` (s, the store's clock): sets ``node.state`` (a cordoned or draining
    state is kept; a lost, unknown or missing one becomes ready), ``heartbeat`` and
    ``registered``.

    Returns:
        (the hash fields to write, whether one of :data:`VERSIONED_NODE_FIELDS` changed).
    """
    state = old.get("state", "ready")
    if state == "lost" or state not in NODE_STATES:
        state = "ready"
    node.state, node.heartbeat, node.registered = state, now, now
    fields = encode_fields(
        {
            "name": node.name,
            "address": node.address,
            "cpu_m": node.cpu_m,
            "memory": node.memory,
            "gpu": node.gpu,
            "gpu_model": node.gpu_model,
            "labels": node.labels,
            "state": state,
            "port_range": list(node.port_range),
            "heartbeat": now,
            "registered": now,
            "usage": node.usage,
            "executor": node.executor,
            # the agent's lease and fence: the loop declares the node lost only after the
            # fence has surely run out (scheduler/store/lease.py, docs/faults.md)
            "lease_s": node.lease_s,
            "fence_s": node.fence_s,
            # heartbeats further apart than two intervals are a gap (lua.HEARTBEAT)
            "heartbeat_interval_s": node.heartbeat_interval_s,
            # whom its tasks run as: the login `job exec` uses (services/jobexec.py)
            "task_users": node.task_users,
            "task_login": node.task_login,
        }
    )
    return fields, any(old.get(k) != fields[k] for k in VERSIONED_NODE_FIELDS)


# ARGV: prefix, node names. Each node's heartbeat, gap_from and gap_to fields ('' when
# none), in order: three entries per node.
_HEARTBEATS = r"""
local out = {}
for i = 2, #ARGV do
  local v = redis.call('HMGET', ARGV[1] .. 'node:' .. ARGV[i], 'heartbeat', 'gap_from', 'gap_to')
  for j = 1, 3 do out[#out + 1] = v[j] or '' end
end
return out
"""


def usage_sample(usage: dict[str, Any]) -> dict[str, Any] | None:
    """The compact history sample of an agent's usage report: ``{cpu, mem, gpu}`` in
    percent (``gpu``: mean utilisation over the GPUs NVML measured, None without any), and
    ``tasks`` when the report has per-task figures: ``{"<uid>/<role>-<index>": {job,
    attempt, cpu (cores), rss (bytes), cpu_s (CPU seconds so far), maxrss (peak bytes so
    far), gpus: [[index, util percent, memory used bytes]]}}``
    (keyed by the job's uid: a job submitted again under a deleted job's name never reads
    the old job's samples). None when the report has no CPU figure."""
    if not isinstance(usage, dict) or usage.get("cpu_percent") is None:
        return None
    total = usage.get("memory_total") or 0
    mem = 100.0 * float(usage.get("memory_used") or 0) / total if total else 0.0
    gpus = [
        g
        for g in usage.get("gpus") or []
        if isinstance(g, dict) and g.get("util_percent") is not None
    ]
    gpu = round(sum(float(g["util_percent"]) for g in gpus) / len(gpus), 1) if gpus else None
    out: dict[str, Any] = {
        "cpu": round(float(usage["cpu_percent"]), 1),
        "mem": round(mem, 1),
        "gpu": gpu,
    }
    tasks = {}
    for t in usage.get("tasks") or []:
        if not isinstance(t, dict) or not t.get("task"):
            continue
        tasks[f"{t.get('uid', '')}/{t['task']}"] = {
            "job": t.get("job", ""),
            "attempt": t.get("attempt"),
            "cpu": t.get("cpu_cores"),
            "rss": t.get("memory_rss"),
            "cpu_s": t.get("cpu_s"),
            "maxrss": t.get("max_rss"),
            "gpus": [
                [g.get("index"), g.get("util_percent"), g.get("memory_used")]
                for g in t.get("gpus") or []
                if isinstance(g, dict)
            ],
        }
    if tasks:  # (an empty table would come back from Lua's cjson as {} either way)
        out["tasks"] = tasks
    return out


_NODE_FIELDS_NO_USAGE = [
    "name",
    "address",
    "cpu_m",
    "memory",
    "gpu",
    "gpu_model",
    "labels",
    "state",
    "port_range",
    "heartbeat",
    "registered",
    "executor",
    "lease_s",
    "fence_s",
    "state_reason",
    "deleted",
    "heartbeat_interval_s",
    "gap_from",
    "gap_to",
    "revoked",
    "fence_until",
    "task_users",
    "task_login",
]


class NodesMixin(StoreBase):
    """The node area of :class:`scheduler.store.Store`."""

    def register_node(self, node: NodeRecord) -> NodeRecord:
        """Create or update a node from its agent. Keeps a cordoned / draining state; a lost
        node becomes ready. Bumps the version when capacity, labels or state change."""
        nk = self.k("node", node.name)
        now = self.now()
        old = self.r.hgetall(nk)
        if old.get("revoked") == "1":  # force-deleted: no agent registers it back
            return self._node_from_hash(old)
        fields, changed = registration(node, old, now)
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(nk, mapping=fields)
        pipe.hdel(nk, "deleted")  # a deleted node whose agent came back is a node again
        pipe.sadd(self.k("nodes"), node.name)
        if changed:
            pipe.incr(self.k("version"))
            pipe.publish(self.loop_channel, "node")
        pipe.execute()
        return node

    def heartbeat(self, node: str, usage: dict[str, Any]) -> str:
        """Record a heartbeat; returns the node's state ('' when not registered).

        Also appends a usage sample (:func:`usage_sample`) to the node's capped usage
        history when the last sample is at least ``USAGE_SAMPLE_S`` seconds old; the
        history keeps the newest ``USAGE_SAMPLES`` (one hour at 5 s), never more.
        """
        return str(self._heartbeat(args=heartbeat_args(self.p, node, usage)))

    @staticmethod
    def _node_from_hash(h: dict[str, str]) -> NodeRecord:
        pr = as_json(h.get("port_range")) or [20000, 29999]
        return NodeRecord(
            name=h["name"],
            address=h.get("address", ""),
            cpu_m=int(h.get("cpu_m") or 0),
            memory=int(h.get("memory") or 0),
            gpu=int(h.get("gpu") or 0),
            gpu_model=h.get("gpu_model") or None,
            labels=as_json(h.get("labels")) or {},
            state=h.get("state", "ready"),
            port_range=(int(pr[0]), int(pr[1])),
            heartbeat=float(h.get("heartbeat") or 0),
            registered=float(h.get("registered") or 0),
            usage=as_json(h.get("usage")) or {},
            executor=h.get("executor", ""),
            lease_s=float(h.get("lease_s") or 0),
            fence_s=float(h.get("fence_s") or 0),
            state_reason=h.get("state_reason", ""),
            deleted=h.get("deleted") == "1",
            heartbeat_interval_s=float(h.get("heartbeat_interval_s") or 0),
            gap_from=float(h.get("gap_from") or 0),
            gap_to=float(h.get("gap_to") or 0),
            revoked=h.get("revoked") == "1",
            fence_until=float(h.get("fence_until") or 0),
            task_users=h.get("task_users", ""),
            task_login=h.get("task_login", ""),
        )

    def list_nodes(self, *, with_usage: bool = True) -> list[NodeRecord]:
        """All registered nodes, by name (``with_usage=False`` skips the usage report)."""
        names = sorted(self.r.smembers(self.k("nodes")))
        rows = self._read_hashes(
            [self.k("node", n) for n in names], None if with_usage else _NODE_FIELDS_NO_USAGE
        )
        return [self._node_from_hash(h) for h in rows if h.get("name")]

    def heartbeats(self, names: list[str]) -> dict[str, float]:
        """``{node: last heartbeat time (s)}`` of ``names`` in one round trip (0.0 for a node
        without one); the loop's per-cycle read, lighter than :meth:`list_nodes`."""
        if not names:
            return {}
        return {n: beat for n, (beat, _, _) in self.heartbeats_and_gaps(names).items()}

    def heartbeats_and_gaps(self, names: list[str]) -> dict[str, tuple[float, float, float]]:
        """``{node: (last heartbeat, gap_from, gap_to)}`` (s, store clock; 0.0 when none)
        of ``names`` in one round trip: the loop's per-cycle read. The gap is the node's
        last heartbeat gap longer than two heartbeat intervals (:class:`NodeRecord`)."""
        if not names:
            return {}
        values = self.r.eval(_HEARTBEATS, 0, self.p, *names)  # one reply, not one per node
        out = {}
        for i, n in enumerate(names):
            beat, gap_from, gap_to = values[3 * i : 3 * i + 3]
            out[n] = (float(beat or 0), float(gap_from or 0), float(gap_to or 0))
        return out

    def get_node(self, name: str) -> NodeRecord | None:
        h = self.r.hgetall(self.k("node", name))
        return self._node_from_hash(h) if h.get("name") else None

    def set_node_state(
        self, name: str, state: str, reason: str = "", event: dict[str, Any] | None = None
    ) -> NodeRecord:
        """Cordon (``cordoned``), drain (``draining``), uncordon (``ready``) or mark ``lost``.

        Args:
            event: when given, a node event ``{time, state, reason, **event}`` is appended
                in the same transaction (an operator's action: who, why, which jobs; see
                :meth:`add_node_event`).

        Raises NodeNotFoundError, ValueError for an unknown state. Bumps the version and
        wakes the loop.
        """
        if state not in NODE_STATES:
            raise ValueError(f"node state must be one of {NODE_STATES}, got {state!r}")
        nk = self.k("node", name)
        if not self.r.exists(nk):
            raise NodeNotFoundError(f"no node named {name!r}")
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(nk, mapping={"state": state, "state_reason": reason})
        if event is not None:
            entry = {"time": self.now(), "state": state, "reason": reason, **event}
            pipe.rpush(self.k("node", name, "events"), json.dumps(entry))
            pipe.ltrim(self.k("node", name, "events"), -self.NODE_EVENTS, -1)
        pipe.incr(self.k("version"))
        pipe.publish(self.loop_channel, "node")
        self.notify_node(name, "node", pipe=pipe)
        pipe.execute()
        node = self.get_node(name)
        assert node is not None
        return node

    def delete_node(
        self,
        name: str,
        reason: str,
        event: dict[str, Any] | None = None,
        *,
        fence_until: float | None = None,
    ) -> NodeRecord:
        """Delete node ``name`` for an operator (``pasture node delete``): it is ``lost``
        now with ``reason`` and a node event (the loop requeues its tasks without charge),
        and the loop removes its record at its next heartbeat check
        (:class:`scheduler.rules.health.NodeHealth`). An agent that heartbeats again makes it a
        ready node again. The caller checks that the node is silent (fenced). ``event``:
        fields added to the node event (the operator's ``action``, ``by``, ``jobs``:
        :meth:`add_node_event`).

        ``fence_until`` (s, store clock; a forced delete of a node that may still run
        tasks): its lease is *revoked* instead: the node is ``cordoned`` now, its agent's
        heartbeats are answered ``revoked`` and renew nothing (lua.HEARTBEAT), so its tasks
        are fenced by their own lease; the loop declares it lost (and requeues its tasks)
        once the store clock passes ``fence_until`` (:class:`scheduler.rules.health.NodeHealth`).

        Raises:
            NodeNotFoundError: no such node.
        """
        nk = self.k("node", name)
        if not self.r.exists(nk):
            raise NodeNotFoundError(f"no node named {name!r}")
        pipe = self.r.pipeline(transaction=True)
        if fence_until is not None:
            fields = {"state": "cordoned", "revoked": "1", "fence_until": str(fence_until)}
            pipe.hset(nk, mapping={**fields, "state_reason": reason, "deleted": "1"})
        else:
            pipe.hset(nk, mapping={"state": "lost", "state_reason": reason, "deleted": "1"})
        pipe.incr(self.k("version"))
        pipe.publish(self.loop_channel, "node")
        pipe.execute()
        self.add_node_event(name, reason, event)
        node = self.get_node(name)
        assert node is not None
        return node

    def forget_node(self, name: str) -> None:
        """Remove node ``name``'s record, events and usage history (the loop, after
        :meth:`delete_node`). Bumps the version; an unknown node is fine."""
        nk = self.k("node", name)
        pipe = self.r.pipeline(transaction=True)
        pipe.srem(self.k("nodes"), name)
        pipe.delete(nk, f"{nk}:events", f"{nk}:usage")
        pipe.incr(self.k("version"))
        pipe.publish(self.loop_channel, "node")
        pipe.execute()

    FORGOTTEN = 100  # forgotten-node events kept

    def record_forgotten(self, name: str, reason: str) -> None:
        """Append ``{time (s), node, reason}`` to the events of forgotten nodes (newest
        :attr:`FORGOTTEN` kept): the record of a node whose own record and events
        :meth:`forget_node` removes (a node gone for good, or deleted by an operator)."""
        key = self.k("nodes", "forgotten")
        entry = {"time": self.now(), "node": name, "reason": reason}
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(key, json.dumps(entry))
        pipe.ltrim(key, -self.FORGOTTEN, -1)
        pipe.execute()

    def forgotten_nodes(self) -> list[dict[str, Any]]:
        """Events of forgotten nodes, oldest first (:meth:`record_forgotten`)."""
        return [json.loads(e) for e in self.r.lrange(self.k("nodes", "forgotten"), 0, -1)]

    # ---- node events (automatic cordons, operators' actions) ---------------------------
    NODE_EVENTS = 100  # events kept per node

    def add_node_event(self, name: str, reason: str, extra: dict[str, Any] | None = None) -> None:
        """Append ``{time (s), state, reason}`` to the node's events (newest
        ``NODE_EVENTS`` kept), e.g. the GPU health probe cordoning it. An operator's
        cordon, drain or uncordon (:meth:`set_node_state` with ``event``) adds ``action``,
        ``by`` (token name), ``why`` (the operator's text, "" when none) and ``jobs``
        (``[{name, uid, vc}]`` of the jobs with tasks on the node then: the jobs a drain
        requeues)."""
        key = self.k("node", name, "events")
        state = self.r.hget(self.k("node", name), "state")
        pipe = self.r.pipeline(transaction=True)
        entry = {"time": self.now(), "state": state, "reason": reason, **(extra or {})}
        pipe.rpush(key, json.dumps(entry))
        pipe.ltrim(key, -self.NODE_EVENTS, -1)
        pipe.execute()

    def request_cordon(self, name: str, reason: str) -> bool:
        """Cordon node ``name`` with ``reason`` and a node event when it is ``ready`` (the
        GPU health probe's request; a node in another state keeps it). Returns True when
        it cordoned."""
        if self.r.hget(self.k("node", name), "state") != "ready":
            return False
        self.set_node_state(name, "cordoned", reason)
        self.add_node_event(name, reason)
        return True

    def node_events(self, name: str) -> list[dict[str, Any]]:
        """The node's events, oldest first (see :meth:`add_node_event`)."""
        return [json.loads(e) for e in self.r.lrange(self.k("node", name, "events"), 0, -1)]
