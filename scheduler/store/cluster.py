"""Cluster-wide read models and metrics: virtual clusters and their usage, usage
histories, loop statistics, the status summary and the cluster condition (``vcs``,
``node:<node>:usage``, ``usage:cluster:<minute>``, ``stats``, ``stats:cycle``,
``cluster:condition``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from scheduler.store.base import StoreBase
from scheduler.store.codec import as_json
from scheduler.store.records import VCUsage

if TYPE_CHECKING:
    from scheduler.store.records import Allocation, JobRecord, NodeRecord

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ClusterMixin(StoreBase):
    """The read-model area of :class:`scheduler.store.Store`."""

    if TYPE_CHECKING:  # the sibling areas' reads this one uses (Store combines them)

        def ledger(self) -> dict[str, Allocation]: ...
        def active_jobs(self, *, with_spec: bool = True) -> list[JobRecord]: ...
        def list_nodes(self, *, with_usage: bool = True) -> list[NodeRecord]: ...

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
            vc_def = vcs.get(name, {"guarantee": zero, "max": None, "can_borrow": False})
            u = used[name]
            g = vc_def["guarantee"]
            out.append(
                VCUsage(
                    name=name,
                    guarantee=g,
                    max=vc_def["max"],
                    can_borrow=vc_def["can_borrow"],
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
            "condition": self.condition(),
        }

    def set_condition(self, condition: dict[str, Any] | None) -> None:
        """Raise (a dict: ``{kind, since (s), message, nodes}``) or clear (None) the
        cluster condition the loop reports, e.g. ``disruption`` (scheduler/store/lease.py)."""
        key = self.k("cluster", "condition")
        if condition is None:
            self.r.delete(key)
        else:
            self.r.set(key, json.dumps(condition))

    def condition(self) -> dict[str, Any] | None:
        """The cluster condition the loop raised, or None."""
        condition: dict[str, Any] | None = as_json(self.r.get(self.k("cluster", "condition")))
        return condition
