"""Waiting for pub/sub notifications, surviving Redis restarts.

Notifications are hints (see README.md): whoever waits also polls on a timer, so a
notification lost while Redis restarts only delays work. :class:`Notifications` therefore
turns connection errors into "nothing arrived" and subscribes again on the next wait.
"""

from __future__ import annotations

import contextlib
import logging
import time

import redis

from scheduler.store.store import Store

log = logging.getLogger("pasture.store")

MAX_DRAINED = 10_000  # queued messages dropped after a wake-up (they are only hints)


class Notifications:
    """Subscription to one channel of ``store``.

    ``wait(timeout_s)`` returns True when at least one message arrived within the timeout
    (and drains the ones queued behind it), False otherwise, including while Redis is
    unreachable (then it sleeps the timeout instead of spinning).
    """

    def __init__(self, store: Store, channel: str) -> None:
        self.store = store
        self.channel = channel
        self._ps: redis.client.PubSub | None = None

    def _pubsub(self) -> redis.client.PubSub:
        if self._ps is None:
            self._ps = self.store.subscribe(self.channel)
        return self._ps

    def wait(self, timeout_s: float) -> bool:
        try:
            ps = self._pubsub()
            msg = ps.get_message(timeout=timeout_s)
            got = msg is not None
            # drain only what is already here: waiting for a quiet gap instead kept the
            # loop from cycling at all while submits arrived faster than one per 10 ms
            for _ in range(MAX_DRAINED):
                if msg is None:
                    break
                msg = ps.get_message(timeout=0)
            return got
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            log.warning("notifications on %s unavailable (%s); polling", self.channel, exc)
            self.close()
            time.sleep(timeout_s)
            return False

    def close(self) -> None:
        if self._ps is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self._ps.close()
            self._ps = None
