"""``pasture job submit|list|show|logs|stop|delete``."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.complete import complete_jobs, complete_vcs
from scheduler.cli.config import load
from scheduler.cli.jobgroup import app, job_hint
from scheduler.cli.joblogs import JobLogs, LogOptions
from scheduler.cli.jobsecrets import SecretOpt, SecretsFileOpt
from scheduler.cli.output import (
    JOB_NOT_SUCCEEDED,
    NOT_FOUND,
    OK,
    IntervalOpt,
    JsonOpt,
    OutputFormat,
    OutputOpt,
    PlainFormat,
    WatchOpt,
    cli_hints,
    console,
    emit,
    emit_plain,
    err_console,
    exit_code_for,
    fmt_age,
    fmt_time,
    handle_errors,
    markup_state,
    output_format,
    styled,
    watch,
)
from scheduler.cli.text import Table, esc, plain_text
from scheduler.cli.views import (
    TERMINAL,
    UNSUCCESSFUL,
    WAITING,
    job_gpus,
    job_reason,
    job_run_time,
    queue_position,
    reason_text,
    task_nodes,
)
from scheduler.states import JobState

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut

NARROW = 100  # terminal columns below which the job table is laid out for narrow screens

JobArg = typer.Argument(..., help="job name", autocompletion=complete_jobs)
JobsArg = typer.Argument(None, help="job names", autocompletion=complete_jobs, show_default=False)


def job_state(value: str | None) -> str | None:
    """``--state``: a job state, checked before any request (the API's 422 showed no
    given value).

    Raises:
        typer.BadParameter: not a job state (names the expected ones and the given).
    """
    if value is None or value in {s.value for s in JobState}:
        return value
    expected = ", ".join(s.value for s in JobState)
    raise typer.BadParameter(f"expected one of {expected}; got {value!r}", param_hint="--state")


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


def _client() -> ApiClient:
    return ApiClient(load())


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


def waiting_jobs(client: ApiClient, vc: str) -> list[JobOut]:
    """The VC's waiting jobs (submitted, queued, preempted; at most 1000 of each state)."""
    out: list[JobOut] = []
    for state in sorted(WAITING):
        out += client.jobs(vc=vc, state=state, limit=1000).items
    return out


def _queue_text(job: JobOut, waiting: list[JobOut]) -> str:
    """'3/7' (position in its VC's queue / length) for a waiting job, else ''."""
    pos = queue_position(job, waiting)
    return "" if pos is None else f"{pos[0]}/{pos[1]}"


@app.command("list")
@handle_errors
def list_jobs(
    vc: str | None = typer.Option(None, help="only this VC", autocompletion=complete_vcs),
    state: str | None = typer.Option(
        None, help="only this state (queued, running, ...)", callback=lambda v: job_state(v)
    ),
    user: str | None = typer.Option(
        None, "--user", "-u", help="only jobs submitted by this token name (Slurm's -u)"
    ),
    mine: bool = typer.Option(False, "--mine", help="only my jobs (--user of my token)"),
    limit: int = typer.Option(100, help="at most this many"),
    offset: int = typer.Option(0, help="skip this many (newest first)"),
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
    watch_: bool = WatchOpt,
    interval: float = IntervalOpt,
) -> None:
    """List jobs (newest first): state, GPUs, age, run time, pending or failure reason.

    -o wide adds user, priority, the queue position of a waiting job in its VC (by
    priority, then submit time), submit time, exit code and the nodes of its tasks (one
    more request per job); -o json|yaml print the API's page ({items, total, limit,
    offset}); -o name one job name per line. --watch redraws until Ctrl-C.
    """
    client = _client()
    if mine:
        user = client.whoami().name
    fmt = output_format(output, as_json)

    def draw() -> None:
        page = client.jobs(vc=vc, state=state, user=user, limit=limit, offset=offset)
        if emit(page, fmt, (j.name for j in page.items)):
            return
        if not page.items:  # a sentence, not an empty table
            console.print("no jobs" + (f" (of {page.total}: --offset)" if page.total else ""))
            return
        _job_table(client, page.items, wide=fmt is OutputFormat.wide)
        shown = len(page.items)
        if page.total > shown:
            more = f"{shown} of {page.total} jobs (--offset / --limit for more)"
            console.print(more, markup=False)

    watch(draw, watch_, interval)


