"""What the dashboard pages show, computed from store records (no HTTP, no Redis calls).

Units in: cpu_m millicores, memory bytes, times seconds (Redis clock). Out: display strings
and numbers the templates print as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.states import TERMINAL_JOB_STATES, WAITING_JOB_STATES
from scheduler.units import format_bytes, format_duration, format_millicores

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


def duration(seconds: float | None) -> str:
    """``3s``, ``4m5s``, ``2h3m``, ``3d4h`` (:func:`scheduler.units.format_duration`, as
    the CLI prints); ``-`` for None."""
    return "-" if seconds is None else format_duration(seconds)


def cpu(millicores: int | float) -> str:
    """``1.5`` (cores), ``500m`` (:func:`scheduler.units.format_millicores`)."""
    return format_millicores(millicores)


def memory(n: int | float) -> str:
    """Bytes as ``512Mi`` / ``16Gi`` (:func:`scheduler.units.format_bytes`)."""
    return format_bytes(n)


def pending_words(job: Mapping[str, Any]) -> str:
    """Why a waiting job waits, in words (``""`` when it is not waiting)."""
    if job.get("state") not in WAITING:
        return ""
    reason = job.get("pending_reason") or {}
    if not reason:
        return "Waiting for the scheduler's next cycle"
    words = REASON_WORDS.get(str(reason.get("kind")), str(reason.get("kind") or "Pending"))
    message = str(reason.get("message") or "")
    return f"{words}: {message}" if message else words


def task_diagnosis(task: Mapping[str, Any]) -> dict | None:
    """The failure class of a task record for the job page's task table:
    ``{"kind", "summary", "retry" (bool), "hint", "retry_text"}``, None for a task that did
    not fail. The same diagnosis as ``pasture job show``
    (:func:`scheduler.diagnosis.diagnose_task`: the agent's, else one from the state)."""
    from scheduler.diagnosis import diagnose_task  # loads the rules once, on first use

    d = diagnose_task(task)
    if d is None:
        return None
    return {
        **d.to_dict(),
        "retry_text": "retry can help" if d.retry else "retry will not help",
    }


def job_row(job: Mapping[str, Any], tasks: Iterable[Mapping[str, Any]], now: float) -> dict:
    """One line of the jobs table: name, vc, user, state, age, queueing delay (from
    creation to placement, or until now while waiting), placement (nodes), reason."""
    created = float(job.get("created") or now)
    scheduled = job.get("scheduled_time")
    if scheduled is not None:
        delay = float(scheduled) - created
    elif job.get("state") in WAITING:
        delay = now - created
    else:
        delay = None
    nodes = sorted({str(t.get("node")) for t in tasks if t.get("node")})
    return {
        "name": job.get("name"),
        "vc": job.get("vc"),
        "user": job.get("user"),
        "state": job.get("state"),
        "age": duration(now - created),
        "delay": duration(delay),
        "placement": ", ".join(nodes) if nodes else "-",
        "reason": pending_words(job),
    }


def node_rows(nodes: Iterable[Mapping[str, Any]], ledger: Iterable[Any], now: float) -> list:
    """Lines of the nodes table with what the ledger allocates on each node."""
    alloc: dict[str, dict[str, int]] = {}
    for a in ledger:
        got = alloc.setdefault(a.node, {"cpu_m": 0, "memory": 0, "gpu": 0, "tasks": 0})
        got["cpu_m"] += a.cpu_m
        got["memory"] += a.memory
        got["gpu"] += a.gpu
        got["tasks"] += 1
    rows = []
    for n in nodes:
        got = alloc.get(n["name"], {"cpu_m": 0, "memory": 0, "gpu": 0, "tasks": 0})
        usage = n.get("usage") or {}
        rows.append(
            {
                "name": n["name"],
                "address": n.get("address", ""),
                "state": n.get("state", ""),
                "gpu_model": n.get("gpu_model") or "-",
                "gpu": f"{got['gpu']} / {n.get('gpu', 0)}",
                "cpu": f"{cpu(got['cpu_m'])} / {cpu(n.get('cpu_m', 0))}",
                "memory": f"{memory(got['memory'])} / {memory(n.get('memory', 0))}",
                "tasks": got["tasks"],
                "cpu_percent": usage.get("cpu_percent"),
                "heartbeat_age": duration(now - float(n.get("heartbeat") or 0)),
            }
        )
    return rows


def gpu_totals(nodes: Iterable[Mapping[str, Any]], ledger: Iterable[Any]) -> dict[str, int]:
    """``{total, allocated, idle}`` GPUs; nodes not ``ready`` count in total, not idle."""
    nodes = list(nodes)
    used: dict[str, int] = {}
    for a in ledger:
        used[a.node] = used.get(a.node, 0) + a.gpu
    total = sum(int(n.get("gpu") or 0) for n in nodes if n.get("state") != "lost")
    allocated = sum(used.values())
    idle = sum(
        max(0, int(n.get("gpu") or 0) - used.get(n["name"], 0))
        for n in nodes
        if n.get("state") == "ready"
    )
    return {"total": total, "allocated": allocated, "idle": idle}


def vc_bars(vcs: Iterable[Mapping[str, Any]], resource: str) -> list[dict]:
    """Per-VC bar segments for one resource (``cpu_m``, ``memory`` or ``gpu``): used within
    the guarantee, borrowed, and the free rest of the guarantee, as percentages of the
    bar's scale (the largest of guarantee and used over all VCs)."""
    vcs = list(vcs)
    scale = max(
        [max(int(v["guarantee"].get(resource, 0)), int(v["used"].get(resource, 0))) for v in vcs]
        + [1]
    )
    fmt = {"cpu_m": cpu, "memory": memory, "gpu": str}[resource]
    out = []
    for v in vcs:
        g = int(v["guarantee"].get(resource, 0))
        u = int(v["used"].get(resource, 0))
        b = int(v["borrowed"].get(resource, 0))
        out.append(
            {
                "name": v["name"],
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


def usage_chart(
    minutes: list[Mapping[str, Any]],
    now: float,
    window_s: float = 3600.0,
    width: int = 600,
    height: int = 120,
) -> dict:
    """The cluster's mean CPU / memory / GPU utilisation over the last ``window_s`` seconds
    as SVG polyline points of a step line, one flat step per minute (server-rendered; no
    chart library needed for three lines).

    Args:
        minutes: ``[{t (minute start, s), cpu, mem, gpu (percent or None)}]`` as
            :meth:`Store.cluster_usage` gives them.

    Returns ``{series: [{key, name, points: "x,y x,y"}], width, height, samples: minutes
    with data, last: {cpu, mem, gpu}}``; a series without data has empty points.
    """
    start = now - window_s
    nbuckets = int(window_s // 60)
    series, last, seen = [], {}, 0
    rows = [m for m in minutes if start - 60 < float(m.get("t", 0)) <= now]
    for k, name in (("cpu", "CPU"), ("mem", "memory"), ("gpu", "GPU")):
        pts = []
        for m in sorted(rows, key=lambda r: r["t"]):
            v = m.get(k)
            if v is None:
                continue
            i = min(nbuckets - 1, max(0, int((float(m["t"]) + 30 - start) // 60)))
            x0, x1 = width * i / nbuckets, width * (i + 1) / nbuckets
            # 2 units of margin keep 0 % and 100 % off the frame
            y = 2 + (height - 4) * (1 - min(100.0, max(0.0, float(v))) / 100.0)
            pts.append(f"{x0:.1f},{y:.1f} {x1:.1f},{y:.1f}")
            last[k] = round(float(v), 1)
        series.append({"key": k, "name": name, "points": " ".join(pts)})
    seen = len(rows)
    return {"series": series, "width": width, "height": height, "samples": seen, "last": last}


def per_minute(samples: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A node's usage samples (``{t, cpu, mem, gpu}``) as per-minute means in the shape of
    :meth:`Store.cluster_usage` (``[{t: minute start, cpu, mem, gpu}]``, oldest first)."""
    sums: dict[int, dict[str, list[float]]] = {}
    for s in samples:
        minute = sums.setdefault(int(float(s.get("t", 0)) // 60) * 60, {})
        for k in ("cpu", "mem", "gpu"):
            if s.get(k) is not None:
                minute.setdefault(k, []).append(float(s[k]))
    out = []
    for m, v in sorted(sums.items()):
        row: dict[str, Any] = {"t": float(m)}
        for k in ("cpu", "mem", "gpu"):
            row[k] = sum(v[k]) / len(v[k]) if v.get(k) else None
        out.append(row)
    return out
