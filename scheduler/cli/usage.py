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
from scheduler.timespec import DEFAULT_USAGE_SINCE
from scheduler.units import format_duration, format_gpu_hours

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


def _cpu_time(v: float | None) -> str:
    return "-" if v is None else format_duration(v) if v >= 60 else f"{v:.1f}s"


def job_usage(client: ApiClient, name: str, window_s: int = 300) -> JobUsageOut:
    """The job's usage from the API (``GET /api/v1/jobs/{name}/usage``)."""
    from scheduler.api.usageschemas import JobUsageOut

    data = client.request("GET", f"/api/v1/jobs/{name}/usage", params={"window": window_s})
    return parse(JobUsageOut, data, f"usage of {name}")


def print_top(u: JobUsageOut) -> None:
    """The table of ``job top``: one row per task with its latest figures (the node and
    attempt of its latest sample), what it used over its life (CPU time and peak memory,
    every attempt), then totals. GPUs are counted (their indices follow in parentheses);
    the total row counts them the same way."""
    console.print(
        f"job {esc(u.job)} ({markup_state(u.state)}, vc {esc(u.vc)}) uid {esc(u.uid or '-')};"
        " figures of the last sample (every 5 s), requests after '/';"
        " CPU time and max RSS over every attempt",
        highlight=False,
    )
    table = Table(
        "task", "node", "attempt", "CPU cores", "memory", "GPUs", "GPU util", "GPU memory",
        "CPU time", "max RSS",
    )  # fmt: skip
    for t in u.tasks:
        p = t.latest
        ids = ",".join(str(g.index) for g in t.gpus)
        if t.gpus:
            gpus = f"{len(t.gpus)} ({ids})"
        else:
            gpus = "-" if not t.gpu_request or p is None else "?"
        per_gpu = " ".join(_pct(g.util_percent) for g in t.gpus) if t.gpus else "-"
        table.add_row(
            t.task,
            t.node or "-",
            "-" if t.attempt is None else str(t.attempt),
            _cores(p.cpu_cores if p else None, t.cpu_request),
            _mem(p.memory_rss if p else None, t.memory_request),
            gpus,
            per_gpu,
            _mem(p.gpu_memory_used if p else None),
            _cpu_time(t.cpu_time_s),
            _mem(t.max_rss),
        )
    s = u.totals
    table.add_row(
        "total",
        "",
        "",
        _cores(s.cpu_cores),
        _mem(s.memory_rss),
        str(s.gpus) if s.gpus else "-",
        _pct(s.gpu_util) + (" mean" if s.gpu_util is not None else ""),
        _mem(s.gpu_memory_used),
        _cpu_time(s.cpu_time_s),
        _mem(s.max_rss) + (" (largest)" if s.max_rss is not None else ""),
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
    figures need NVML on the node), and what each used over the job's life (CPU time,
    max RSS: kept after it ends, as sacct's). GPUs: how many, their indices in
    parentheses. -o json|yaml print the API's answer with the last 5 minutes of samples,
    each naming its node and attempt. --watch (-w) redraws every --interval seconds until Ctrl-C, as
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
    since: str = typer.Option(
        DEFAULT_USAGE_SINCE, "--since", help="from (2h, 7d, 2026-11-01, Unix s)"
    ),
    until: str | None = typer.Option(None, "--until", help="to (same forms; default now)"),
    by: str = typer.Option("user", "--by", help="user | vc"),
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
) -> None:
    """GPU-hours and CPU core-hours per user (or --by vc) between --since (default 7d,
    as on the dashboard) and --until (default now): each job's attempts' allocated time
    inside the range x the GPUs (cores) it asks for, from the job records the cluster
    keeps (deleted and expired jobs are gone with their figures). A range in the future
    or running backwards is refused (exit 2). -o wide lists the jobs of each row; a user
    token sees its own VCs' jobs only."""
    if by not in ("user", "vc"):
        raise typer.BadParameter(f"--by: expected user or vc, got {by!r}")
    now = time.time()
    start = parse_when(since, now, "--since")
    end = parse_when(until, now, "--until") if until else None
    if start > now:
        raise typer.BadParameter(
            f"--since: expected a time in the past, got {since!r} ({fmt_time(start)} UTC)"
        )
    if end is not None and end <= start:
        raise typer.BadParameter(
            f"--until: expected a time after --since ({fmt_time(start)} UTC), got {until!r}"
            f" ({fmt_time(end)} UTC)"
        )
    report = gpu_hours(ApiClient(load()), start, end, by)
    fmt = output_format(output, as_json)
    if emit(report, fmt, [r.key for r in report.rows]):
        return
    console.print(
        f"GPU-hours by {report.by}, {fmt_time(report.since)} to {fmt_time(report.until)} UTC"
    )
    wide = fmt is OutputFormat.wide
    table = Table(
        report.by,
        "GPU-hours",
        "core-hours",
        "jobs",
        *(["job", "GPUs", "cores", "run time"] if wide else []),
    )
    for r in report.rows:
        extra = [""] * 4 if wide else []
        table.add_row(
            r.key,
            format_gpu_hours(r.gpu_hours),
            format_gpu_hours(r.core_hours),
            str(len(r.jobs)),
            *extra,
        )
        if wide:
            for j in r.jobs:
                table.add_row(
                    "",
                    format_gpu_hours(j.gpu_hours),
                    format_gpu_hours(j.core_hours),
                    "",
                    j.name,
                    str(j.gpus),
                    f"{j.cores:g}",
                    f"{j.seconds:.0f}s",
                )
    jobs = str(sum(len(r.jobs) for r in report.rows))
    table.add_row(
        "total", format_gpu_hours(report.total), format_gpu_hours(report.total_core_hours), jobs
    )
    console.print(table)
