"""The loop's writes of one cycle, sent to Redis in one round trip.

:class:`WriteBatch` queues job transitions, task record updates, events, job fields and
releases (``lua.RELEASE``) on one MULTI/EXEC pipeline through the store's own methods, so
the loop never touches a raw pipeline and a cycle costs one round trip for all its
lifecycle writes instead of one (or three, for a WATCH/MULTI release) per job. Everything
queued is applied atomically, in order, by :meth:`WriteBatch.execute`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.store.records import TaskRecord


@dataclass
class Released:
    """A release done by a batch: the job, the ledger entries dropped and the ledger
    version right after it (unchanged when nothing was dropped)."""

    job: str
    entries: int
    version: int


class WriteBatch:
    """Writes queued for one round trip (see the module docstring).

    Args:
        store: the :class:`scheduler.store.Store` whose methods queue the commands.
    """

    def __init__(self, store: Any) -> None:
        self._s = store
        self._pipe = store.r.pipeline(transaction=True)
        self._releases: list[tuple[int, str]] = []  # (position in the pipeline, job)

    def __len__(self) -> int:
        return len(self._pipe)

    def transition(
        self, name: str, state: str, reason: str, *, now: float, attempt: int, **fields: Any
    ) -> None:
        """:meth:`Store.transition` (``now`` and ``attempt`` are required here)."""
        self._s.transition(name, state, reason, now=now, attempt=attempt, pipe=self._pipe, **fields)

    def update_tasks(self, job: str, tasks: Iterable[TaskRecord], notify: bool = True) -> None:
        """:meth:`Store.update_tasks`."""
        self._s.update_tasks(job, tasks, notify=notify, pipe=self._pipe)

    def add_event(self, job: str, reason: str, *, now: float, state: str, attempt: int) -> None:
        """:meth:`Store.add_event` at ``now`` with the job's ``state`` and ``attempt``."""
        self._s.add_event(job, reason, at=(now, state, attempt), pipe=self._pipe)

    def set_job_fields(self, name: str, **fields: Any) -> None:
        """:meth:`Store.set_job_fields`."""
        self._s.set_job_fields(name, _pipe=self._pipe, **fields)

    def expire_job_at(self, name: str, when: float) -> None:
        """:meth:`Store.expire_job_at`."""
        self._s.expire_job_at(name, when, pipe=self._pipe)

    def release(self, job: str) -> None:
        """:meth:`Store.release` (``lua.RELEASE``); its outcome is in :meth:`execute`'s
        answer."""
        self._releases.append((len(self._pipe), job))
        self._s._release(args=[self._s.p, job], client=self._pipe)

    def execute(self) -> list[Released]:
        """Send everything queued (one MULTI/EXEC; nothing when empty) and start afresh.
        Returns the releases done, in order. Raises redis errors."""
        if not len(self._pipe):
            return []
        results = self._pipe.execute()
        out = [Released(job, int(results[i][0]), int(results[i][1])) for i, job in self._releases]
        self._releases = []
        return out
