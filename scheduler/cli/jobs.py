"""``pasture job submit|list|show|logs|stop|delete``."""

from __future__ import annotations

import contextlib
import difflib
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.config import load
from scheduler.cli.joblogs import JobLogs, LogOptions
from scheduler.cli.jobsecrets import SecretOpt, SecretsFileOpt
from scheduler.cli.output import (
    JOB_NOT_SUCCEEDED,
    NOT_FOUND,
    OK,
    JsonOpt,
    OutputFormat,
    OutputOpt,
    console,
    emit,
    err_console,
    fmt_age,
    fmt_time,
    handle_errors,
    output_format,
    print_json,
    styled,
)
from scheduler.cli.views import (
    TERMINAL,
    UNSUCCESSFUL,
    WAITING,
    job_gpus,
    job_reason,
    job_run_time,
    reason_text,
    task_nodes,
)
from scheduler.states import JobState

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut

app = typer.Typer(help="Submit, watch and stop jobs.", no_args_is_help=True)


def _client() -> ApiClient:
    return ApiClient(load())


def similar_jobs(client: ApiClient, name: str, limit: int = 1000) -> list[str]:
    """Up to 3 visible job names close to ``name`` (difflib ratio >= 0.6), best first."""
    try:
        page = client.jobs(limit=limit)
    except ApiError:
        return []
    names = [j.name for j in page.items]
    return difflib.get_close_matches(name, names, n=3, cutoff=0.6)


@contextlib.contextmanager
def job_hint(client: ApiClient, name: str) -> Iterator[None]:
    """Re-raise a 404 about job ``name`` with "did you mean: ..." when the job does not
    exist and similar names do (a 404 about something else, e.g. a log, passes as is)."""
    try:
        yield
    except ApiError as exc:
        if exc.status != 404:
            raise
        try:
            client.job(name)
        except ApiError as again:
            if again.status != 404:
                raise exc from None
            close = similar_jobs(client, name)
            if close:
                hint = f"{exc.message}; did you mean: {', '.join(close)}?"
                raise ApiError(exc.status, hint, exc.errors) from None
        raise


def wait_for(
    client: ApiClient,
    name: str,
    states: Collection[str],
    poll_s: float = 0.5,
    timeout_s: float = 0,
) -> JobOut:
    """Poll the job with a spinner until its state is in ``states``; returns the job.

    Raises:
        typer.Exit(1): ``timeout_s`` (> 0) passed first.
    """
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    with console.status(f"job {name}: waiting", spinner="dots") as status:
        while True:
            job = client.job(name)
            state = job.state
            if state in states:
                return job
            reason = reason_text(job.pending_reason)
            status.update(f"job {name}: {state}" + (f" ({reason})" if reason else ""))
            if deadline and time.monotonic() > deadline:
                break
            time.sleep(poll_s)
    # after the spinner has been cleared, so the message gets a line of its own
    err_console.print(f"[red]timeout:[/red] job {name} still {state}")
    raise typer.Exit(JOB_NOT_SUCCEEDED)


def _final(job: JobOut) -> int:
    state = job.state
    console.print(f"job {job.name}: {styled(state)}")
    if state != JobState.SUCCEEDED:
        reason = job_reason(job) or job.reason
        if reason:
            console.print(f"  reason: {reason}")
    return OK if state == JobState.SUCCEEDED else JOB_NOT_SUCCEEDED


