"""Rich output helpers and the CLI's exit codes.

Exit codes (scripts can rely on them; documented in docs/cli.md):

=====  ==========================================================================
0      success (with ``--wait``: the job succeeded)
1      the job ended but did not succeed (failed or stopped), or a local failure
2      usage error (bad option; Typer's own code)
3      not configured: no endpoint/token (run ``pasture login`` or ``pasture dev up``)
4      unauthorized or forbidden (401/403)
5      not found (404)
6      rejected input: malformed or invalid spec, conflict, too large (400/409/413/422)
7      the API cannot be reached or failed (connection error, 5xx)
=====  ==========================================================================
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from scheduler.cli.client import ApiError
from scheduler.cli.config import ConfigError

OK, JOB_NOT_SUCCEEDED, USAGE, NOT_CONFIGURED, AUTH, NOT_FOUND, REJECTED, UNAVAILABLE = range(8)

console = Console()
err_console = Console(stderr=True)


def exit_code_for(status: int) -> int:
    """The exit code for an API status (0 = connection failed)."""
    if status in (401, 403):
        return AUTH
    if status == 404:
        return NOT_FOUND
    if status in (400, 409, 413, 422):
        return REJECTED
    return UNAVAILABLE


def handle_errors(fn: Callable) -> Callable:
    """Turn ConfigError / ApiError into a red message and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            err_console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(NOT_CONFIGURED) from None
        except ApiError as exc:
            err_console.print(f"[red]error ({exc.status or 'connection'}):[/red] {exc.message}")
            if exc.errors:
                table = Table("field", "problem", "given", box=None)
                for e in exc.errors:
                    loc = e.get("loc", [])
                    path = ".".join(map(str, loc)) if isinstance(loc, list) else str(loc)
                    given = "" if e.get("input") is None else json.dumps(e["input"], default=str)
                    table.add_row(path or "(document)", str(e.get("msg", "")), given[:60])
                err_console.print(table)
            raise typer.Exit(exit_code_for(exc.status)) from None

    return wrapper


def print_json(data: Any) -> None:
    console.print_json(json.dumps(data, default=str))


def fmt_resources(r: Any) -> str:
    """``{cpu_m, memory, gpu}`` (millicores, bytes, devices) -> '2 cpu, 4.0Gi, 1 gpu'."""
    if not isinstance(r, dict):
        return "" if r is None else str(r)
    parts = []
    cpu = r.get("cpu_m", r.get("cpu"))
    if cpu is not None:
        cores = cpu / 1000 if "cpu_m" in r else cpu
        parts.append(f"{cores:g} cpu")
    mem = r.get("memory")
    if mem is not None:
        parts.append(fmt_bytes(mem) if isinstance(mem, int | float) else str(mem))
    if r.get("gpu"):
        parts.append(f"{r['gpu']} gpu")
    return ", ".join(parts)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "Ki", "Mi", "Gi", "Ti"):
        if abs(n) < 1024 or unit == "Ti":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def fmt_time(t: Any) -> str:
    """Epoch seconds or ISO text -> 'YYYY-mm-dd HH:MM:SS' (UTC)."""
    import datetime as dt

    if isinstance(t, int | float):
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if t is None else str(t)


STATE_STYLE = {
    "succeeded": "green",
    "running": "cyan",
    "scheduled": "cyan",
    "queued": "yellow",
    "submitted": "yellow",
    "preempted": "magenta",
    "failed": "red",
    "stopped": "dim",
    "ready": "green",
    "cordoned": "yellow",
    "draining": "yellow",
    "lost": "red",
}


def styled(state: Any) -> str:
    s = str(state or "")
    style = STATE_STYLE.get(s)
    return f"[{style}]{s}[/{style}]" if style else s


def reason_text(reason: Any) -> str:
    """A pending reason (dict with message/kind, or text) as one line."""
    if isinstance(reason, dict):
        return str(reason.get("message") or reason.get("kind") or "")
    return "" if reason is None else str(reason)
