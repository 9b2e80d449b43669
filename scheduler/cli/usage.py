"""``pasture job top JOB`` (what each task of a job uses now: ``kubectl top pod``,
Slurm's ``sstat``) and ``pasture usage`` (GPU-hours per user or VC over a time range:
Slurm's ``sacct``, OpenPAI's VC usage).

Both read the API (``GET /api/v1/jobs/{name}/usage``, ``GET /api/v1/usage/gpu-hours``;
:mod:`scheduler.api.routers.usage`); times given as ``2h`` / ``30m`` / ``7d`` (that long
ago), an ISO date or time (UTC unless it names a zone) or Unix seconds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from scheduler.cli.client import ApiClient, parse
from scheduler.cli.config import load
from scheduler.cli.jobcommon import JobArg
from scheduler.cli.output import (
    IntervalOpt,
    JsonOpt,
    OutputFormat,
    OutputOpt,
    WatchOpt,
    console,
    emit,
    fmt_bytes,
    fmt_time,
    handle_errors,
    output_format,
    watch,
)
from scheduler.cli.text import Table, esc, markup_state
from scheduler.units import format_gpu_hours

if TYPE_CHECKING:
    from scheduler.api.usageschemas import GpuHoursOut, JobUsageOut


def parse_when(text: str, now: float, what: str = "time") -> float:
    """:func:`scheduler.timespec.parse_when` with its error as a Typer bad parameter."""
    from scheduler.timespec import parse_when as parse

    try:
        return parse(text, now, what)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _cores(v: float | None, request: float | None = None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" + (f"/{request:g}" if request else "")


def _mem(v: int | None, request: int | None = None) -> str:
    if v is None:
        return "-"
    return fmt_bytes(v) + (f"/{fmt_bytes(request)}" if request else "")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def job_usage(client: ApiClient, name: str, window_s: int = 300) -> JobUsageOut:
    """The job's usage from the API (``GET /api/v1/jobs/{name}/usage``)."""
    from scheduler.api.usageschemas import JobUsageOut

    data = client.request("GET", f"/api/v1/jobs/{name}/usage", params={"window": window_s})
    return parse(JobUsageOut, data, f"usage of {name}")


def print_top(u: JobUsageOut) -> None:
    """The table of ``job top``: one row per task with its latest figures, then totals."""
    console.print(
        f"job {esc(u.job)} ({markup_state(u.state)}, vc {esc(u.vc)}) uid {esc(u.uid or '-')};"
        " figures of the last "
        f"sample (every 5 s), requests after '/'"
    )
    table = Table("task", "node", "CPU cores", "memory", "GPUs", "GPU util", "GPU memory")
    for t in u.tasks:
        p = t.latest
        gpus = ", ".join(str(g.index) for g in t.gpus) or ("-" if not t.gpu_request else "?")
        per_gpu = " ".join(_pct(g.util_percent) for g in t.gpus) if t.gpus else "-"
        table.add_row(
            t.task,
            t.node,
            _cores(p.cpu_cores if p else None, t.cpu_request),
            _mem(p.memory_rss if p else None, t.memory_request),
            gpus,
            per_gpu,
            _mem(p.gpu_memory_used if p else None),
        )
    s = u.totals
    table.add_row(
        "total",
        "",
        _cores(s.cpu_cores),
        _mem(s.memory_rss),
        str(s.gpus or "-"),
        _pct(s.gpu_util) + (" mean" if s.gpu_util is not None else ""),
        _mem(s.gpu_memory_used),
    )
    console.print(table)
    if not any(t.latest for t in u.tasks):
        console.print(
            "no task of this job reported figures in the last 30 s "
            "(it is not running, or its agents send none yet)"
        )


@handle_errors
def top(
    name: str = JobArg,
    watch_: bool = WatchOpt,
    interval: float = IntervalOpt,
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
) -> None:
    """What each task of NAME uses now: CPU cores and resident memory of its processes,
    utilisation and memory of the GPUs it holds (the agents measure every 5 s; GPU
    figures need NVML on the node). -o json|yaml print the API's answer with the last
    5 minutes of samples. --watch (-w) redraws every --interval seconds until Ctrl-C, as
    on job list and node list."""
    client = ApiClient(load())
    fmt = output_format(output, as_json)

    def draw() -> None:
        u = job_usage(client, name)
        if not emit(u, fmt, [t.task for t in u.tasks]):
            print_top(u)

    watch(draw, watch_, interval)


def gpu_hours(client: ApiClient, since: float, until: float | None, by: str) -> GpuHoursOut:
    """``GET /api/v1/usage/gpu-hours``."""
    from scheduler.api.usageschemas import GpuHoursOut

    params: dict[str, str | float] = {"since": since, "by": by}
    if until is not None:
        params["until"] = until
    data = client.request("GET", "/api/v1/usage/gpu-hours", params=params)
    return parse(GpuHoursOut, data, "GPU-hours")


@handle_errors
def usage(
    since: str = typer.Option("24h", "--since", help="from (2h, 7d, 2026-11-01, Unix s)"),
    until: str | None = typer.Option(None, "--until", help="to (same forms; default now)"),
    by: str = typer.Option("user", "--by", help="user | vc"),
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
) -> None:
    """GPU-hours per user (or --by vc) between --since and --until: each job's attempts'
    allocated time inside the range x the GPUs it asks for, from the job records the
    cluster keeps (deleted and expired jobs are gone with their figures). -o wide lists
    the jobs of each row; a user token sees its own VCs' jobs only."""
    if by not in ("user", "vc"):
        raise typer.BadParameter(f"--by: expected user or vc, got {by!r}")
    now = time.time()
    start = parse_when(since, now, "--since")
    end = parse_when(until, now, "--until") if until else None
    report = gpu_hours(ApiClient(load()), start, end, by)
    fmt = output_format(output, as_json)
    if emit(report, fmt, [r.key for r in report.rows]):
        return
    console.print(
        f"GPU-hours by {report.by}, {fmt_time(report.since)} to {fmt_time(report.until)} UTC"
    )
    wide = fmt is OutputFormat.wide
    table = Table(report.by, "GPU-hours", "jobs", *(["job", "GPUs", "run time"] if wide else []))
    for r in report.rows:
        extra = [""] * 3 if wide else []
        table.add_row(r.key, format_gpu_hours(r.gpu_hours), str(len(r.jobs)), *extra)
        if wide:
            for j in r.jobs:
                table.add_row(
                    "", format_gpu_hours(j.gpu_hours), "", j.name, str(j.gpus), f"{j.seconds:.0f}s"
                )
    jobs = str(sum(len(r.jobs) for r in report.rows))
    table.add_row("total", format_gpu_hours(report.total), jobs)
    console.print(table)
