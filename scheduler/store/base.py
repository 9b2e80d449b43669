"""The store's connection, keys, clock, version, notifications and errors.

:class:`StoreBase` is what every area of the store (jobs, tasks and ledger, nodes, cluster
read models; ``scheduler/store/store.py`` combines them) builds on: the redis-py client,
the key prefix, the registered Lua scripts and Redis' clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import redis

from scheduler.store import lua

DEFAULT_PREFIX = "pasture:"


class JobExistsError(ValueError):
    """A job with this name exists already (job names are unique)."""


class JobNotFoundError(LookupError):
    """No job of that name."""


class NodeNotFoundError(LookupError):
    """No node of that name."""


class JobActiveError(RuntimeError):
    """The job has not finished (deleting it needs a stop first)."""


class StoreBase:
    """Connection, keys and clock shared by the store's areas.

    Args:
        client: a redis-py client created with ``decode_responses=True``.
        prefix: key prefix (default ``pasture:``), shared with ``store/tokens.py``.
    """

    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.r = client
        self.p = prefix
        self._commit = client.register_script(lua.COMMIT)
        self.committed_at: float | None = None  # Redis time of this store's last commit
        self._report = client.register_script(lua.REPORT_TASK)
        self._heartbeat = client.register_script(lua.HEARTBEAT)
        self._release = client.register_script(lua.RELEASE)
        self._create_job = client.register_script(lua.CREATE_JOB)

    @classmethod
    def from_settings(cls, redis_settings: Any, **kwargs: Any) -> Self:
        """Store for a :class:`scheduler.settings.RedisSettings`."""
        return cls(redis_settings.client(**kwargs))

    # ---- keys -----------------------------------------------------------------------
    def k(self, *parts: str) -> str:
        return self.p + ":".join(parts)

    @property
    def loop_channel(self) -> str:
        return self.p + "notify:loop"

    def node_channel(self, node: str) -> str:
        return self.p + "notify:node:" + node

    # ---- clock / version ------------------------------------------------------------
    def now(self) -> float:
        """Redis server time in seconds."""
        s, us = self.r.time()
        return float(s + us / 1e6)

    def version(self) -> int:
        """Ledger version: bumped by every allocation, release and node change."""
        return int(self.r.get(self.k("version")) or 0)

    # ---- notifications --------------------------------------------------------------
    def notify_loop(self, kind: str) -> None:
        """Wake the loop (kind: submit | stop | task | node)."""
        self.r.publish(self.loop_channel, kind)

    def notify_node(self, node: str, kind: str = "bindings", pipe: Any = None) -> None:
        """Wake a node's agent: a message on its channel and one pending entry on its
        ``node:<node>:wake`` list (what the agent's blocking read waits on; at most one
        kept). With ``pipe`` only queued on it."""
        p = pipe if pipe is not None else self.r.pipeline(transaction=True)
        p.publish(self.node_channel(node), kind)
        p.lpush(self.k("node", node, "wake"), kind)
        p.ltrim(self.k("node", node, "wake"), 0, 0)
        if pipe is None:
            p.execute()

    def wait_bindings(self, node: str, timeout_s: float) -> bool:
        """Block until ``node``'s agent is woken (:meth:`notify_node`, the commit) or
        ``timeout_s`` passes (BLPOP on ``node:<node>:wake``; the entry is durable, so a
        wake-up sent while the agent was away is not lost). True when woken."""
        return self.r.blpop([self.k("node", node, "wake")], timeout=timeout_s) is not None

    def subscribe(self, *channels: str) -> redis.client.PubSub:
        """A PubSub subscribed to ``channels`` (e.g. ``store.loop_channel``)."""
        ps = self.r.pubsub(ignore_subscribe_messages=True)
        ps.subscribe(*channels)
        return ps

    def batch(self) -> Any:
        """A :class:`scheduler.store.batch.WriteBatch` on this store (writes queued for one
        round trip)."""
        from scheduler.store.batch import WriteBatch

        return WriteBatch(self)

    # ---- reads ----------------------------------------------------------------------
    def _read_hashes(self, keys: list[str], fields: Sequence[str] | None) -> list[dict[str, str]]:
        """Each key's hash in one round trip: every field, or only ``fields`` (absent ones
        left out, as HGETALL would), in the order of ``keys``."""
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            if fields is None:
                pipe.hgetall(key)
            else:
                pipe.hmget(key, fields)
        rows: list[dict[str, str]] = pipe.execute()
        if fields is None:
            return rows
        return [{k: v for k, v in zip(fields, row, strict=True) if v is not None} for row in rows]
