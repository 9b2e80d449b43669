"""The Redis store: jobs, tasks, nodes, virtual clusters, the allocation ledger, events.

Key layout: see ``scheduler/store/README.md``. All writes that must not interleave run as
one Lua script (:mod:`scheduler.store.lua`) or one MULTI transaction. Times are Redis'
clock (``TIME``), in seconds.

Errors: :class:`JobExistsError`, :class:`JobNotFoundError`, :class:`NodeNotFoundError`
(all ``LookupError``/``ValueError`` subclasses the API maps to 409 / 404).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from scheduler.store import lua
from scheduler.store.records import (
    Allocation,
    JobRecord,
    JobState,
    NodeRecord,
    TaskRecord,
    TaskState,
    VCUsage,
)

DEFAULT_PREFIX = "pasture:"
USAGE_SAMPLE_S = 5.0  # at most one usage-history sample per node per this many seconds
USAGE_SAMPLES = 720  # samples kept per node: one hour at USAGE_SAMPLE_S
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def usage_sample(usage: dict[str, Any]) -> dict[str, Any] | None:
    """The compact history sample of an agent's usage report: ``{cpu, mem, gpu}`` in
    percent (``gpu``: mean utilisation over the node's GPUs, None without GPUs); None when
    the report has no CPU figure."""
    if not isinstance(usage, dict) or usage.get("cpu_percent") is None:
        return None
    total = usage.get("memory_total") or 0
    mem = 100.0 * float(usage.get("memory_used") or 0) / total if total else 0.0
    gpus = [g for g in usage.get("gpus") or [] if isinstance(g, dict)]
    gpu = (
        round(sum(float(g.get("util_percent") or 0) for g in gpus) / len(gpus), 1) if gpus else None
    )
    return {"cpu": round(float(usage["cpu_percent"]), 1), "mem": round(mem, 1), "gpu": gpu}


NODE_STATES = ("ready", "cordoned", "draining", "lost")
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
]
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
]


class JobExistsError(ValueError):
    """A job with this name exists already (job names are unique)."""


class JobNotFoundError(LookupError):
    """No job of that name."""


class NodeNotFoundError(LookupError):
    """No node of that name."""


class JobActiveError(RuntimeError):
    """The job has not finished (deleting it needs a stop first)."""


def _f(v: str | None) -> float | None:
    return None if v in (None, "") else float(v)


def _i(v: str | None) -> int | None:
    return None if v in (None, "") else int(v)


def _j(v: str | None) -> Any:
    return None if v in (None, "") else json.loads(v)


class Store:
    """All reads and writes of pasture's state in Redis.

    Args:
        client: a redis-py client created with ``decode_responses=True``.
        prefix: key prefix (default ``pasture:``), shared with ``store/tokens.py``.
    """

    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.r = client
        self.p = prefix
        self._commit = client.register_script(lua.COMMIT)
        self._report = client.register_script(lua.REPORT_TASK)
        self._heartbeat = client.register_script(lua.HEARTBEAT)

    @classmethod
    def from_settings(cls, redis_settings: Any, **kwargs: Any) -> Store:
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
        return s + us / 1e6

    def version(self) -> int:
        """Ledger version: bumped by every allocation, release and node change."""
        return int(self.r.get(self.k("version")) or 0)

    # ---- notifications --------------------------------------------------------------
    def notify_loop(self, kind: str) -> None:
        """Wake the loop (kind: submit | stop | task | node)."""
        self.r.publish(self.loop_channel, kind)

    def notify_node(self, node: str, kind: str = "bindings") -> None:
        """Wake a node's agent."""
        self.r.publish(self.node_channel(node), kind)

    def subscribe(self, *channels: str) -> redis.client.PubSub:
        """A PubSub subscribed to ``channels`` (e.g. ``store.loop_channel``)."""
        ps = self.r.pubsub(ignore_subscribe_messages=True)
        ps.subscribe(*channels)
        return ps

    # ---- jobs -----------------------------------------------------------------------
    def create_job(self, spec: Any, user: str = "") -> JobRecord:
        """Store a validated :class:`scheduler.spec.JobSpec` in state ``submitted``.

        Raises JobExistsError when the name is taken. Wakes the loop.
        """
        name = spec.name
        jk = self.k("job", name)
        if not self.r.hsetnx(jk, "name", name):
            raise JobExistsError(f"a job named {name!r} exists already; job names are unique")
        now = self.now()
        rec = JobRecord(
            name=name,
            vc=spec.vc,
            user=user,
            priority=spec.priority,
            spec=spec.model_dump(mode="json"),
            state=JobState.SUBMITTED,
            reason="submitted",
            created=now,
            updated=now,
        )
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(jk, mapping=self._job_fields(rec))
        pipe.zadd(self.k("jobs"), {name: now})
        pipe.sadd(self.k("jobs", "active"), name)
        pipe.rpush(
            jk + ":events",
            json.dumps(
                {
                    "time": now,
                    "state": "submitted",
                    "attempt": 1,
                    "reason": f"submitted by {user or 'unknown'}",
                }
            ),
        )
        pipe.publish(self.loop_channel, "submit")
        pipe.execute()
        return rec

    @staticmethod
    def _job_fields(rec: JobRecord) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in rec.to_dict().items():
            if value is None:
                out[key] = ""
            elif isinstance(value, dict | list):
                out[key] = json.dumps(value)
            else:
                out[key] = str(value)
        return out

    @staticmethod
    def _job_from_hash(h: dict[str, str]) -> JobRecord:
        return JobRecord(
            name=h["name"],
            vc=h.get("vc", ""),
            user=h.get("user", ""),
            priority=int(h.get("priority") or 0),
            spec=_j(h.get("spec")) or {},
            state=h.get("state", ""),
            reason=h.get("reason", ""),
            attempt=int(h.get("attempt") or 1),
            failures=int(h.get("failures") or 0),
            created=float(h.get("created") or 0),
            updated=float(h.get("updated") or 0),
            scheduled_time=_f(h.get("scheduled_time")),
            start_time=_f(h.get("start_time")),
            end_time=_f(h.get("end_time")),
            pending_reason=_j(h.get("pending_reason")),
            stop_requested=h.get("stop_requested", ""),
            ending=_j(h.get("ending")),
            exit_code=_i(h.get("exit_code")),
            attained_service=float(h.get("attained_service") or 0),
        )

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

    def _read_hashes(self, keys: list[str], fields: Sequence[str] | None) -> list[dict[str, str]]:
        """Each key's hash in one round trip: every field, or only ``fields`` (absent ones
        left out, as HGETALL would), in the order of ``keys``."""
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            if fields is None:
                pipe.hgetall(key)
            else:
                pipe.hmget(key, fields)
        rows = pipe.execute()
        if fields is None:
            return rows
        return [{k: v for k, v in zip(fields, row, strict=True) if v is not None} for row in rows]

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
        vc: str | None = None,
        user: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> tuple[list[JobRecord], int]:
        """Jobs newest first, filtered, paginated. Returns (page, total matching)."""
        names = self.r.zrevrange(self.k("jobs"), 0, -1)
        pipe = self.r.pipeline(transaction=False)
        for n in names:
            pipe.hmget(self.k("job", n), "state", "vc", "user")
        matching = [
            n
            for n, (st, v, u) in zip(names, pipe.execute(), strict=True)
            if (state is None or st == state)
            and (vc is None or v == vc)
            and (user is None or u == user)
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
            json.dumps(
                {
                    "time": self.now(),
                    "state": job.state,
                    "attempt": job.attempt,
                    "reason": f"stop requested: {reason}",
                }
            ),
        )
        pipe.sadd(self.k("jobs", "dirty"), name)
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
            state = pipe.hget(jk, "state")
            if not state:
                raise JobNotFoundError(f"no job named {name!r}")
            if not JobState(state).terminal:
                raise JobActiveError(f"job {name!r} is {state}; stop it before deleting it")
            pipe.multi()
            pipe.delete(jk, jk + ":events", jk + ":tasks", jk + ":alloc")
            pipe.zrem(self.k("jobs"), name)
            pipe.zrem(self.k("jobs", "expiry"), name)
            pipe.srem(self.k("jobs", "active"), name)
            pipe.srem(self.k("jobs", "dirty"), name)

        self.r.transaction(tx, jk)

    def expire_job_at(self, name: str, when: float) -> None:
        """Mark a finished job for deletion at ``when`` (seconds since the epoch)."""
        self.r.zadd(self.k("jobs", "expiry"), {name: when})

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
        pipe = self.r.pipeline(transaction=True)
        pipe.smembers(self.k("jobs", "dirty"))
        pipe.delete(self.k("jobs", "dirty"))
        return set(pipe.execute()[0])

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
        mapping = {"state": state, "reason": reason, "updated": str(now)}
        for key, value in fields.items():
            mapping[key] = (
                ""
                if value is None
                else json.dumps(value)
                if isinstance(value, dict | list)
                else str(value)
            )
        if attempt is None:
            if pipe is not None:
                raise ValueError("transition(pipe=...) needs attempt")
            attempt = self.r.hget(jk, "attempt") or 1
        own = pipe is None
        p = self.r.pipeline(transaction=True) if own else pipe
        p.hset(jk, mapping=mapping)
        p.rpush(
            jk + ":events",
            json.dumps({"time": now, "state": state, "attempt": int(attempt), "reason": reason}),
        )
        if JobState(state).terminal:
            p.srem(self.k("jobs", "active"), name)
        if own:
            p.execute()

    def set_job_fields(self, name: str, **fields: Any) -> None:
        """Set job fields without a state change (None clears, dicts are JSON)."""
        mapping = {
            key: ""
            if value is None
            else json.dumps(value)
            if isinstance(value, dict | list)
            else str(value)
            for key, value in fields.items()
        }
        self.r.hset(self.k("job", name), mapping=mapping)

    def add_event(self, name: str, reason: str) -> None:
        """Append an event that is not a state change (e.g. a task finished)."""
        h = self.r.hmget(self.k("job", name), "state", "attempt")
        self.r.rpush(
            self.k("job", name) + ":events",
            json.dumps(
                {"time": self.now(), "state": h[0], "attempt": int(h[1] or 1), "reason": reason}
            ),
        )

    # ---- tasks ----------------------------------------------------------------------
    def tasks(self, job: str) -> list[TaskRecord]:
        """Tasks of the job's current (or last) attempt, in role declaration order."""
        raw = self.r.hgetall(self.k("job", job) + ":tasks")
        tasks = [TaskRecord.from_dict(json.loads(v)) for v in raw.values()]
        spec = _j(self.r.hget(self.k("job", job), "spec")) or {}
        order = {r: i for i, r in enumerate(spec.get("roles", {}))}
        return sorted(tasks, key=lambda t: (order.get(t.role, 99), t.index))

    def tasks_of(self, jobs: Iterable[str]) -> dict[str, list[TaskRecord]]:
        """Task records of many jobs in one round trip: ``{job: [TaskRecord]}`` (unordered;
        see :func:`scheduler.discovery.ordered_tasks`)."""
        jobs = list(jobs)
        pipe = self.r.pipeline(transaction=False)
        for j in jobs:
            pipe.hgetall(self.k("job", j) + ":tasks")
        return {
            j: [TaskRecord.from_dict(json.loads(v)) for v in raw.values()]
            for j, raw in zip(jobs, pipe.execute(), strict=True)
        }

    def task(self, job: str, key: str) -> TaskRecord | None:
        raw = self.r.hget(self.k("job", job) + ":tasks", key)
        return TaskRecord.from_dict(json.loads(raw)) if raw else None

    def update_tasks(self, job: str, tasks: Iterable[TaskRecord], notify: bool = True) -> None:
        """Overwrite task records (the loop: desired=stop, state=lost) and wake their nodes."""
        tasks = list(tasks)
        if not tasks:
            return
        pipe = self.r.pipeline(transaction=True)
        for t in tasks:
            pipe.hset(self.k("job", job) + ":tasks", t.key, json.dumps(t.to_dict()))
        if notify:
            for node in {t.node for t in tasks}:
                pipe.publish(self.node_channel(node), "bindings")
        pipe.execute()

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
        diagnosis: dict[str, Any] | None = None,
    ) -> bool:
        """An agent's report on a task. Ignored (returns False) when it is about another
        attempt or node, or the task already finished. Wakes the loop. ``diagnosis``:
        :func:`scheduler.diagnosis.diagnose_report` of a failed task, kept in the record."""
        return bool(
            self._report(
                args=[
                    self.p,
                    job,
                    key,
                    attempt,
                    node,
                    str(state),
                    "" if exit_code is None else str(exit_code),
                    message,
                    handle,
                    "",  # ARGV[10]: infrastructure cause (reports.py)
                    json.dumps(diagnosis) if diagnosis else "",
                ]
            )
        )

    # ---- ledger ---------------------------------------------------------------------
    def ledger(self) -> dict[str, Allocation]:
        """Every allocation: ``{"<job>/<role>-<index>": Allocation}`` (the truth)."""
        return {
            k: Allocation.from_dict(json.loads(v))
            for k, v in self.r.hgetall(self.k("ledger")).items()
        }

    def node_bindings(self, node: str) -> list[tuple[str, str]]:
        """(job, task key) pairs allocated on ``node``."""
        out = []
        for lk in self.r.smembers(self.k("node", node) + ":tasks"):
            job, _, key = lk.rpartition("/")
            out.append((job, key))
        return sorted(out)

    def release(self, job: str) -> int:
        """Drop every ledger entry of ``job`` (atomically) and bump the version.

        Returns the number of entries released.
        """
        jk = self.k("job", job)

        def tx(pipe: redis.client.Pipeline) -> int:
            entries = pipe.smembers(jk + ":alloc")
            allocs = pipe.hmget(self.k("ledger"), *entries) if entries else []
            pipe.multi()
            for lk, raw in zip(entries, allocs, strict=True):
                if raw:
                    node = json.loads(raw)["node"]
                    pipe.srem(self.k("node", node) + ":tasks", lk)
                pipe.hdel(self.k("ledger"), lk)
            pipe.delete(jk + ":alloc")
            if entries:
                pipe.incr(self.k("version"))
            return len(entries)

        return self.r.transaction(tx, jk + ":alloc", value_from_callable=True)

    def free_tasks(self, job: str, keys: Iterable[str]) -> int:
        """Zero the ledger entries of finished tasks of a job that goes on (their node
        capacity, GPUs and ports come free; the entries stay, so the task keeps its replica
        index). Bumps the version when anything changed. Returns the entries changed."""
        lks = [f"{job}/{k}" for k in keys]
        if not lks:
            return 0
        ledger = self.k("ledger")

        def tx(pipe: redis.client.Pipeline) -> int:
            raws = pipe.hmget(ledger, lks)
            changed = {}
            for lk, raw in zip(lks, raws, strict=True):
                if not raw:
                    continue
                a = json.loads(raw)
                if a.get("cpu_m") or a.get("memory") or a.get("gpu") or a.get("ports"):
                    a.update(cpu_m=0, memory=0, gpu=0, gpus=[], ports=[])
                    changed[lk] = json.dumps(a)
            if changed:
                pipe.multi()
                pipe.hset(ledger, mapping=changed)
                pipe.incr(self.k("version"))
            return len(changed)

        return self.r.transaction(tx, ledger, value_from_callable=True)

    def commit(self, version: int, payload: dict[str, Any]) -> tuple[bool, str]:
        """Run the commit script (see :mod:`scheduler.store.commit` for the payload).

        Returns (True, new version) or (False, why it was rejected).
        """
        ok, detail = self._commit(args=[self.p, version, json.dumps(payload)])
        return bool(ok), str(detail)

    # ---- nodes ----------------------------------------------------------------------
    def register_node(self, node: NodeRecord) -> NodeRecord:
        """Create or update a node from its agent. Keeps a cordoned / draining state; a lost
        node becomes ready. Bumps the version when capacity, labels or state change."""
        nk = self.k("node", node.name)
        now = self.now()
        old = self.r.hgetall(nk)
        state = old.get("state", "ready")
        if state == "lost" or state not in NODE_STATES:
            state = "ready"
        node.state = state
        node.heartbeat = now
        node.registered = now
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
        }
        changed = any(
            old.get(k) != fields[k]
            for k in (
                "address",
                "cpu_m",
                "memory",
                "gpu",
                "gpu_model",
                "labels",
                "state",
                "port_range",
            )
        )
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(nk, mapping=fields)
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
        sample = usage_sample(usage)
        return str(
            self._heartbeat(
                args=[
                    self.p,
                    node,
                    json.dumps(usage),
                    json.dumps(sample) if sample else "",
                    USAGE_SAMPLE_S,
                    USAGE_SAMPLES,
                ]
            )
        )

    def usage_history(self, node: str, since: float = 0.0) -> list[dict[str, Any]]:
        """The node's usage samples, oldest first, taken at or after ``since`` (s):
        ``[{t (s), cpu (%), mem (%), gpu (% mean over GPUs, or None)}]``."""
        rows = self.r.lrange(self.k("node", node, "usage"), 0, -1)
        out = [json.loads(r) for r in rows]
        return [s for s in out if float(s.get("t", 0)) >= since]

    def usage_histories(self, nodes: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """:meth:`usage_history` of several nodes in one round trip (all samples kept)."""
        names = list(nodes)
        pipe = self.r.pipeline(transaction=False)
        for n in names:
            pipe.lrange(self.k("node", n, "usage"), 0, -1)
        return {
            n: [json.loads(r) for r in rows] for n, rows in zip(names, pipe.execute(), strict=True)
        }

    def record_cycle(self, seconds: float) -> None:
        """Count one scheduling cycle of ``seconds`` into the cycle-latency histogram
        (``stats:cycle``: cumulative ``le_<bound>`` counts, ``count``, ``sum``), read by the
        API's ``/metrics`` because the loop runs in another process."""
        pipe = self.r.pipeline(transaction=False)
        key = self.k("stats", "cycle")
        for bound in CYCLE_BUCKETS:
            if seconds <= bound:
                pipe.hincrby(key, f"le_{bound}", 1)
        pipe.hincrby(key, "count", 1)
        pipe.hincrbyfloat(key, "sum", seconds)
        pipe.execute()

    def cycle_histogram(self) -> tuple[list[tuple[float, int]], int, float]:
        """``([(bound s, cumulative count)], count, sum s)`` of :meth:`record_cycle`."""
        raw = self.r.hgetall(self.k("stats", "cycle"))
        count = int(raw.get("count") or 0)
        buckets = [(b, int(raw.get(f"le_{b}") or 0)) for b in CYCLE_BUCKETS]
        return buckets, count, float(raw.get("sum") or 0.0)

    def cluster_usage(self, since: float, until: float) -> list[dict[str, Any]]:
        """The cluster's mean utilisation per minute from ``since`` to ``until`` (s), from
        the per-minute sums the heartbeat keeps: ``[{t (minute start, s), cpu, mem, gpu}]``
        in percent (a resource nobody reported in that minute is None); minutes without
        any sample are left out."""
        start = int(since // 60) * 60
        minutes = list(range(start, int(until // 60) * 60 + 1, 60))
        pipe = self.r.pipeline(transaction=False)
        for m in minutes:
            pipe.hgetall(self.k("usage", "cluster", str(m)))
        out = []
        for m, h in zip(minutes, pipe.execute(), strict=True):
            if not h:
                continue
            row: dict[str, Any] = {"t": float(m)}
            for f in ("cpu", "mem", "gpu"):
                n = int(h.get(f"{f}_n") or 0)
                row[f] = float(h[f"{f}_sum"]) / n if n else None
            out.append(row)
        return out

    def loop_stats(self) -> dict[str, int]:
        """Counters the commit script keeps: ``{placements, preemptions}`` (tasks' gangs
        bound and jobs preempted since the store was created)."""
        raw = self.r.hgetall(self.k("stats"))
        return {k: int(v) for k, v in raw.items() if str(v).lstrip("-").isdigit()}

    @staticmethod
    def _node_from_hash(h: dict[str, str]) -> NodeRecord:
        pr = _j(h.get("port_range")) or [20000, 29999]
        return NodeRecord(
            name=h["name"],
            address=h.get("address", ""),
            cpu_m=int(h.get("cpu_m") or 0),
            memory=int(h.get("memory") or 0),
            gpu=int(h.get("gpu") or 0),
            gpu_model=h.get("gpu_model") or None,
            labels=_j(h.get("labels")) or {},
            state=h.get("state", "ready"),
            port_range=(int(pr[0]), int(pr[1])),
            heartbeat=float(h.get("heartbeat") or 0),
            registered=float(h.get("registered") or 0),
            usage=_j(h.get("usage")) or {},
            executor=h.get("executor", ""),
            state_reason=h.get("state_reason", ""),
        )

    def list_nodes(self, *, with_usage: bool = True) -> list[NodeRecord]:
        """All registered nodes, by name (``with_usage=False`` skips the usage report)."""
        names = sorted(self.r.smembers(self.k("nodes")))
        rows = self._read_hashes(
            [self.k("node", n) for n in names], None if with_usage else _NODE_FIELDS_NO_USAGE
        )
        return [self._node_from_hash(h) for h in rows if h.get("name")]

    def get_node(self, name: str) -> NodeRecord | None:
        h = self.r.hgetall(self.k("node", name))
        return self._node_from_hash(h) if h.get("name") else None

    def set_node_state(self, name: str, state: str, reason: str = "") -> NodeRecord:
        """Cordon (``cordoned``), drain (``draining``), uncordon (``ready``) or mark ``lost``.

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
        pipe.incr(self.k("version"))
        pipe.publish(self.loop_channel, "node")
        pipe.publish(self.node_channel(name), "node")
        pipe.execute()
        node = self.get_node(name)
        assert node is not None
        return node

    # ---- node events (issue 19: automatic cordons) ------------------------------------
    NODE_EVENTS = 100  # events kept per node

    def add_node_event(self, name: str, reason: str) -> None:
        """Append ``{time (s), state, reason}`` to the node's events (newest
        ``NODE_EVENTS`` kept), e.g. the GPU health probe cordoning it."""
        key = self.k("node", name, "events")
        state = self.r.hget(self.k("node", name), "state")
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(key, json.dumps({"time": self.now(), "state": state, "reason": reason}))
        pipe.ltrim(key, -self.NODE_EVENTS, -1)
        pipe.execute()

    def request_cordon(self, name: str, reason: str) -> bool:
        """Cordon node ``name`` with ``reason`` and a node event when it is ``ready`` (the
        GPU health probe's request, issue 19; a node another state keeps it). Returns True
        when it cordoned."""
        if self.r.hget(self.k("node", name), "state") != "ready":
            return False
        self.set_node_state(name, "cordoned", reason)
        self.add_node_event(name, reason)
        return True

    def node_events(self, name: str) -> list[dict[str, Any]]:
        """The node's events, oldest first (see :meth:`add_node_event`)."""
        return [json.loads(e) for e in self.r.lrange(self.k("node", name, "events"), 0, -1)]

    # ---- virtual clusters ------------------------------------------------------------
    def apply_vcs(self, vcs: Iterable[Any]) -> None:
        """Replace the VCs with ``vcs`` (:class:`scheduler.settings.VirtualClusterSettings`).
        Bumps the version."""
        mapping = {}
        for vc in vcs:
            mapping[vc.name] = json.dumps(
                {
                    "name": vc.name,
                    "guarantee": {
                        "cpu_m": vc.guarantee.cpu,
                        "memory": vc.guarantee.memory,
                        "gpu": vc.guarantee.gpu,
                    },
                    "max": None
                    if vc.max is None
                    else {"cpu_m": vc.max.cpu, "memory": vc.max.memory, "gpu": vc.max.gpu},
                    "can_borrow": vc.can_borrow,
                }
            )
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(self.k("vcs"))
        if mapping:
            pipe.hset(self.k("vcs"), mapping=mapping)
        pipe.incr(self.k("version"))
        pipe.publish(self.loop_channel, "vc")
        pipe.execute()

    def vcs(self) -> dict[str, dict[str, Any]]:
        """``{name: {name, guarantee, max, can_borrow}}`` (resources as cpu_m/memory/gpu)."""
        return {k: json.loads(v) for k, v in self.r.hgetall(self.k("vcs")).items()}

    def vc_usage(self) -> list[VCUsage]:
        """Every VC with used and borrowed resources (from the ledger) and job counts."""
        vcs = self.vcs()
        ledger = self.ledger()
        job_vc: dict[str, str] = {}
        active = self.active_jobs(with_spec=False)
        for j in active:
            job_vc[j.name] = j.vc
        used: dict[str, dict[str, int]] = {n: {"cpu_m": 0, "memory": 0, "gpu": 0} for n in vcs}
        for a in ledger.values():
            vc = job_vc.get(a.job)
            if vc is None:
                continue
            u = used.setdefault(vc, {"cpu_m": 0, "memory": 0, "gpu": 0})
            u["cpu_m"] += a.cpu_m
            u["memory"] += a.memory
            u["gpu"] += a.gpu
        out = []
        zero = {"cpu_m": 0, "memory": 0, "gpu": 0}
        for name in sorted(set(vcs) | set(used)):
            vc = vcs.get(name, {"guarantee": zero, "max": None, "can_borrow": False})
            u = used[name]
            g = vc["guarantee"]
            out.append(
                VCUsage(
                    name=name,
                    guarantee=g,
                    max=vc["max"],
                    can_borrow=vc["can_borrow"],
                    used=u,
                    borrowed={k: max(0, u[k] - g[k]) for k in u},
                    jobs_running=sum(
                        1
                        for j in active
                        if j.vc == name and j.state in ("scheduled", "running", "preempted")
                    ),
                    jobs_queued=sum(
                        1 for j in active if j.vc == name and j.state in ("submitted", "queued")
                    ),
                )
            )
        return out

    # ---- summary --------------------------------------------------------------------
    def cluster_status(self) -> dict[str, Any]:
        """Counts and totals: ``{nodes: {state: n}, jobs: {state: n}, capacity, allocated,
        version}`` (resources as cpu_m / memory / gpu)."""
        nodes = self.list_nodes()
        node_states: dict[str, int] = {}
        cap = {"cpu_m": 0, "memory": 0, "gpu": 0}
        for n in nodes:
            node_states[n.state] = node_states.get(n.state, 0) + 1
            if n.state != "lost":
                cap["cpu_m"] += n.cpu_m
                cap["memory"] += n.memory
                cap["gpu"] += n.gpu
        alloc = {"cpu_m": 0, "memory": 0, "gpu": 0}
        for a in self.ledger().values():
            alloc["cpu_m"] += a.cpu_m
            alloc["memory"] += a.memory
            alloc["gpu"] += a.gpu
        names = self.r.zrange(self.k("jobs"), 0, -1)
        pipe = self.r.pipeline(transaction=False)
        for n in names:
            pipe.hget(self.k("job", n), "state")
        job_states: dict[str, int] = {}
        for st in pipe.execute():
            if st:
                job_states[st] = job_states.get(st, 0) + 1
        return {
            "nodes": node_states,
            "jobs": job_states,
            "capacity": cap,
            "allocated": alloc,
            "version": self.version(),
        }


__all__ = ["JobExistsError", "JobNotFoundError", "NodeNotFoundError", "Store", "TaskState"]