def _job_table(client: ApiClient, jobs: list[JobOut], wide: bool) -> None:
    """Print the jobs table (see :func:`list_jobs`)."""
    now = time.time()
    # Below 100 columns the table drops its vertical rules and the attempt column (job
    # show has it), so the reason, what people read the list for, keeps a third of the
    # width and wraps instead of shrinking to a stub.
    narrow = console.width < NARROW and not wide
    columns = ["name", "vc", "state", "attempt", "gpus", "age", "run time"]
    if narrow:
        columns.remove("attempt")
    if wide:
        columns[4:4] = ["user", "priority", "queue"]
        columns += ["submitted", "exit code", "nodes"]
    table = Table(*columns, box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
    table.columns[0].no_wrap = True
    table.add_column("reason", min_width=min(32, max(console.width // 3, 16)), ratio=1)
    waiting: dict[str, list[JobOut]] = {}
    for j in jobs:
        row = [
            j.name,
            j.vc,
            styled(j.state),
            *([] if narrow else [str(j.attempt)]),
            str(job_gpus(j)),
            fmt_age(j.created, now),
            job_run_time(j, now),
        ]
        if wide:
            if j.state in WAITING and j.vc not in waiting:
                waiting[j.vc] = waiting_jobs(client, j.vc)
            row[4:4] = [j.user, str(j.priority), _queue_text(j, waiting.get(j.vc, []))]
            placed = j.state not in WAITING
            tasks = client.job(j.name).tasks if placed else []
            exit_code = j.exit_code
            row += [
                fmt_time(j.created),
                "" if exit_code is None else str(exit_code),
                task_nodes(tasks),
            ]
        row.append(job_reason(j))
        table.add_row(*row)
    console.print(table)


@app.command()
@handle_errors
def show(name: str = JobArg, output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """Show a job: state, times, GPUs, tasks, events and why it is pending or failed; a
    waiting job's position in its VC's queue.

    -o json|yaml print {"job": GET /jobs/NAME, "events": its event list, "queue":
    {position, length, estimated_start} or null}.
    """
    client = _client()
    with job_hint(client, name):
        job = client.job(name)
    events = client.events(name)
    queue = None
    if job.state in WAITING:
        pos = queue_position(job, waiting_jobs(client, job.vc))
        if pos is not None:
            queue = {"position": pos[0], "length": pos[1], "estimated_start": None}
    fmt = output_format(output, as_json)
    if emit({"job": job, "events": events.events, "queue": queue}, fmt, [job.name]):
        return
    now = time.time()
    console.print(
        f"[bold]{esc(job.name)}[/bold]  vc={esc(job.vc)}"
        f"  state={markup_state(job.state)}  attempt={job.attempt}"
        f"  priority={job.priority}  user={esc(job.user)}"
    )
    console.print(
        f"gpus={job_gpus(job)}  age={fmt_age(job.created, now) or '-'}"
        f"  run time={job_run_time(job, now) or '-'}"
        f"  submitted={fmt_time(job.created) or '-'}"
        f"  ended={fmt_time(job.end_time) or '-'}"
    )
    if events.pending_reason:
        console.print(f"pending: [yellow]{esc(reason_text(events.pending_reason))}[/yellow]")
    if queue is not None:
        console.print(
            f"queue: {queue['position']} of {queue['length']} waiting in vc {esc(job.vc)}"
            " (by priority, then submit time)  estimated start: unknown (jobs declare no"
            " run time the scheduler could add up)",
            highlight=False,
        )
    elif job.state in UNSUCCESSFUL and job.reason:
        console.print(f"reason: [red]{esc(job.reason)}[/red]")
    tasks = job.tasks or []
    if tasks:
        from scheduler.rules.diagnosis import diagnosis_text  # not at import: keeps the CLI fast

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
    name: str = JobArg,
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
        err_console.print(f"job {esc(name)} ({esc(job.state)}) has no task logs{esc(which)}")
        raise typer.Exit(NOT_FOUND)


@app.command("exec", context_settings={"allow_interspersed_args": False})
@handle_errors
def exec_(
    name: str = JobArg,
    task: str = typer.Argument(..., help="ROLE-INDEX, e.g. worker-0"),
    command: list[str] = typer.Argument(..., help="the command and its arguments (after --)"),
    login: str | None = typer.Option(
        None, "--login", "-l", help="user to log in as (default: your local user name)"
    ),
) -> None:
    """Run a command in a running task (``pasture job exec JOB worker-0 -- nvidia-smi``),
    as kubectl exec does: through the task's own sshd, so only jobs submitted with
    ``ssh: true`` (or ``mpi``) and only their submitter or an admin. stdout and stderr
    stream back; the exit code is the command's (7 when the task cannot be reached)."""
    from scheduler.cli.jobexec import parse_task, run_remote

    if command[:1] == ["--"]:  # after the first argument every word is kept, -- too
        command = command[1:]
    if not command:
        raise typer.BadParameter("COMMAND: give the command after --")
    role, index = parse_task(task)
    client = _client()
    with job_hint(client, name):
        access = client.exec_access(name, role, index)
    raise typer.Exit(run_remote(access, command, login))


def select_jobs(
    client: ApiClient,
    names: list[str] | None,
    *,
    user: str | None,
    state: str | None,
    vc: str | None,
    every: bool,
    yes: bool,
    verb: str,
    can_take: Callable[[JobOut], bool] = lambda job: True,
    cannot: str = "",
) -> list[str]:
    """The jobs a ``stop``/``delete`` acts on: the NAMEs given, or every visible job
    matching ``--user/--state/--vc`` (``--all``: no filter needed), newest first.

    A selection by filter keeps only the jobs that can still take the action
    (``can_take``; the others are counted with ``cannot``, e.g. "already ended") and
    that the caller may act on: its own, or every job when it is an admin or the
    operator of the job's VC (``operates`` of ``GET /whoami``; the API enforces the
    same rule). It is listed and confirmed ("stop 3 jobs? [y/N]") unless ``--yes``; with
    no terminal to ask, ``--yes`` is required.

    Raises:
        typer.BadParameter: names and filters mixed, or neither given.
        typer.Exit(1): the confirmation was declined or could not be asked.
    """
    filtered = every or any(x is not None for x in (user, state, vc))
    if names and filtered:
        raise typer.BadParameter("give job names or --user/--state/--vc/--all, not both")
    if names:
        return list(dict.fromkeys(names))
    if not filtered:
        raise typer.BadParameter(
            f"name the jobs to {verb}, or select with --user/--state/--vc/--all"
        )
    matched: list[JobOut] = []
    offset = 0
    while True:
        page = client.jobs(vc=vc, state=state, user=user, limit=1000, offset=offset)
        matched += page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            break
    me = client.whoami()

    def mine(job: JobOut) -> bool:
        return me.role == "admin" or job.user == me.name or job.vc in me.operates

    takes = [j for j in matched if can_take(j)]
    chosen = [j.name for j in takes if mine(j)]
    skipped = []
    if len(takes) < len(matched):
        skipped.append(f"{len(matched) - len(takes)} {cannot}")
    if len(chosen) < len(takes):
        skipped.append(
            f"{len(takes) - len(chosen)} of other users (only an admin or the VC's operator"
            f" may {verb} them)"
        )
    if skipped:
        console.print(f"left out: {'; '.join(skipped)}", markup=False, highlight=False)
    if not chosen:
        console.print(f"no jobs match: nothing to {verb}")
        return []
    if not yes:
        shown = ", ".join(chosen[:20]) + (
            f" and {len(chosen) - 20} more" if len(chosen) > 20 else ""
        )
        console.print(f"{verb} {len(chosen)} job(s): {esc(shown)}", highlight=False)
        if not sys.stdin.isatty():
            err_console.print(f"[red]error:[/red] not a terminal: add --yes to {verb} them")
            raise typer.Exit(JOB_NOT_SUCCEEDED)
        if not typer.confirm(f"{verb} {len(chosen)} job(s)?", default=False):
            raise typer.Exit(JOB_NOT_SUCCEEDED)
    return chosen


def _each(names: list[str], act: Callable[[str], None]) -> None:
    """Run ``act`` on every name; an API error on one is printed and the others go on.

    Raises:
        typer.Exit: the exit code of the last failure (see :mod:`scheduler.cli.output`).
    """
    failed = 0
    for one in names:
        try:
            act(one)
        except ApiError as exc:
            status = exc.status or "connection"
            err_console.print(f"[red]error ({status}):[/red] {esc(exc.message)}")
            failed = exit_code_for(exc.status)
    if failed:
        raise typer.Exit(failed)


UserSel = typer.Option(None, "--user", "-u", help="every job of this user (with a confirmation)")
StateSel = typer.Option(
    None,
    "--state",
    help="every job in this state (with a confirmation)",
    callback=lambda v: job_state(v),
)
VcSel = typer.Option(
    None, "--vc", help="every job of this VC (with a confirmation)", autocompletion=complete_vcs
)
AllSel = typer.Option(False, "--all", help="every job I can see (with a confirmation)")
YesOpt = typer.Option(False, "--yes", "-y", help="do not ask before acting on a selection")


@app.command()
@handle_errors
def stop(
    names: list[str] | None = JobsArg,
    wait: bool = typer.Option(False, "--wait", "-w", help="wait until they have stopped"),
    user: str | None = UserSel,
    state: str | None = StateSel,
    vc: str | None = VcSel,
    every: bool = AllSel,
    yes: bool = YesOpt,
) -> None:
    """Stop jobs (their tasks get SIGTERM, then SIGKILL after the grace period): the NAMEs
    given (``pasture job stop A B C``), or every job matching --user/--state/--vc or --all,
    after a confirmation (--yes skips it). A failure on one job does not stop the others;
    the exit code is that of the last failure."""
    client = _client()
    chosen = select_jobs(
        client,
        names,
        user=user,
        state=state,
        vc=vc,
        every=every,
        yes=yes,
        verb="stop",
        can_take=lambda job: job.state not in TERMINAL,
        cannot="already ended",
    )

    def act(name: str) -> None:
        with job_hint(client, name):
            job = client.stop(name)
        console.print(f"job {esc(name)}: stop requested (state {markup_state(job.state)})")

    _each(chosen, act)
    if wait:
        for name in chosen:
            job = wait_for(client, name, TERMINAL)
            console.print(f"job {esc(name)}: {markup_state(job.state)}")


@app.command()
@handle_errors
def delete(
    names: list[str] | None = JobsArg,
    force: bool = typer.Option(
        False, "--force", "-f", help="stop a job first when it has not finished"
    ),
    timeout: float = typer.Option(120.0, help="seconds to wait for a forced stop"),
    user: str | None = UserSel,
    state: str | None = StateSel,
    vc: str | None = VcSel,
    every: bool = AllSel,
    yes: bool = YesOpt,
) -> None:
    """Delete finished jobs' records (their logs on the share stay): the NAMEs given, or
    every job matching --user/--state/--vc or --all, after a confirmation (--yes skips
    it). A job that has not finished is refused unless --force, which stops it, waits,
    then deletes it."""
    client = _client()
    chosen = select_jobs(
        client,
        names,
        user=user,
        state=state,
        vc=vc,
        every=every,
        yes=yes,
        verb="delete",
        can_take=lambda job: force or job.state in TERMINAL,
        cannot="not finished (--force stops them first)",
    )
    stopping: list[str] = []

    def act(name: str) -> None:
        with job_hint(client, name), cli_hints():
            out = client.delete(name, force=force)
        if out.deleted:
            console.print(f"job {esc(name)}: deleted")
        else:
            state = markup_state(out.state)
            console.print(f"job {esc(name)}: stopping before delete (state {state})")
            stopping.append(name)

    _each(chosen, act)

    def finish(name: str) -> None:
        wait_for(client, name, TERMINAL, timeout_s=timeout)
        client.delete(name)
        console.print(f"job {esc(name)}: deleted")

    _each(stopping, finish)
