"""Tasks and the allocation ledger: task records, agents' reports, the ledger (the truth
about what is allocated), releases and the atomic Decision commit (``job:<job>:tasks``,
``job:<job>:alloc``, ``ledger``, ``node:<node>:tasks``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import redis

from scheduler.store.base import StoreBase
from scheduler.store.codec import TaskReporter, as_json, report_task_args
from scheduler.store.records import Allocation, Launch, TaskRecord


class TasksMixin(StoreBase, TaskReporter):
    """The task and ledger area of :class:`scheduler.store.Store`."""

    def tasks(self, job: str) -> list[TaskRecord]:
        """Tasks of the job's current (or last) attempt, in role declaration order."""
        raw = self.r.hgetall(self.k("job", job) + ":tasks")
        tasks = [TaskRecord.from_dict(json.loads(v)) for v in raw.values()]
        spec = as_json(self.r.hget(self.k("job", job), "spec")) or {}
        order = {r: i for i, r in enumerate(spec.get("roles", {}))}
        return sorted(tasks, key=lambda t: (order.get(t.role, 99), t.index))

    def tasks_of(self, jobs: Iterable[str]) -> dict[str, list[TaskRecord]]:
        """Task records of many jobs in one round trip: ``{job: [TaskRecord]}`` (unordered;
        see :func:`scheduler.rules.discovery.ordered_tasks`)."""
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

    def update_tasks(
        self,
        job: str,
        tasks: Iterable[TaskRecord],
        notify: bool = True,
        pipe: redis.client.Pipeline | None = None,
    ) -> None:
        """Overwrite task records (the loop: desired=stop, state=lost) and wake their nodes.
        With ``pipe`` the commands are only queued on it (:class:`~.batch.WriteBatch`)."""
        tasks = list(tasks)
        if not tasks:
            return
        own = pipe is None
        p = pipe if pipe is not None else self.r.pipeline(transaction=True)
        p.hset(
            self.k("job", job) + ":tasks",
            mapping={t.key: json.dumps(t.to_dict()) for t in tasks},
        )
        if notify:
            for node in sorted({t.node for t in tasks}):
                self.notify_node(node, "bindings", pipe=p)
        if own:
            p.execute()

    def _send_report(
        self, node: str, report: dict[str, str], pipe: redis.client.Pipeline | None
    ) -> bool:
        """Apply an agent's report at once (lua.REPORT_TASK, waking the loop): ignored
        (False) when it is about another attempt or node, or the task already finished;
        with ``pipe``, queued on it (True)."""
        args = report_task_args(self.p, node, report, wake=True)
        if pipe is not None:
            self._report(args=args, client=pipe)
            return True
        return bool(self._report(args=args))

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

    def bound_tasks(self, node: str) -> dict[tuple[str, str], TaskRecord]:
        """``{(job, task key): TaskRecord}`` of every task the ledger binds to ``node``
        whose record names that node: two round trips (the node's bindings, then every
        record in one pipeline), whatever the number of tasks (what an agent reads)."""
        pairs = self.node_bindings(node)
        pipe = self.r.pipeline(transaction=False)
        for job, key in pairs:
            pipe.hget(self.k("job", job) + ":tasks", key)
        out = {}
        for (job, key), raw in zip(pairs, pipe.execute() if pairs else [], strict=True):
            if raw:
                rec = TaskRecord.from_dict(json.loads(raw))
                if rec.node == node:
                    out[(job, key)] = rec
        return out

    def launch(self, node: str, job: str) -> Launch | None:
        """``node``'s launch record of ``job`` (``node:<node>:launch:<job>``: the spec,
        user and sealed secrets token its agent starts the job's tasks with; written by
        the commit that binds a task of the job to the node, deleted by the job's
        release), or None when the node holds none."""
        h = self.r.hgetall(self.k("node", node, "launch", job))
        if not h.get("spec"):
            return None
        return Launch(
            job=job,
            attempt=int(h.get("attempt") or 0),
            spec=json.loads(h["spec"]),
            user=h.get("user", ""),
            sealed_secrets=h.get("sealed_secrets", ""),
            uid=h.get("uid", ""),
            ssh_key=h.get("ssh_key", ""),
        )

    def release(self, job: str) -> int:
        """Drop every ledger entry of ``job`` (atomically, ``lua.RELEASE``) and bump the
        version. Returns the number of entries released."""
        return int(self._release(args=[self.p, job])[0])

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

        written: int = self.r.transaction(tx, ledger, value_from_callable=True)
        return written

    def commit(self, version: int, payload: dict[str, Any]) -> tuple[bool, str]:
        """Run the commit script (see :mod:`scheduler.store.commit` for the payload).

        Returns (True, new version) or (False, why it was rejected).
        """
        ok, detail, *at = self._commit(args=[self.p, version, json.dumps(payload)])
        self.committed_at = float(at[0]) if at else None  # Redis time of the commit (s)
        return bool(ok), str(detail)
