"""``pasture job submit``: a spec (any format) to the API, and waiting for the job's end."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.jobcommon import api_client
from scheduler.cli.jobgroup import app
from scheduler.cli.joblogs import JobLogs, LogOptions
from scheduler.cli.jobsecrets import SecretOpt, SecretsFileOpt
from scheduler.cli.output import (
    JOB_NOT_SUCCEEDED,
    OK,
    PlainFormat,
    console,
    emit_plain,
    err_console,
    handle_errors,
    markup_state,
)
from scheduler.cli.text import esc, plain_text
from scheduler.cli.views import (
    TERMINAL,
    job_reason,
    reason_text,
)
from scheduler.states import JobState

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut


@contextlib.contextmanager
def name_taken_hint() -> Iterator[None]:
    """Re-raise a 409 about a job name in use with what to do about it."""
    try:
        yield
    except ApiError as exc:
        taken = "exists already" in exc.message or "already exists" in exc.message
        if exc.status == 409 and taken:
            hint = (
                f"{exc.message}: give another name (--name NEW), or replace it once it"
                " has finished (pasture job delete NAME, or pasture job resubmit NAME"
                " --replace)"
            )
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
    # a spinner parses str as markup with no console of ours: plain Text
    with console.status(plain_text(f"job {name}: waiting"), spinner="dots") as status:
        while True:
            job = client.job(name)
            state = job.state
            if state in states:
                return job
            reason = reason_text(job.pending_reason)
            why = f" ({reason})" if reason else ""
            status.update(plain_text(f"job {name}: {state}{why}"))
            if deadline and time.monotonic() > deadline:
                break
            time.sleep(poll_s)
    # after the spinner has been cleared, so the message gets a line of its own
    err_console.print(f"[red]timeout:[/red] job {esc(name)} still {esc(state)}")
    raise typer.Exit(JOB_NOT_SUCCEEDED)


def _final(job: JobOut) -> int:
    state = job.state
    console.print(f"job {esc(job.name)}: {markup_state(state)}")
    if state != JobState.SUCCEEDED:
        reason = job_reason(job) or job.reason
        if reason:
            console.print(f"  reason: {esc(reason)}")
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
    as_json: bool = typer.Option(False, "--json", help="same as -o json"),
    output: PlainFormat = typer.Option(
        PlainFormat.table,
        "--output",
        "-o",
        help="table (a line per job) | json | yaml: the stored job as the API answered"
        " (yaml: one spec, without --dry-run/--sweep)",
    ),
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

    fmt = PlainFormat.json if as_json else output
    as_json = fmt is PlainFormat.json
    if fmt is PlainFormat.yaml and (sweep or more or dry_run):
        raise typer.BadParameter("-o yaml takes one spec without --dry-run or --sweep; use -o json")
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
                client=api_client,
            )
        )
    client = api_client()
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
    with name_taken_hint():
        job = submit_with_overrides(client, file, new_name, vc, env, sets, given)
        job = job or client.submit(file.read_bytes(), json_body=file.suffix.lower() == ".json")
    name = job.name
    if not emit_plain(job, fmt):
        for other in job.jobs or [name]:
            console.print(f"submitted job [bold]{esc(other)}[/bold] to vc {esc(job.vc)}")
    for warning in job.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {esc(warning)}")
    if follow:
        JobLogs(client, name, LogOptions()).follow()
    if wait or follow:
        raise typer.Exit(_final(wait_for(client, name, TERMINAL, timeout_s=timeout)))
