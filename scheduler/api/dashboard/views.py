"""What the dashboard pages show, computed from the services' answers (no HTTP, no Redis
calls).

Jobs, tasks and nodes come in as the API's own response models (``JobOut``, ``TaskOut``,
``NodeOut`` of :mod:`scheduler.api.schemas`, the shapes ``/api/v1`` answers and the CLI
parses), so a field renamed in the store or the API fails here as it fails there.
Units in: cpu_m millicores, memory bytes, times seconds (Redis clock). Out: display strings
and numbers the templates print as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from scheduler.services.records import spec_gpus
from scheduler.states import TERMINAL_JOB_STATES, WAITING_JOB_STATES, JobState
from scheduler.units import (
    format_bytes,
    format_duration,
    format_gpu_hours,
    format_millicores,
    format_resources,
)

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut, NodeOut, TaskOut, VcOut
    from scheduler.services.nodes import NodeAllocated
    from scheduler.services.usage import UsageSample

# Pending-reason kinds (scheduler.core.model.ReasonKind) in words; the reason's own
# message (one sentence with the numbers) is shown next to it.
REASON_WORDS: dict[str, str] = {
    "no-fit-ever": "No node of this cluster could ever hold a task",
    "insufficient-resources": "Waiting for free resources",
    "gang-incomplete": "Waiting until the whole gang fits at once",
    "vc-max": "Its virtual cluster is at its maximum",
    "vc-quota": "Its virtual cluster used its guarantee and cannot borrow",
    "unknown-vc": "Its virtual cluster does not exist",
    "reservation": "Held back for a reserved higher-priority job",
    "queue-order": "Behind a blocked job earlier in the queue",
    "preempting": "Preempting other jobs to make room",
    "cycle-limit": "Not looked at in the last cycle yet",
}
# job states: their one definition (scheduler.states)
TERMINAL = TERMINAL_JOB_STATES
WAITING = WAITING_JOB_STATES
UNSUCCESSFUL = frozenset({JobState.FAILED, JobState.STOPPED})  # their reason says why
# What each action that asks first does, in the words of its confirmation (dialog and page).
# The dialog and the confirmation page put them after "Stop job J?" / "Drain node N?".
CONSEQUENCES = {
    "cordon": "No new task will be placed on it; its running tasks keep running.",
    "drain": "It takes no new task, and its running tasks are stopped and requeued elsewhere.",
    "stop": "Its tasks get SIGTERM, then SIGKILL after the grace period; it does not restart.",
}


def duration(seconds: float | None) -> str:
    """``3s``, ``4m5s``, ``2h3m``, ``3d4h`` (:func:`scheduler.units.format_duration`, as
    the CLI prints); ``-`` for None."""
    return "-" if seconds is None else format_duration(seconds)


def cpu(millicores: int | float) -> str:
    """Cores from millicores (:func:`scheduler.units.format_millicores`: ``1.5``, ``500m``)."""
    return format_millicores(millicores)


def memory(n: int | float) -> str:
    """Bytes in binary units (:func:`scheduler.units.format_bytes`: ``512Mi``, ``23.5Gi``)."""
    return format_bytes(n)


def clock(t: float | None) -> str:
    """A Unix time (s) as ``YYYY-MM-DD HH:MM:SS`` UTC; ``-`` for None or 0."""
    if not t:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(t)))


def run_time(job: JobOut, now: float) -> float | None:
    """Seconds from the job's start to its end (or to ``now`` while it runs); None when it
    never started."""
    start = job.start_time
    if start is None or start <= 0:
        return None
    end = job.end_time if job.end_time is not None and job.end_time >= start else now
    return end - start


def pending_words(job: JobOut) -> str:
    """Why a waiting job waits, in words (``""`` when it is not waiting)."""
    if job.state not in WAITING:
        return ""
    reason = job.pending_reason
    if reason is None:
        return "Waiting for the scheduler's next cycle"
    words = REASON_WORDS.get(reason.kind, reason.kind or "Pending")
    return f"{words}: {reason.message}" if reason.message else words


def limit_text(limit: Any) -> str:
    """A VC's ``max`` (``{cpu_m, memory, gpu}``, a model or a dict; a zero or missing part
    means no cap on it) -> only the capped parts ('4 gpu'), or 'no cap'."""
    if limit is not None and not isinstance(limit, dict):
        limit = limit.model_dump()
    parts = {k: (limit or {}).get(k) or None for k in ("cpu_m", "memory", "gpu")}
    return format_resources(parts["cpu_m"], parts["memory"], parts["gpu"]) or "no cap"


def failure_words(job: JobOut) -> str:
    """Why a job ended without success (its ``reason``; ``""`` for any other job)."""
    return job.reason if job.state in UNSUCCESSFUL else ""


def task_diagnosis(task: TaskOut) -> dict[str, Any] | None:
    """The failure class of a task record for the job page's task table:
    ``{"kind", "summary", "retry" (bool), "hint", "retry_text"}``, None for a task that did
    not fail. The same diagnosis as ``pasture job show``
    (:func:`scheduler.rules.diagnosis.diagnose_task`: the agent's, else one from the state)."""
    from scheduler.rules.diagnosis import diagnose_task  # loads the rules once, on first use

    d = diagnose_task(task)
    if d is None:
        return None
    return {
        **d.to_dict(),
        "retry_text": "retry can help" if d.retry else "retry will not help",
    }


def job_row(job: JobOut, tasks: Iterable[TaskOut], now: float) -> dict[str, Any]:
    """One line of the jobs table: name, vc, user, state, age, queueing delay (from
    creation to placement, or until now while waiting), placement (nodes), reason (why it
    waits, or why it failed or was stopped; ``failed`` says which), gpus
    (asked for), duration (run time so far), ended (UTC end time of a finished job)."""
    created = float(job.created or now)
    if job.scheduled_time is not None:
        delay = float(job.scheduled_time) - created
    elif job.state in WAITING:
        delay = now - created
    else:
        delay = None
    nodes = sorted({t.node for t in tasks if t.node})
    return {
        "name": job.name,
        "key": job.key,
        "vc": job.vc,
        "user": job.user,
        "state": job.state.value,
        "age": duration(now - created),
        "delay": duration(delay),
        "placement": ", ".join(nodes) if nodes else "-",
        "reason": pending_words(job) or failure_words(job),
        "failed": job.state in UNSUCCESSFUL,
        "gpus": spec_gpus(job.spec),
        "duration": duration(run_time(job, now)),
        "ended": clock(job.end_time) if job.state in TERMINAL else "-",
    }


def node_rows(
    nodes: Iterable[NodeOut], allocated: Mapping[str, NodeAllocated], now: float
) -> list[dict[str, Any]]:
    """Lines of the nodes table with what the ledger allocates on each node (the node
    service's sums, :meth:`scheduler.services.nodes.NodeService.allocated`)."""
    rows = []
    for n in nodes:
        got = allocated.get(n.name)
        cpu_m, mem, gpu, tasks = (
            (got.cpu_m, got.memory, got.gpu, got.tasks) if got else (0, 0, 0, 0)
        )
        rows.append(
            {
                "name": n.name,
                "address": n.address,
                "state": n.state,
                "gpu_model": n.gpu_model or "-",
                "gpu": f"{gpu} / {n.gpu}",
                "cpu": f"{cpu(cpu_m)} / {cpu(n.cpu_m)}",
                "memory": f"{memory(mem)} / {memory(n.memory)}",
                "tasks": tasks,
                "cpu_percent": n.usage.get("cpu_percent"),
                "gpus": gpu_summary(n),
                "heartbeat_age": duration(now - float(n.heartbeat or 0)),
            }
        )
    return rows


def vc_bars(vcs: Iterable[VcOut], resource: str) -> list[dict[str, Any]]:
    """Per-VC bar segments for one resource (``cpu_m``, ``memory`` or ``gpu``): used within
    the guarantee, borrowed, and the free rest of the guarantee, as percentages of the
    bar's scale (the largest of guarantee and used over all VCs)."""
    vcs = list(vcs)
    scale = max([max(getattr(v.guarantee, resource), getattr(v.used, resource)) for v in vcs] + [1])
    formats: dict[str, Callable[[int], str]] = {"cpu_m": cpu, "memory": memory, "gpu": str}
    fmt = formats[resource]
    out = []
    for v in vcs:
        g = getattr(v.guarantee, resource)
        u = getattr(v.used, resource)
        b = getattr(v.borrowed, resource)
        out.append(
            {
                "name": v.name,
                "within": 100.0 * (u - b) / scale,
                "borrowed": 100.0 * b / scale,
                "free": 100.0 * max(0, g - u) / scale,
                "label": f"used {fmt(u)} of {fmt(g)} guaranteed"
                + (f", {fmt(b)} borrowed" if b else ""),
                "guarantee": fmt(g),
                "used": fmt(u),
                "borrowed_text": fmt(b),
            }
        )
    return out


def hours_bars(rows: Iterable[Any], attr: str, unit: str) -> list[dict[str, Any]]:
    """One bar per row of a GPU-hours report (``GpuHoursRowOut``) for the bar chart of
    the GPU-hours page (``_bars.html``): ``attr`` (``gpu_hours`` or ``core_hours``) as a
    percentage of the largest row's (``within``), labelled ``"<hours> <unit>"``."""
    rows = list(rows)
    scale = max([float(getattr(r, attr)) for r in rows] + [0.0]) or 1.0
    return [
        {
            "name": r.key,
            "within": 100.0 * float(getattr(r, attr)) / scale,
            "borrowed": 0.0,
            "free": 0.0,
            "label": f"{format_gpu_hours(float(getattr(r, attr)))} {unit}",
        }
        for r in rows
    ]


def chart_series(samples: Iterable[UsageSample]) -> dict[str, list[Any]]:
    """Usage samples (:class:`scheduler.services.usage.UsageSample`, percent) as the
    column arrays a uPlot chart takes: ``{t: [Unix s], cpu: [...], mem: [...], gpu:
    [...]}``, oldest first; a missing figure is None (a gap in the line, never a made-up
    0)."""
    rows = sorted(samples, key=lambda r: r.t)
    out: dict[str, list[Any]] = {"t": [r.t for r in rows]}
    for k in ("cpu", "mem", "gpu"):
        out[k] = [None if getattr(r, k) is None else round(getattr(r, k), 1) for r in rows]
    return out


def task_chart_series(task: Any) -> dict[str, list[Any]]:
    """One task's samples (:class:`scheduler.services.jobusage.TaskUsage`) as chart
    columns in percent: ``cpu`` = cores used / cores requested, ``mem`` = resident bytes /
    bytes requested (either above 100 when the task uses more than it asked for and its
    executor does not cap it), ``gpu`` = mean utilisation of its GPUs; None where not
    measured (or nothing was requested); ``where``: the node (and attempt) each sample
    was taken on, samples of every node and attempt of the job's life."""

    def pct(v: float | None, of: float) -> float | None:
        return None if v is None or not of else round(100.0 * v / of, 1)

    return {
        "t": [p.t for p in task.samples],
        "where": [
            f"{p.node} (attempt {p.attempt})" if p.attempt is not None else p.node
            for p in task.samples
        ],
        "cpu": [pct(p.cpu_cores, task.cpu_request) for p in task.samples],
        "mem": [pct(p.memory_rss, task.memory_request) for p in task.samples],
        "gpu": [p.gpu_util for p in task.samples],
    }


def gpu_rows(node: NodeOut) -> list[dict[str, Any]]:
    """One line per GPU of a node for the per-GPU table: ``{index, util (0-100 or None),
    util_text, memory_used, memory_total (bytes or None), memory_text, memory_percent,
    healthy (bool or None), temperature_c, problems}``.

    The figures are the agent's NVML samples (``usage["gpus"]``) and health probe
    (``usage["gpu_health"]``); a GPU the node declares without a sample (the dev cluster's
    fake GPUs, a GPU NVML refused) shows ``unknown``, never a made-up number.
    """
    usage = node.usage or {}
    samples = {
        int(g["index"]): g
        for g in usage.get("gpus") or []
        if isinstance(g, dict) and g.get("index") is not None
    }
    health = {
        int(g["index"]): g
        for g in usage.get("gpu_health") or []
        if isinstance(g, dict) and g.get("index") is not None
    }
    count = max([int(node.gpu or 0), *(i + 1 for i in samples), *(i + 1 for i in health)])
    rows = []
    for i in range(count):
        g, h = samples.get(i, {}), health.get(i, {})
        util = g.get("util_percent")
        used, total = g.get("memory_used"), g.get("memory_total")
        mem: tuple[float, float] | None = None  # (used, total) bytes when both are known
        if isinstance(used, int | float) and isinstance(total, int | float) and total > 0:
            mem = (used, total)
        rows.append(
            {
                "index": i,
                "util": float(util) if isinstance(util, int | float) else None,
                "util_text": f"{float(util):.0f}%" if isinstance(util, int | float) else "unknown",
                "memory_used": mem[0] if mem else None,
                "memory_total": mem[1] if mem else None,
                "memory_text": f"{memory(mem[0])} / {memory(mem[1])}" if mem else "unknown",
                "memory_percent": 100.0 * mem[0] / mem[1] if mem else None,
                "healthy": h.get("healthy") if h else None,
                "temperature_c": h.get("temperature_c"),
                "problems": list(h.get("problems") or []),
            }
        )
    return rows


def gpu_summary(node: NodeOut) -> str:
    """The nodes table's per-GPU cell: ``"87% 12% unknown"`` (utilisation per GPU index),
    ``-`` without GPUs."""
    rows = gpu_rows(node)
    return " ".join(r["util_text"] for r in rows) if rows else "-"
