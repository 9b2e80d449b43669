"""Scheduled jobs in Redis (:mod:`scheduler.spec.schedule`): one hash per schedule and the
set of its runs' job names.

Keys (prefix ``pasture:``): ``schedules`` (set of names), ``schedule:<name>`` (hash:
``spec`` JSON of the ScheduleSpec, ``user``, ``vc``, ``created`` and ``last``, the
latest scheduled time started, Unix s), ``schedule:<name>:runs`` (set of run job names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from scheduler.store.base import JobExistsError, JobNotFoundError, StoreBase


@dataclass
class ScheduleRecord:
    """A stored schedule: ``spec`` (ScheduleSpec as a dict), who made it, its VC, when
    (``created``), the latest scheduled time started (``last``) and its runs' names."""

    name: str
    spec: dict[str, Any]
    user: str
    vc: str
    created: float
    last: float
    runs: list[str]


class ScheduleStore:
    """Reads and writes of schedules on a store's Redis client and key prefix."""

    def __init__(self, store: StoreBase) -> None:
        self.store = store
        self.r = store.r

    def _key(self, name: str, *rest: str) -> str:
        return self.store.k("schedule", name, *rest)

    def create(self, spec: Any, user: str) -> ScheduleRecord:
        """Store a new schedule (a validated ScheduleSpec). Raises JobExistsError when a
        schedule of that name exists."""
        now = self.store.now()
        mapping = {
            "spec": json.dumps(spec.model_dump(mode="json")),
            "user": user,
            "vc": spec.job.vc,
            "created": repr(now),
            "last": repr(now),
        }
        if not self.r.sadd(self.store.k("schedules"), spec.name):
            raise JobExistsError(f"schedule {spec.name!r} already exists")
        self.r.hset(self._key(spec.name), mapping=mapping)
        return ScheduleRecord(
            spec.name, json.loads(mapping["spec"]), user, spec.job.vc, now, now, []
        )

    def get(self, name: str) -> ScheduleRecord | None:
        """The schedule ``name``, None when there is none."""
        h = self.r.hgetall(self._key(name))
        if not h:
            return None
        runs = sorted(self.r.smembers(self._key(name, "runs")))
        return ScheduleRecord(
            name,
            json.loads(h["spec"]),
            h["user"],
            h["vc"],
            float(h["created"]),
            float(h["last"]),
            runs,
        )

    def names(self) -> list[str]:
        """Every schedule's name, sorted."""
        return sorted(self.r.smembers(self.store.k("schedules")))

    def all(self) -> list[ScheduleRecord]:
        """Every schedule."""
        return [s for s in (self.get(n) for n in self.names()) if s is not None]

    def delete(self, name: str) -> None:
        """Remove a schedule (its runs stay jobs of their own). Raises JobNotFoundError."""
        if not self.r.srem(self.store.k("schedules"), name):
            raise JobNotFoundError(f"schedule {name!r} not found")
        self.r.delete(self._key(name), self._key(name, "runs"))

    def set_suspend(self, name: str, suspend: bool) -> ScheduleRecord:
        """Suspend or resume. Raises JobNotFoundError."""
        rec = self.get(name)
        if rec is None:
            raise JobNotFoundError(f"schedule {name!r} not found")
        rec.spec["suspend"] = suspend
        self.r.hset(self._key(name), "spec", json.dumps(rec.spec))
        return rec

    def started(self, name: str, scheduled: float, run: str) -> None:
        """Record that the run of ``scheduled`` (job ``run``) was created."""
        self.r.hset(self._key(name), "last", repr(scheduled))
        self.r.sadd(self._key(name, "runs"), run)

    def forget_runs(self, name: str, runs: list[str]) -> None:
        """Drop runs whose jobs are gone."""
        if runs:
            self.r.srem(self._key(name, "runs"), *runs)
