"""Per-job and per-task usage (``pasture job top``, ``GET /api/v1/jobs/{name}/usage``, the
job page's charts, the task series of ``/metrics``).

Where the figures come from: every agent measures each task it runs (CPU and memory of
the task's processes, NVML figures of the GPUs it holds:
:mod:`scheduler.agent.taskusage`) and sends them with its heartbeat; the store keeps them
in the node's usage history (``node:<node>:usage``, one sample per 5 s, one hour), keyed
``<uid>/<role>-<index>`` (:func:`scheduler.store.nodes.usage_sample`). A job's samples are
those of its own uid only, so a job submitted again under a deleted job's name starts with
no figures. A job is answered only to callers who may see it (the job API's rule: another
VC's job is "not found").

Units: ``cpu_cores`` cores (1.0 = one core busy), ``memory_rss`` and ``gpu_memory_used``
bytes, ``gpu_util`` percent (0-100, mean over the task's GPUs), times s since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scheduler.services.usage import MAX_WINDOW_S

if TYPE_CHECKING:
    from scheduler.services.jobs import JobService
    from scheduler.services.principal import Principal
    from scheduler.store import Store

LATEST_S = 30.0
"""A task's latest sample counts as "now" when at most this old (s); older: no current
figure (the task ended, or its node stopped reporting)."""


@dataclass(frozen=True)
class TaskPoint:
    """One sample of one task: ``t`` (s), ``cpu_cores``, ``memory_rss`` (bytes),
    ``gpu_util`` (percent, mean over its GPUs), ``gpu_memory_used`` (bytes, sum over its
    GPUs); None where not measured."""

    t: float
    cpu_cores: float | None = None
    memory_rss: int | None = None
    gpu_util: float | None = None
    gpu_memory_used: int | None = None


@dataclass
class TaskUsage:
    """One task's usage: where it ran, what it asked for, its latest figures (None when
    the newest sample is older than :data:`LATEST_S`) and its samples in the window,
    oldest first. ``gpus``: ``[{index, util_percent, memory_used}]`` of the latest sample."""

    task: str
    node: str
    attempt: int | None
    cpu_request: float
    memory_request: int
    gpu_request: int
    latest: TaskPoint | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    samples: list[TaskPoint] = field(default_factory=list)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def point(t: float, entry: dict[str, Any]) -> tuple[TaskPoint, list[dict[str, Any]]]:
    """A stored per-task sample (``usage_sample``'s shape) as a :class:`TaskPoint` and its
    per-GPU figures ``[{index, util_percent, memory_used}]``."""
    raw = entry.get("gpus")
    gpus = []
    for g in raw if isinstance(raw, list) else []:  # Lua's cjson turns [] into {}
        if isinstance(g, list) and len(g) == 3:
            gpus.append({"index": g[0], "util_percent": _num(g[1]), "memory_used": _num(g[2])})
    utils = [g["util_percent"] for g in gpus if g["util_percent"] is not None]
    mems = [g["memory_used"] for g in gpus if g["memory_used"] is not None]
    rss = _num(entry.get("rss"))
    return (
        TaskPoint(
            t=t,
            cpu_cores=_num(entry.get("cpu")),
            memory_rss=None if rss is None else int(rss),
            gpu_util=round(sum(utils) / len(utils), 1) if utils else None,
            gpu_memory_used=int(sum(mems)) if mems else None,
        ),
        gpus,
    )


class JobUsageService:
    """Usage of one job's tasks. Args: store: the backend store; jobs: the job service
    (its visibility rule and its records)."""

    def __init__(self, store: Store, jobs: JobService) -> None:
        self.store = store
        self.jobs = jobs

    def job(
        self,
        principal: Principal,
        name: str,
        window_s: int = 3600,
        uid: str | None = None,
        task: str | None = None,
    ) -> dict[str, Any]:
        """The job's per-task usage over the last ``window_s`` seconds (at most
        :data:`scheduler.services.usage.MAX_WINDOW_S`); with ``task`` (``<role>-<index>``)
        that task's only, read from the node it runs on (a chart's poll reads one node's
        history, not every node of a large job).

        Returns:
            ``{job, uid, vc, state, now, window_s, tasks: [TaskUsage...] by task,
            totals: {cpu_cores, memory_rss, gpu_memory_used, gpu_util, gpus}}`` (totals
            over the tasks' latest figures; None when no task has one).

        Raises:
            NotFoundError: unknown job, another VC's job, or (``uid``) another submission.
            ForbiddenError: an agent token.
        """
        job = self.jobs.get(principal, name, uid=uid)
        window_s = max(1, min(int(window_s), MAX_WINDOW_S))
        now = self.store.now()
        ref = job.get("uid", "")
        tasks = {f"{t.get('role')}-{t.get('index')}": t for t in job.get("tasks") or []}
        nodes = {t.get("node") for t in tasks.values()}
        for a in job.get("attempts") or []:
            nodes.update(a.get("nodes") or [])
        if task is not None and tasks.get(task, {}).get("node"):
            nodes = {tasks[task]["node"]}
        nodes.discard(None)
        nodes.discard("")
        found: dict[str, TaskUsage] = {}
        prefix = f"{ref}/"
        histories = self.store.usage_histories(sorted(nodes)) if nodes else {}
        for node, rows in histories.items():
            for row in rows:
                t = float(row.get("t", 0))
                per_task = row.get("tasks")
                if t < now - window_s or not isinstance(per_task, dict):
                    continue
                for key, entry in per_task.items():
                    if not key.startswith(prefix) or not isinstance(entry, dict):
                        continue
                    key_task = key[len(prefix) :]
                    if task is not None and key_task != task:
                        continue
                    got = found.get(key_task)
                    if got is None:
                        rec = tasks.get(key_task, {})
                        got = found[key_task] = TaskUsage(
                            task=key_task,
                            node=node,
                            attempt=None,
                            cpu_request=int(rec.get("cpu_m") or 0) / 1000,
                            memory_request=int(rec.get("memory") or 0),
                            gpu_request=int(rec.get("gpu") or 0),
                        )
                    p, gpus = point(t, entry)
                    got.samples.append(p)
                    if got.latest is None or p.t >= got.latest.t:
                        got.latest, got.gpus, got.node = p, gpus, node
                        got.attempt = entry.get("attempt")
        out = []
        for key_task in sorted(found):
            u = found[key_task]
            u.samples.sort(key=lambda p: p.t)
            if u.latest is not None and u.latest.t < now - LATEST_S:
                u.latest, u.gpus = None, []
            out.append(u)
        return {
            "job": name,
            "uid": ref,
            "vc": job.get("vc", ""),
            "state": job.get("state", ""),
            "now": now,
            "window_s": window_s,
            "tasks": out,
            "totals": _totals(out),
        }


def _totals(tasks: list[TaskUsage]) -> dict[str, Any]:
    latest = [t.latest for t in tasks if t.latest is not None]

    def total(attr: str) -> float | None:
        vals = [getattr(p, attr) for p in latest if getattr(p, attr) is not None]
        return sum(vals) if vals else None

    utils = [g["util_percent"] for t in tasks for g in t.gpus if g["util_percent"] is not None]
    cpu = total("cpu_cores")
    rss, gmem = total("memory_rss"), total("gpu_memory_used")
    return {
        "cpu_cores": None if cpu is None else round(cpu, 3),
        "memory_rss": None if rss is None else int(rss),
        "gpu_memory_used": None if gmem is None else int(gmem),
        "gpu_util": round(sum(utils) / len(utils), 1) if utils else None,
        "gpus": sum(len(t.gpus) for t in tasks),
    }
