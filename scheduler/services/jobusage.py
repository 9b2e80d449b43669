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

A job's usage covers its whole life: the history of every node any of its attempts ran
on is read (a job requeued by a drain keeps its first attempt's samples), and each sample
says the node and the attempt it was taken on. What a task used in all (Slurm's
``sacct``: TotalCPU and MaxRSS) outlives the hour of history: its agent records
``{cpu_s, max_rss}`` in the task's record when the task ends, and the loop copies them
into the job's attempt record (``JobRecord.attempts[].usage``) when the attempt ends.

Units: ``cpu_cores`` cores (1.0 = one core busy), ``memory_rss``, ``max_rss`` and
``gpu_memory_used`` bytes, ``cpu_time_s`` CPU seconds, ``gpu_util`` percent (0-100, mean
over the task's GPUs), times s since the epoch.
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
    GPUs); None where not measured. ``node`` and ``attempt``: where and in which of the
    job's attempts it was taken."""

    t: float
    cpu_cores: float | None = None
    memory_rss: int | None = None
    gpu_util: float | None = None
    gpu_memory_used: int | None = None
    node: str = ""
    attempt: int | None = None


@dataclass
class AttemptUsage:
    """What one attempt of a task used in all: ``cpu_s`` CPU seconds, ``max_rss`` peak
    resident bytes (None: not measured), on ``node``; ``final``: recorded at the task's
    end (else: the latest sample's running figures)."""

    attempt: int | None
    node: str
    cpu_s: float | None = None
    max_rss: int | None = None
    final: bool = False


@dataclass
class TaskUsage:
    """One task's usage: where it ran last (``node``, ``attempt``), what it asked for, its
    latest figures (None when the newest sample is older than :data:`LATEST_S`), its
    samples in the window from every node and attempt, oldest first, and its totals over
    the job's life: ``cpu_time_s`` (CPU seconds, summed over attempts), ``max_rss`` (bytes,
    the peak of any attempt), ``attempts`` (:class:`AttemptUsage` each, oldest first).
    ``gpus``: ``[{index, util_percent, memory_used}]`` of the latest sample."""

    task: str
    node: str
    attempt: int | None
    cpu_request: float
    memory_request: int
    gpu_request: int
    latest: TaskPoint | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    samples: list[TaskPoint] = field(default_factory=list)
    cpu_time_s: float | None = None
    max_rss: int | None = None
    attempts: list[AttemptUsage] = field(default_factory=list)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def point(
    t: float, entry: dict[str, Any], node: str = ""
) -> tuple[TaskPoint, list[dict[str, Any]]]:
    """A stored per-task sample (``usage_sample``'s shape) taken on ``node`` as a
    :class:`TaskPoint` and its per-GPU figures ``[{index, util_percent, memory_used}]``."""
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
            node=node,
            attempt=_int(entry.get("attempt")),
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
        """The job's per-task usage: samples of the last ``window_s`` seconds (at most
        :data:`scheduler.services.usage.MAX_WINDOW_S`) from every node any attempt ran
        on, each labelled with its node and attempt, and each task's totals over the
        job's life (module docstring). With ``task`` (``<role>-<index>``) that task's
        only, read from the nodes it ran on (a chart's poll reads those nodes' history,
        not every node of a large job).

        Returns:
            ``{job, uid, vc, state, now, window_s, tasks: [TaskUsage...] by task,
            totals: {cpu_cores, memory_rss, gpu_memory_used, gpu_util, gpus,
            cpu_time_s, max_rss}}`` (the first five over the tasks' latest figures, the
            last two over their lives; None when no task has one).

        Raises:
            NotFoundError: unknown job, another VC's job, or (``uid``) another submission.
            ForbiddenError: an agent token.
        """
        job = self.jobs.get(principal, name, uid=uid)
        window_s = max(1, min(int(window_s), MAX_WINDOW_S))
        now = self.store.now()
        ref = job.get("uid", "")
        tasks = {f"{t.get('role')}-{t.get('index')}": t for t in job.get("tasks") or []}
        ended = [a for a in job.get("attempts") or [] if isinstance(a, dict)]
        # what each task used in ended attempts and (ended tasks) in the current one
        recorded: dict[str, dict[int | None, AttemptUsage]] = {}
        for a in ended:
            per_task = a.get("usage")
            for key_task, u in (per_task if isinstance(per_task, dict) else {}).items():
                if isinstance(u, dict):
                    recorded.setdefault(key_task, {})[_int(a.get("attempt"))] = _final(
                        _int(a.get("attempt")), u
                    )
        for key_task, rec in tasks.items():
            u = rec.get("usage")
            if isinstance(u, dict):
                recorded.setdefault(key_task, {})[_int(rec.get("attempt"))] = _final(
                    _int(rec.get("attempt")), {"node": rec.get("node"), **u}
                )
        nodes = _nodes(tasks, ended, recorded, task)
        found: dict[str, TaskUsage] = {}
        running: dict[str, dict[int | None, AttemptUsage]] = {}
        prefix = f"{ref}/"
        histories = self.store.usage_histories(sorted(nodes)) if nodes else {}
        for node, rows in histories.items():
            for row in rows:
                t = float(row.get("t", 0))
                per_task = row.get("tasks")
                if not isinstance(per_task, dict):
                    continue
                for key, entry in per_task.items():
                    if not key.startswith(prefix) or not isinstance(entry, dict):
                        continue
                    key_task = key[len(prefix) :]
                    if task is not None and key_task != task:
                        continue
                    p, gpus = point(t, entry, node)
                    _running(running, key_task, p, entry)
                    if t < now - window_s:
                        continue
                    got = found.get(key_task)
                    if got is None:
                        got = found[key_task] = _task_usage(key_task, tasks.get(key_task, {}))
                    got.samples.append(p)
                    if got.latest is None or p.t >= got.latest.t:
                        got.latest, got.gpus, got.node = p, gpus, node
                        got.attempt = p.attempt
        for key_task in set(recorded) | set(running):
            if (task is None or key_task == task) and key_task not in found:
                got = found[key_task] = _task_usage(key_task, tasks.get(key_task, {}))
                got.node = str(tasks.get(key_task, {}).get("node") or "")
                got.attempt = _int(tasks.get(key_task, {}).get("attempt"))
        out = []
        for key_task in sorted(found):
            u = found[key_task]
            u.samples.sort(key=lambda p: p.t)
            if u.latest is not None and u.latest.t < now - LATEST_S:
                u.latest, u.gpus = None, []
            # a recorded end beats the running figures of the same attempt
            per = {**running.get(key_task, {}), **recorded.get(key_task, {})}
            u.attempts = [per[k] for k in sorted(per, key=lambda a: -1 if a is None else a)]
            cpus = [a.cpu_s for a in u.attempts if a.cpu_s is not None]
            rss = [a.max_rss for a in u.attempts if a.max_rss is not None]
            u.cpu_time_s = round(sum(cpus), 3) if cpus else None
            u.max_rss = max(rss) if rss else None
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


def _final(attempt: int | None, u: dict[str, Any]) -> AttemptUsage:
    cpu, rss = _num(u.get("cpu_s")), _int(u.get("max_rss"))
    return AttemptUsage(attempt, str(u.get("node") or ""), cpu, rss, final=True)


def _running(
    running: dict[str, dict[int | None, AttemptUsage]],
    key_task: str,
    p: TaskPoint,
    entry: dict[str, Any],
) -> None:
    """Fold one sample's running totals (``cpu_s``, ``maxrss``: both only grow) into the
    task's attempt."""
    cpu, rss = _num(entry.get("cpu_s")), _int(entry.get("maxrss"))
    if rss is None and p.memory_rss is not None:
        rss = p.memory_rss
    a = running.setdefault(key_task, {}).setdefault(p.attempt, AttemptUsage(p.attempt, p.node))
    if cpu is not None:
        a.cpu_s = cpu if a.cpu_s is None else max(a.cpu_s, cpu)
    if rss is not None:
        a.max_rss = rss if a.max_rss is None else max(a.max_rss, rss)


def _task_usage(key_task: str, rec: dict[str, Any]) -> TaskUsage:
    return TaskUsage(
        task=key_task,
        node="",
        attempt=None,
        cpu_request=int(rec.get("cpu_m") or 0) / 1000,
        memory_request=int(rec.get("memory") or 0),
        gpu_request=int(rec.get("gpu") or 0),
    )


def _nodes(
    tasks: dict[str, dict[str, Any]],
    ended: list[dict[str, Any]],
    recorded: dict[str, dict[int | None, AttemptUsage]],
    task: str | None,
) -> set[str]:
    """The nodes whose history to read: every node of every attempt; for one ``task``,
    the nodes it ran on (its recorded attempts' nodes, its node now, and every node of an
    ended attempt that recorded nothing for it)."""
    if task is None:
        nodes = {t.get("node") for t in tasks.values()}
        for a in ended:
            nodes.update(a.get("nodes") or [])
    else:
        nodes = {tasks.get(task, {}).get("node")}
        nodes.update(a.node for a in recorded.get(task, {}).values())
        for a in ended:
            per = a.get("usage")
            if not (isinstance(per, dict) and task in per):
                nodes.update(a.get("nodes") or [])
    return {n for n in nodes if isinstance(n, str) and n}


def _totals(tasks: list[TaskUsage]) -> dict[str, Any]:
    latest = [t.latest for t in tasks if t.latest is not None]

    def total(attr: str) -> float | None:
        vals = [getattr(p, attr) for p in latest if getattr(p, attr) is not None]
        return sum(vals) if vals else None

    utils = [g["util_percent"] for t in tasks for g in t.gpus if g["util_percent"] is not None]
    cpu = total("cpu_cores")
    rss, gmem = total("memory_rss"), total("gpu_memory_used")
    cpu_times = [t.cpu_time_s for t in tasks if t.cpu_time_s is not None]
    peaks = [t.max_rss for t in tasks if t.max_rss is not None]
    return {
        "cpu_time_s": round(sum(cpu_times), 3) if cpu_times else None,
        "max_rss": max(peaks) if peaks else None,
        "cpu_cores": None if cpu is None else round(cpu, 3),
        "memory_rss": None if rss is None else int(rss),
        "gpu_memory_used": None if gmem is None else int(gmem),
        "gpu_util": round(sum(utils) / len(utils), 1) if utils else None,
        "gpus": sum(len(t.gpus) for t in tasks),
    }
