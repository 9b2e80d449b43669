"""``pasture job submit|list|show|logs|stop|delete``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.table import Table

from scheduler.cli.client import ApiClient
from scheduler.cli.config import load
from scheduler.cli.output import (
    JOB_NOT_SUCCEEDED,
    OK,
    console,
    err_console,
    fmt_time,
    handle_errors,
    print_json,
    reason_text,
    styled,
)
from scheduler.diagnosis import diagnosis_text

app = typer.Typer(help="Submit, watch and stop jobs.", no_args_is_help=True)

TERMINAL = {"succeeded", "failed", "stopped"}
STARTED = {"running", *TERMINAL}


def _client() -> ApiClient:
    return ApiClient(load())


def _first(d: dict, *keys: str, default=None):
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return default


def wait_for(
    client: ApiClient, name: str, states: set[str], poll_s: float = 0.5, timeout_s: float = 0
) -> dict:
    """Poll the job with a spinner until its state is in ``states``; returns the job.

    Raises:
        typer.Exit(1): ``timeout_s`` (> 0) passed first.
    """
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    with console.status(f"job {name}: waiting", spinner="dots") as status:
        while True:
            job = client.job(name)
            state = job.get("state")
            if state in states:
                return job
            reason = reason_text(job.get("pending_reason"))
            status.update(f"job {name}: {state}" + (f" ({reason})" if reason else ""))
            if deadline and time.monotonic() > deadline:
                err_console.print(f"[red]timeout:[/red] job {name} still {state}")
                raise typer.Exit(JOB_NOT_SUCCEEDED)
            time.sleep(poll_s)


def _stream(client: ApiClient, name: str, role: str | None, index: int | None) -> None:
    out = sys.stdout.buffer
    for chunk in client.follow_logs(name, role, index):
        out.write(chunk)
        out.flush()


def _log_matches(f: dict, role: str | None, index: int | None) -> bool:
    """Whether log file ``f`` is the one the API serves for (role, index)."""
    if role is None:
        return index is None or f["index"] == index
    return f["role"] == role and f["index"] == (index or 0)


def _wait_for_log(client: ApiClient, name: str, role: str | None, index: int | None) -> bool:
    """Wait (spinner) until the task's log exists; False when the job ended without one."""
    with console.status(f"job {name}: waiting for the first log line", spinner="dots"):
        while True:
            if any(_log_matches(f, role, index) for f in client.log_files(name)):
                return True
            if client.job(name).get("state") in TERMINAL:
                return False
            time.sleep(0.5)


def _final(job: dict) -> int:
    state = job.get("state")
    console.print(f"job {job.get('name')}: {styled(state)}")
    if state != "succeeded":
        reason = reason_text(_first(job, "reason", "message", "pending_reason"))
        if reason:
            console.print(f"  reason: {reason}")
    return OK if state == "succeeded" else JOB_NOT_SUCCEEDED


@app.command()
@handle_errors
def submit(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="job spec (YAML/JSON)"),
    follow: bool = typer.Option(False, "--follow", "-f", help="stream the first task's log"),
    wait: bool = typer.Option(False, "--wait", "-w", help="exit 0 only if it succeeded"),
    timeout: float = typer.Option(0, help="with --wait: give up after seconds"),
    as_json: bool = typer.Option(False, "--json", help="print the stored job as JSON"),
) -> None:
    """Submit a job spec (pasture, OpenPAI v1/v2, MARO job/schedule or Volcano Job).

    Fields of a foreign format that have no effect here are printed as warnings."""
    client = _client()
    job = client.submit(file.read_bytes(), json_body=file.suffix.lower() == ".json")
    name = job.get("name")
    if as_json:
        print_json(job)
    else:
        for other in job.get("jobs") or [name]:
            console.print(f"submitted job [bold]{other}[/bold] to vc {job.get('vc')}")
    for warning in job.get("warnings") or []:
        err_console.print(f"[yellow]warning:[/yellow] {warning}")
    if follow and _wait_for_log(client, name, None, None):
        _stream(client, name, None, None)
    if wait or follow:
        raise typer.Exit(_final(wait_for(client, name, TERMINAL, timeout_s=timeout)))