@app.command()
@handle_errors
def submit(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="job spec (YAML/JSON)"),
    more: list[Path] | None = typer.Argument(
        None, exists=True, dir_okay=False, help="more job specs: all sent in one batch request"
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="stream every task's log (role-index | line)"
    ),
    wait: bool = typer.Option(False, "--wait", "-w", help="exit 0 only if it succeeded"),
    timeout: float = typer.Option(0, help="with --wait: give up after seconds"),
    as_json: bool = typer.Option(False, "--json", help="print the stored job as JSON"),
    new_name: str | None = typer.Option(None, "--name", help="job name instead of the spec's"),
    vc: str | None = typer.Option(None, "--vc", help="virtual cluster instead of the spec's"),
    env: list[str] | None = typer.Option(
        None, "--env", "-e", help="KEY=VALUE for every task (repeatable)"
    ),
    sets: list[str] | None = typer.Option(
        None, "--set", help="PATH=VALUE in the spec, e.g. roles.worker.replicas=4 (repeatable)"
    ),
    secret: list[str] | None = SecretOpt,
    secrets_file: Path | None = SecretsFileOpt,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="check it on the cluster as a submit would and show where it would be placed"
        " now (or why not); nothing is submitted",
    ),
    sweep: bool = typer.Option(
        False, "--sweep", help="FILE is a sweep file: one spec and a grid of --set values"
    ),
) -> None:
    """Submit a job spec (pasture, OpenPAI v1/v2, MARO job/schedule or Volcano Job).

    Fields of a foreign format that have no effect here are printed as warnings.
    --secret/--secrets-file give values of the secrets the job declares. Several files go
    in one request (``POST /api/v1/jobs:batch``, at most 500); each is reported on its
    own, and the exit code is 1 when any was refused."""
    from scheduler.cli.jobsecrets import read_secrets
    from scheduler.cli.jobspec import submit_with_overrides

    if sweep:
        from scheduler.cli.sweep import submit_sweep

        given, one_job = read_secrets(secret, secrets_file), (follow, wait, new_name)
        raise typer.Exit(
            submit_sweep(
                file,
                more=more,
                one_job=one_job,
                vc=vc,
                env=env,
                sets=sets,
                secrets=given,
                dry_run=dry_run,
                as_json=as_json,
                client=_client,
            )
        )
    client = _client()
    if more:
        from scheduler.cli.batch import submit_files

        one_file = (follow, wait, dry_run, new_name, vc, env, sets, secret, secrets_file)
        if any(one_file):
            raise typer.BadParameter(
                "--follow, --wait, --dry-run, --name, --vc, --env, --set, --secret and"
                f" --secrets-file take one file, got {1 + len(more)}"
            )
        raise typer.Exit(submit_files(client, [file, *more], as_json))
    given = read_secrets(secret, secrets_file)
    if dry_run:
        from scheduler.cli.dryrun import dry_run_file

        raise typer.Exit(dry_run_file(client, file, new_name, vc, env, sets, as_json))
    job = submit_with_overrides(client, file, new_name, vc, env, sets, given) or client.submit(
        file.read_bytes(), json_body=file.suffix.lower() == ".json"
    )
    name = job.name
    if as_json:
        print_json(job)
    else:
        for other in job.jobs or [name]:
            console.print(f"submitted job [bold]{other}[/bold] to vc {job.vc}")
    for warning in job.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}")
    if follow:
        JobLogs(client, name, LogOptions()).follow()
    if wait or follow:
        raise typer.Exit(_final(wait_for(client, name, TERMINAL, timeout_s=timeout)))


