"""Jobs: create, read, list, stop, transitions and events (``job:<job>``,
``job:<job>:events``, ``jobs``, ``jobs:vc:<vc>``, ``jobs:active``, ``jobs:dirty``).

``jobs`` holds every job's key scored by its creation time; ``jobs:vc:<vc>`` the same for
one VC's jobs only, so that listing a tenant's jobs reads nothing of another tenant's
(issue 32 item 5: one tenant's many jobs cost another's listing nothing). Both are
written by ``lua.CREATE_JOB`` and emptied by :meth:`JobsMixin.delete_job`; a store
written before the per-VC index gets it from :mod:`scheduler.store.migrate`."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from scheduler import jobkey
from scheduler.jobref import DEFAULT_VC, exists_message, job_key
from scheduler.states import JobState
from scheduler.store.base import JobActiveError, JobExistsError, JobNotFoundError, StoreBase
from scheduler.store.codec import as_float, as_int, as_json, encode_fields, event
from scheduler.store.records import JobRecord

_JOB_FIELDS_NO_SPEC = [
    "name",
    "vc",
    "user",
    "priority",
    "state",
    "reason",
    "attempt",
    "failures",
    "created",
    "updated",
    "scheduled_time",
    "start_time",
    "end_time",
    "pending_reason",
    "stop_requested",
    "ending",
    "exit_code",
    "attained_service",
    "resized_at",
    "attempts",
    "uid",
]


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(JobRecord))


class JobsMixin(StoreBase):
    """The job area of :class:`scheduler.store.Store`."""

    def create_job(self, spec: Any, user: str = "", sealed_secrets: str = "") -> JobRecord:
        """Store a validated :class:`scheduler.spec.JobSpec` in state ``submitted`` (one
        round trip: ``lua.CREATE_JOB``), with the token of its sealed secret values
        (:mod:`scheduler.sealed`) in the hash field ``sealed_secrets`` when given (read
        back only by :meth:`sealed_secrets`).

        Raises JobExistsError when the name is taken. Wakes the loop.
        """
        rec = self._new_record(spec, user)
        created = self._create_job(args=self._create_args(rec, sealed_secrets=sealed_secrets))
        if not created:
            raise JobExistsError(exists_message(rec.vc, rec.spec.get("name", rec.name)))
        rec.created = rec.updated = float(created)
        return rec

    def create_jobs(
        self, specs: list[Any], user: str = "", sealed_secrets: list[str] | None = None
    ) -> list[JobRecord | None]:
        """Store many validated specs in one round trip (each atomically, as
        :meth:`create_job`; ``sealed_secrets``: each spec's token, "" for none). Returns,
        in order, each stored record, or None where the name was taken (that job is not
        stored; the others are)."""
        tokens = sealed_secrets or [""] * len(specs)
        recs = [self._new_record(spec, user) for spec in specs]
        pipe = self.r.pipeline(transaction=False)
        for i, rec in enumerate(recs):  # one wake-up of the loop, with the last job
            quiet = i < len(recs) - 1
            args = self._create_args(rec, quiet=quiet, sealed_secrets=tokens[i])
            self._create_job(args=args, client=pipe)
        out: list[JobRecord | None] = []
        for rec, created in zip(recs, pipe.execute(), strict=True):
            if created:
                rec.created = rec.updated = float(created)
                out.append(rec)
            else:
                out.append(None)
        return out

    @staticmethod
    def _new_record(spec: Any, user: str) -> JobRecord:
        return JobRecord(
            name=job_key(spec.vc, spec.name),
            vc=spec.vc,
            user=user,
            priority=spec.priority,
            spec=spec.model_dump(mode="json"),
            state=JobState.SUBMITTED,
            reason="submitted",
            uid=uuid.uuid4().hex,
        )

    def _create_args(
        self, rec: JobRecord, quiet: bool = False, sealed_secrets: str = ""
    ) -> list[str]:
        # shallow: asdict() deep-copies the spec, most of a submit's store-side cost
        fields = encode_fields(
            {f: getattr(rec, f) for f in _RECORD_FIELDS if f not in ("created", "updated")}
        )
        if sealed_secrets:  # a hash field of its own, never part of the record's answers
            fields["sealed_secrets"] = sealed_secrets
        spec = rec.spec
        if spec.get("ssh") or spec.get("mpi"):  # this submission's own key (jobkey.py)
            fields["ssh_key"] = jobkey.generate()
        return [
            self.p,
            rec.name,
            json.dumps(fields),
            rec.user or "unknown",
            "quiet" if quiet else "",
        ]

    @staticmethod
    def _job_fields(rec: JobRecord) -> dict[str, str]:
        return encode_fields(rec.to_dict())

    @staticmethod
    def _job_from_hash(h: dict[str, str]) -> JobRecord:
        return JobRecord(
            name=h["name"],
            vc=h.get("vc", ""),
            user=h.get("user", ""),
            priority=int(h.get("priority") or 0),
            spec=as_json(h.get("spec")) or {},
            state=h.get("state", ""),
            reason=h.get("reason", ""),
            attempt=int(h.get("attempt") or 1),
            failures=int(h.get("failures") or 0),
            created=float(h.get("created") or 0),
            updated=float(h.get("updated") or 0),
            scheduled_time=as_float(h.get("scheduled_time")),
            start_time=as_float(h.get("start_time")),
            end_time=as_float(h.get("end_time")),
            pending_reason=as_json(h.get("pending_reason")),
            stop_requested=h.get("stop_requested", ""),
            ending=as_json(h.get("ending")),
            exit_code=as_int(h.get("exit_code")),
            attained_service=float(h.get("attained_service") or 0),
            resized_at=as_float(h.get("resized_at")),
            attempts=as_json(h.get("attempts")) or [],
            uid=h.get("uid", ""),
        )

    def sealed_secrets(self, name: str) -> str | None:
        """The job's sealed secrets token, None when it has none."""
        return self.r.hget(self.k("job", name), "sealed_secrets") or None

    def ssh_key(self, name: str, uid: str) -> str | None:
        """The private key (PEM) of submission ``uid`` of job ``name``
        (:mod:`scheduler.jobkey`); None when the job of that name now has another uid or
        no key (no ssh, or stored before keys were made per submission)."""
        stored_uid, key = self.r.hmget(self.k("job", name), ["uid", "ssh_key"])
        if not uid or stored_uid != uid:
            return None
        return key or None

    def get_job(self, name: str) -> JobRecord | None:
        """The job, or None."""
        h = self.r.hgetall(self.k("job", name))
        return self._job_from_hash(h) if h.get("state") else None

    def require_job(self, name: str) -> JobRecord:
        """The job; raises JobNotFoundError."""
        job = self.get_job(name)
        if job is None:
            raise JobNotFoundError(f"no job named {name!r}")
        return job

    def get_jobs(self, names: Iterable[str], *, with_spec: bool = True) -> list[JobRecord]:
        """Jobs by name, in order, skipping missing ones (one round trip).

        ``with_spec=False`` leaves ``spec`` empty (``{}``): less to transfer and decode for
        callers that cache specs (the loop); fetch them with :meth:`job_specs`.
        """
        rows = self._read_hashes(
            [self.k("job", n) for n in names], None if with_spec else _JOB_FIELDS_NO_SPEC
        )
        return [self._job_from_hash(h) for h in rows if h.get("state")]

    def job_specs(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{job: spec dict}`` for existing jobs (one round trip)."""
        names = list(names)
        pipe = self.r.pipeline(transaction=False)
        for n in names:
            pipe.hget(self.k("job", n), "spec")
        return {n: json.loads(raw) for n, raw in zip(names, pipe.execute(), strict=True) if raw}

    def list_jobs(
        self,
        *,
        state: str | None = None,
        vcs: Sequence[str] | None = None,
        user: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> tuple[list[JobRecord], int]:
        """Jobs newest first, filtered, paginated. Returns (page, total matching).

        ``vcs``: only these VCs' jobs (None: every VC's), read from their own indexes
        (``jobs:vc:<vc>``): no key of another VC's job is read. Without ``state`` or
        ``user`` only the page's job hashes are read; with them, the listed VCs' jobs'
        ``state`` / ``user`` fields too.
        """
        if vcs is None:
            names = self.r.zrevrange(self.k("jobs"), 0, -1)
        else:
            pipe = self.r.pipeline(transaction=False)
            for vc in dict.fromkeys(vcs):
                pipe.zrevrange(self.k("jobs", "vc", vc), 0, -1, withscores=True)
            rows = [row for part in pipe.execute() for row in part]
            names = [n for n, _ in sorted(rows, key=lambda r: r[1], reverse=True)]
        if state is None and user is None:
            matching = names
        else:
            pipe = self.r.pipeline(transaction=False)
            for n in names:
                pipe.hmget(self.k("job", n), "state", "user")
            matching = [
                n
                for n, (st, u) in zip(names, pipe.execute(), strict=True)
                if st and (state is None or st == state) and (user is None or u == user)
            ]
        page = matching[offset : offset + limit] if limit > 0 else []
        return self.get_jobs(page), len(matching)

    def active_jobs(self, *, with_spec: bool = True) -> list[JobRecord]:
        """Every job not in a terminal state (``with_spec``: see :meth:`get_jobs`)."""
        return self.get_jobs(sorted(self.r.smembers(self.k("jobs", "active"))), with_spec=with_spec)

    def request_stop(self, name: str, reason: str = "stopped by user") -> JobRecord:
        """Ask the loop to stop a job (idempotent; a finished job is returned unchanged).

        Raises JobNotFoundError.
        """
        job = self.require_job(name)
        if JobState(job.state).terminal or job.stop_requested:
            return job
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self.k("job", name), "stop_requested", reason)
        pipe.rpush(
            self.k("job", name) + ":events",
            event(self.now(), job.state, job.attempt, f"stop requested: {reason}"),
        )
        pipe.sadd(self.k("jobs", "dirty"), name)
        pipe.sadd(self.k("jobs", "changed"), name)
        pipe.publish(self.loop_channel, "stop")
        pipe.execute()
        job.stop_requested = reason
        return job

    def delete_job(self, name: str) -> None:
        """Remove a finished job's records (job hash, events, tasks, expiry), atomically.

        Raises JobNotFoundError (no such job) or JobActiveError (not finished: stop it
        first). Task logs on the share are left alone.
        """
        jk = self.k("job", name)

        def tx(pipe: redis.client.Pipeline) -> None:
            state, vc = pipe.hmget(jk, "state", "vc")
            if not state:
                raise JobNotFoundError(f"no job named {name!r}")
            if not JobState(state).terminal:
                raise JobActiveError(f"job {name!r} is {state}; stop it before deleting it")
            pipe.multi()
            pipe.delete(jk, jk + ":events", jk + ":tasks", jk + ":alloc")
            pipe.zrem(self.k("jobs"), name)
            pipe.zrem(self.k("jobs", "vc", vc or DEFAULT_VC), name)
            pipe.zrem(self.k("jobs", "expiry"), name)
            pipe.srem(self.k("jobs", "active"), name)
            pipe.srem(self.k("jobs", "dirty"), name)
            pipe.srem(self.k("jobs", "changed"), name)

        self.r.transaction(tx, jk)

    def expire_job_at(
        self, name: str, when: float, pipe: redis.client.Pipeline | None = None
    ) -> None:
        """Mark a finished job for deletion at ``when`` (seconds since the epoch); with
        ``pipe`` only queued on it."""
        (pipe or self.r).zadd(self.k("jobs", "expiry"), {name: when})

    def drop_expiry(self, name: str) -> None:
        """Forget a deletion time set by :meth:`expire_job_at`."""
        self.r.zrem(self.k("jobs", "expiry"), name)

    def expired_jobs(self, now: float, limit: int = 100) -> list[str]:
        """Names of finished jobs whose deletion time is at most ``now`` (oldest first)."""
        return list(self.r.zrangebyscore(self.k("jobs", "expiry"), "-inf", now, 0, limit))

    def events(self, name: str) -> list[dict[str, Any]]:
        """The job's event history, oldest first: ``{time, state, attempt, reason}``."""
        return [json.loads(e) for e in self.r.lrange(self.k("job", name) + ":events", 0, -1)]

    def take_dirty_jobs(self) -> set[str]:
        """Names of jobs whose tasks were reported on, stopped or preempted since the last
        call (atomically read and cleared). The loop re-reads only those between its full
        passes."""
        return self.take_marks()[0]

    def take_marks(self) -> tuple[set[str], set[str]]:
        """``(dirty, changed)``, both read and cleared in one transaction: ``jobs:dirty``
        (tasks reported on, stopped or preempted: their tasks are read again) and
        ``jobs:changed`` (the job record itself changed outside the loop: a stop request,
        a preemption; the record is read again)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.smembers(self.k("jobs", "dirty"))
        pipe.smembers(self.k("jobs", "changed"))
        pipe.delete(self.k("jobs", "dirty"), self.k("jobs", "changed"))
        dirty, changed, _ = pipe.execute()
        return set(dirty), set(changed)

    def transition(
        self,
        name: str,
        state: str,
        reason: str,
        *,
        now: float | None = None,
        attempt: int | None = None,
        pipe: redis.client.Pipeline | None = None,
        **fields: Any,
    ) -> None:
        """Move a job to ``state`` with an event (one transaction). ``fields`` are set too
        (None clears a field; dicts are JSON). ``now`` / ``attempt`` save round trips when
        the caller knows them (the event records ``attempt``; it is also stored when
        given). With ``pipe`` the commands are only queued on it (the caller executes; then
        ``attempt`` must be given)."""
        now = self.now() if now is None else now
        jk = self.k("job", name)
        if attempt is not None:
            fields["attempt"] = attempt
        mapping = encode_fields({"state": state, "reason": reason, "updated": now, **fields})
        if attempt is None:
            if pipe is not None:
                raise ValueError("transition(pipe=...) needs attempt")
            attempt = self.r.hget(jk, "attempt") or 1
        own = pipe is None
        p = pipe if pipe is not None else self.r.pipeline(transaction=True)
        p.hset(jk, mapping=mapping)
        p.rpush(jk + ":events", event(now, state, attempt, reason))
        if JobState(state).terminal:
            p.srem(self.k("jobs", "active"), name)
        if own:
            p.execute()

    def set_job_fields(
        self, name: str, _pipe: redis.client.Pipeline | None = None, **fields: Any
    ) -> None:
        """Set job fields without a state change (None clears, dicts are JSON); with
        ``_pipe`` only queued on it."""
        (_pipe or self.r).hset(self.k("job", name), mapping=encode_fields(fields))

    def add_event(
        self,
        name: str,
        reason: str,
        *,
        at: tuple[float, str, int] | None = None,
        pipe: redis.client.Pipeline | None = None,
    ) -> None:
        """Append an event that is not a state change (e.g. a task finished). ``at``:
        (time s, state, attempt) when the caller knows them (saves two round trips);
        with ``pipe`` only queued on it."""
        if at is None:
            h = self.r.hmget(self.k("job", name), "state", "attempt")
            at = (self.now(), h[0], h[1] or 1)
        (pipe or self.r).rpush(self.k("job", name) + ":events", event(*at, reason))

    def active_job_names(self) -> set[str]:
        """Names of the jobs not in a terminal state (``jobs:active``)."""
        return set(self.r.smembers(self.k("jobs", "active")))