@app.command("list")
@handle_errors
def list_jobs(
    vc: str | None = typer.Option(None, help="only this VC"),
    state: str | None = typer.Option(None, help="only this state"),
    limit: int = typer.Option(100, help="at most this many"),
    offset: int = typer.Option(0, help="skip this many (newest first)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List jobs (newest first) in a table."""
    page = _client().jobs(vc=vc, state=state, limit=limit, offset=offset)
    if as_json:
        print_json(page)
        return
    table = Table("name", "vc", "state", "attempt", "user", "submitted", "pending reason")
    for j in page["items"]:
        table.add_row(
            str(j.get("name")),
            str(j.get("vc")),
            styled(j.get("state")),
            str(j.get("attempt", "")),
            str(j.get("user", "")),
            fmt_time(_first(j, "submit_time", "submitted_at", "created")),
            reason_text(j.get("pending_reason")),
        )
    console.print(table)
    shown = len(page["items"])
    if page.get("total", shown) > shown:
        console.print(f"{shown} of {page['total']} jobs (--offset / --limit for more)")


@app.command()
@handle_errors
def show(name: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show a job: state, tasks, events and why it is pending."""
    client = _client()
    job = client.job(name)
    events = client.events(name)
    if as_json:
        print_json({"job": job, "events": events["events"]})
        return
    console.print(
        f"[bold]{job.get('name')}[/bold]  vc={job.get('vc')}"
        f"  state={styled(job.get('state'))}  attempt={job.get('attempt', '')}"
        f"  priority={job.get('priority', '')}"
    )
    if events.get("pending_reason"):
        console.print(f"pending: [yellow]{reason_text(events['pending_reason'])}[/yellow]")
    tasks = job.get("tasks") or []
    if tasks:
        table = Table(
            "role", "index", "state", "node", "exit code", "restarts", "diagnosis", title="tasks"
        )
        for t in tasks:
            table.add_row(
                str(t.get("role")),
                str(t.get("index")),
                styled(t.get("state")),
                str(t.get("node") or ""),
                "" if t.get("exit_code") is None else str(t.get("exit_code")),
                str(t.get("restarts") or ""),
                diagnosis_text(t),
            )
        console.print(table)
    table = Table("time", "state", "reason", title="events")
    for e in events["events"]:
        table.add_row(
            fmt_time(_first(e, "time", "ts", "timestamp")),
            styled(_first(e, "state", "to", "kind", default="")),
            str(_first(e, "reason", "message", default="")),
        )
    console.print(table)


@app.command()
@handle_errors
def logs(
    name: str,
    follow: bool = typer.Option(False, "--follow", "-f", help="stream until the job ends"),
    role: str | None = typer.Option(None, "--role", "-r", help="task role (default: first)"),
    index: int | None = typer.Option(None, "--index", "-i", help="task index (default: 0)"),
) -> None:
    """Print a task's stdout/stderr (<share>/jobs/<job>/logs/<role>-<index>.log)."""
    client = _client()
    if follow:
        if _wait_for_log(client, name, role, index):
            _stream(client, name, role, index)
        return
    sys.stdout.write(client.logs(name, role, index))
    sys.stdout.flush()


@app.command()
@handle_errors
def stop(
    name: str,
    wait: bool = typer.Option(False, "--wait", "-w", help="wait until it has stopped"),
) -> None:
    """Stop a job (its tasks get SIGTERM, then SIGKILL after the grace period)."""
    client = _client()
    job = client.stop(name)
    console.print(f"job {name}: stop requested (state {styled(job.get('state'))})")
    if wait:
        job = wait_for(client, name, TERMINAL)
        console.print(f"job {name}: {styled(job.get('state'))}")


@app.command()
@handle_errors
def delete(
    name: str,
    force: bool = typer.Option(
        False, "--force", "-f", help="stop the job first when it has not finished"
    ),
    timeout: float = typer.Option(120.0, help="seconds to wait for a forced stop"),
) -> None:
    """Delete a finished job's records (its logs on the share stay). A job that has not
    finished is refused unless --force, which stops it, waits, then deletes it."""
    client = _client()
    out = client.delete(name, force=force)
    if not out.get("deleted"):
        console.print(f"job {name}: stopping before delete (state {styled(out.get('state'))})")
        wait_for(client, name, TERMINAL, timeout_s=timeout)
        out = client.delete(name)
    console.print(f"job {name}: deleted")