@app.command("list")
@handle_errors
def list_jobs(
    vc: str | None = typer.Option(None, help="only this VC"),
    state: str | None = typer.Option(None, help="only this state"),
    limit: int = typer.Option(100, help="at most this many"),
    offset: int = typer.Option(0, help="skip this many (newest first)"),
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List jobs (newest first): state, GPUs, age, run time, pending or failure reason.

    -o wide adds user, priority, submit time, exit code and the nodes of its tasks (one
    more request per job); -o json|yaml print the API's page ({items, total, limit,
    offset}); -o name one job name per line.
    """
    client = _client()
    page = client.jobs(vc=vc, state=state, limit=limit, offset=offset)
    fmt = output_format(output, as_json)
    if emit(page, fmt, (j.name for j in page.items)):
        return
    wide = fmt is OutputFormat.wide
    now = time.time()
    columns = ["name", "vc", "state", "attempt", "gpus", "age", "run time", "reason"]
    if wide:
        columns[4:4] = ["user", "priority"]
        columns += ["submitted", "exit code", "nodes"]
    table = Table(*columns)
    table.columns[0].no_wrap = True
    for j in page.items:
        row = [
            j.name,
            j.vc,
            styled(j.state),
            str(j.attempt),
            str(job_gpus(j)),
            fmt_age(j.created, now),
            job_run_time(j, now),
            job_reason(j),
        ]
        if wide:
            row[4:4] = [j.user, str(j.priority)]
            placed = j.state not in WAITING
            tasks = client.job(j.name).tasks if placed else []
            exit_code = j.exit_code
            row += [
                fmt_time(j.created),
                "" if exit_code is None else str(exit_code),
                task_nodes(tasks),
            ]
        table.add_row(*row)
    console.print(table)
    shown = len(page.items)
    if page.total > shown:
        console.print(f"{shown} of {page.total} jobs (--offset / --limit for more)")


@app.command()
@handle_errors
def show(name: str, output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """Show a job: state, times, GPUs, tasks, events and why it is pending or failed.

    -o json|yaml print {"job": GET /jobs/NAME, "events": its event list}.
    """
    client = _client()
    with job_hint(client, name):
        job = client.job(name)
    events = client.events(name)
    fmt = output_format(output, as_json)
    if emit({"job": job, "events": events.events}, fmt, [job.name]):
        return
    now = time.time()
    console.print(
        f"[bold]{job.name}[/bold]  vc={job.vc}"
        f"  state={styled(job.state)}  attempt={job.attempt}"
        f"  priority={job.priority}  user={job.user}"
    )
    console.print(
        f"gpus={job_gpus(job)}  age={fmt_age(job.created, now) or '-'}"
        f"  run time={job_run_time(job, now) or '-'}"
        f"  submitted={fmt_time(job.created) or '-'}"
        f"  ended={fmt_time(job.end_time) or '-'}"
    )
    if events.pending_reason:
        console.print(f"pending: [yellow]{reason_text(events.pending_reason)}[/yellow]")
    elif job.state in UNSUCCESSFUL and job.reason:
        console.print(f"reason: [red]{job.reason}[/red]")
    tasks = job.tasks or []
    if tasks:
        from scheduler.diagnosis import diagnosis_text  # not at import: keeps the CLI fast

        table = Table(
            "role",
            "index",
            "state",
            "node",
            "exit code",
            "restarts",
            "message",
            "diagnosis",
            title="tasks",
        )
        for t in tasks:
            table.add_row(
                t.role,
                str(t.index),
                styled(t.state),
                t.node,
                "" if t.exit_code is None else str(t.exit_code),
                str(t.restarts or ""),
                t.message,
                diagnosis_text(t),
            )
        console.print(table)
    attempts = job.attempts
    if attempts:  # which attempts the infrastructure ended (not charged to the job)
        table = Table(
            "attempt", "ended in", "cause", "charged", "nodes", "reason", title="attempts"
        )
        for at in attempts:
            table.add_row(
                str(at.attempt),
                styled(at.state),
                at.cause or "task",
                "yes" if at.charged else "no",
                ", ".join(at.nodes),
                at.reason,
            )
        console.print(table)
    table = Table("time", "state", "attempt", "reason", title="events")
    for e in events.events:
        table.add_row(
            fmt_time(e.time),
            styled(e.state),
            "" if e.attempt is None else str(e.attempt),
            e.reason,
        )
    console.print(table)


@app.command()
@handle_errors
def logs(
    name: str,
    follow: bool = typer.Option(
        False, "--follow", "-f", help="stream new lines, across attempts, until the job ends"
    ),
    role: str | None = typer.Option(None, "--role", "-r", help="only this task role"),
    index: int | None = typer.Option(None, "--index", "-i", help="only this task index"),
    tail: int | None = typer.Option(None, "--tail", min=0, help="last N lines of each task"),
    attempt: int | None = typer.Option(None, "--attempt", min=1, help="only this attempt"),
    prefix: bool | None = typer.Option(
        None,
        "--prefix/--no-prefix",
        help="'role-index | ' before each line (default: unless --role and --index name one task)",
    ),
) -> None:
    """Every task's stdout/stderr, each line prefixed with its task (role-index).

    Logs live in <share>/jobs/<job>/logs/<uid>/<role>-<index>.log (uid: this submission),
    every attempt of a task after its "=== attempt N on NODE ===" line. A job that has not
    started says why it waits.
    """
    client = _client()
    options = LogOptions(role=role, index=index, attempt=attempt, tail=tail, prefix=prefix)
    reader = JobLogs(client, name, options)
    with job_hint(client, name):
        if follow:
            reader.follow()
            return
        if reader.show():
            return
        job = client.job(name)
    if reader.waiting_reason(job) is None:
        which = f" matching --role {role}" if role else ""
        which += f" --index {index}" if index is not None else ""
        err_console.print(f"job {name} ({job.state}) has no task logs{which}")
        raise typer.Exit(NOT_FOUND)


@app.command()
@handle_errors
def stop(
    name: str,
    wait: bool = typer.Option(False, "--wait", "-w", help="wait until it has stopped"),
) -> None:
    """Stop a job (its tasks get SIGTERM, then SIGKILL after the grace period)."""
    client = _client()
    with job_hint(client, name):
        job = client.stop(name)
    console.print(f"job {name}: stop requested (state {styled(job.state)})")
    if wait:
        job = wait_for(client, name, TERMINAL)
        console.print(f"job {name}: {styled(job.state)}")


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
    with job_hint(client, name):
        out = client.delete(name, force=force)
    if not out.deleted:
        console.print(f"job {name}: stopping before delete (state {styled(out.state)})")
        wait_for(client, name, TERMINAL, timeout_s=timeout)
        out = client.delete(name)
    console.print(f"job {name}: deleted")
