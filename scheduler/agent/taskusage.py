"""What each task running on this node uses: CPU and memory of its processes (psutil over
the task's process tree) and the NVML figures of the GPUs it holds.

The agent adds the result to every heartbeat's usage report as ``tasks`` (the store keeps
it in the node's usage history, never in the node's record that every token reads:
:func:`scheduler.store.nodes.heartbeat_args`). One entry per local task::

    {job, uid, task: "<role>-<index>", attempt,
     cpu_cores: float | None,   # CPU time of its processes per wall second since the
                                # previous sample (1.0 = one core busy); None on the
                                # first sample of a task or without a process to read
     memory_rss: int | None,    # bytes: the sum of its processes' resident set sizes
                                # (pages shared between them count once per process)
     cpu_s: float | None,       # CPU seconds (user + system) the task used so far: its
                                # processes alive and the children they waited for
     max_rss: int | None,       # bytes: the largest memory_rss seen so far (Slurm's
                                # MaxRSS, over the samples: a peak between two is missed)
     gpus: [{index, util_percent, memory_used}]}   # the node's NVML sample of each GPU
                                # the task holds (None where NVML gave no figure)

The process tree is found from the executor's handle: the process executor's handle names
the task's process group leader (``pid``); a container's processes are not read here (its
entry has ``cpu_cores``/``memory_rss`` None, GPUs still measured). psutil works on every
platform the agent runs on, with or without a per-task cgroup.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any, Protocol

import psutil


class _Task(Protocol):
    job: str
    key: str
    attempt: int
    handle: str
    uid: str
    gpus: list[int]


def task_pid(handle: str) -> int | None:
    """The root process id an executor's handle names (``{"pid": n, ...}``), or None."""
    try:
        h = json.loads(handle)
    except (TypeError, ValueError):
        return None
    pid = h.get("pid") if isinstance(h, dict) else None
    return int(pid) if isinstance(pid, int) and pid > 0 else None


class ProcessTable:
    """One scan of the node's process table: each process's children. Every task's tree
    is read from the same scan, so a sample costs one pass over ``/proc`` whatever the
    number of tasks (psutil's ``children(recursive=True)`` scans the whole table on each
    call: 80 tasks took 0.7 s of CPU per heartbeat, past a short lease on a busy node)."""

    def __init__(self) -> None:
        self._children: dict[int, list[int]] = {}
        for p in psutil.process_iter(["ppid"]):
            ppid = p.info.get("ppid")
            if isinstance(ppid, int):
                self._children.setdefault(ppid, []).append(p.pid)

    def descendants(self, pid: int) -> list[int]:
        """The process ids below ``pid`` at the scan (children first), without ``pid``."""
        out: list[int] = []
        seen = {pid}
        todo = [pid]
        while todo:
            for child in self._children.get(todo.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    todo.append(child)
        return out


def tree_figures(pid: int, table: ProcessTable | None = None) -> tuple[float, int] | None:
    """(CPU seconds user+system, resident bytes) summed over ``pid`` and its descendants
    now alive, or None when ``pid`` is gone. The CPU seconds include those of children
    that ended and were waited for (``children_user``/``children_system``: a shell's
    finished commands), so they only grow while the tree lives. Processes that vanish
    while read are skipped. ``table``: a scan to find the descendants in (one per sample
    of many tasks); a fresh one when None."""
    try:
        root = psutil.Process(pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    below = (table or ProcessTable()).descendants(pid)
    cpu, rss = 0.0, 0
    for member in (pid, *below):
        try:
            proc = root if member == pid else psutil.Process(member)
            with proc.oneshot():
                t = proc.cpu_times()
                cpu += t.user + t.system + t.children_user + t.children_system
                rss += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return cpu, rss


class TaskUsageSampler:
    """Per-task usage between two calls (the CPU figure is a rate, so the sampler keeps
    each task's previous CPU time and when it was read).

    Args:
        clock: monotonic seconds (a test may pass its own).
    """

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, tuple[float, float]] = {}  # task id -> (cpu s, read at)
        self._peak: dict[str, tuple[float, int]] = {}  # task id -> (cpu s, max rss)

    def sample(
        self, tasks: Iterable[_Task], gpu_samples: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """One entry per task (module docstring); ``gpu_samples``: the node's NVML
        samples (:func:`scheduler.agent.resources.gpu_samples`)."""
        by_index = {
            int(g["index"]): g
            for g in gpu_samples
            if isinstance(g, dict) and isinstance(g.get("index"), int)
        }
        now = self._clock()
        out, seen = [], set()
        table: ProcessTable | None = None  # one scan for every task of this sample
        for t in tasks:
            tid = f"{t.job}/{t.uid}/{t.key}#{t.attempt}"
            seen.add(tid)
            cpu_cores: float | None = None
            rss: int | None = None
            pid = task_pid(t.handle)
            figures = None
            if pid is not None:
                table = table or ProcessTable()
                figures = tree_figures(pid, table)
            if figures is not None:
                cpu_s, rss = figures
                prev = self._last.get(tid)
                if prev is not None and now > prev[1]:
                    cpu_cores = round(max(0.0, cpu_s - prev[0]) / (now - prev[1]), 3)
                self._last[tid] = (cpu_s, now)
                old = self._peak.get(tid, (0.0, 0))
                self._peak[tid] = (max(old[0], cpu_s), max(old[1], rss))
            peak = self._peak.get(tid)
            gpus = []
            for i in t.gpus:
                g = by_index.get(int(i), {})
                gpus.append(
                    {
                        "index": int(i),
                        "util_percent": g.get("util_percent"),
                        "memory_used": g.get("memory_used"),
                    }
                )
            out.append(
                {
                    "job": t.job,
                    "uid": t.uid,
                    "task": t.key,
                    "attempt": t.attempt,
                    "cpu_cores": cpu_cores,
                    "memory_rss": rss,
                    "cpu_s": None if peak is None else round(peak[0], 3),
                    "max_rss": None if peak is None else peak[1],
                    "gpus": gpus,
                }
            )
        for gone in set(self._last) - seen:
            del self._last[gone]
        for gone in set(self._peak) - seen:
            del self._peak[gone]
        return out

    def final(self, t: _Task) -> dict[str, Any] | None:
        """The task's totals at its end, read once more if its processes still live:
        ``{cpu_s, max_rss}`` (CPU seconds, bytes; module docstring), or None when it was
        never measured (a container's task, one that ended before its first sample).
        Kept in the task's record (Slurm's ``sacct`` TotalCPU and MaxRSS)."""
        tid = f"{t.job}/{t.uid}/{t.key}#{t.attempt}"
        pid = task_pid(t.handle)
        figures = tree_figures(pid) if pid is not None else None
        old = self._peak.pop(tid, None)
        self._last.pop(tid, None)
        if figures is not None:
            old = (max(old[0] if old else 0.0, figures[0]), max(old[1] if old else 0, figures[1]))
        if old is None:
            return None
        return {"cpu_s": round(old[0], 3), "max_rss": int(old[1])}
