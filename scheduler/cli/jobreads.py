"""The reading commands of ``pasture job``: list, show, logs and exec."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer
from rich import box

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.complete import complete_states, complete_users, complete_vcs
from scheduler.cli.jobcommon import JobArg, JobVcOpt, api_client, job_ref, job_state
from scheduler.cli.jobgroup import app, job_hint
from scheduler.cli.joblogs import JobLogs, LogOptions
from scheduler.cli.output import (
    NOT_FOUND,
    IntervalOpt,
    JsonOpt,
    OutputFormat,
    OutputOpt,
    WatchOpt,
    console,
    emit,
    err_console,
    fmt_age,
    fmt_time,
    handle_errors,
    markup_state,
    output_format,
    styled,
    watch,
)
from scheduler.cli.text import Table, esc
from scheduler.cli.views import (
    UNSUCCESSFUL,
    WAITING,
    job_gpus,
    job_reason,
    job_run_time,
    queue_position,
    reason_text,
    task_nodes,
)

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut


NARROW = 100  # terminal columns below which the job table is laid out for narrow screens


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
        None,
        help="only this state (queued, running, ...)",
        callback=lambda v: job_state(v),
        autocompletion=complete_states,
    ),
    user: str | None = typer.Option(
        None,
        "--user",
        "-u",
        help="only jobs submitted by this token name (Slurm's -u)",
        autocompletion=complete_users,
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
    client = api_client()
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
def show(
    name: str = JobArg,
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
    vc: str | None = JobVcOpt,
) -> None:
    """Show a job: state, times, GPUs, tasks, events and why it is pending or failed; a
    waiting job's position in its VC's queue.

    -o json|yaml print {"job": GET /jobs/NAME, "events": its event list, "queue":
    {position, length, estimated_start} or null}.
    """
    client = api_client()
    name = job_ref(name, vc)
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
    since: str | None = typer.Option(
        None,
        "--since",
        help="only lines written at or after: a duration ago (10m, 1h, 2d) or an RFC 3339"
        " time (2026-11-28T04:00:00Z)",
    ),
    timestamps: bool = typer.Option(
        False, "--timestamps", "-t", help="each line's time (RFC 3339 UTC) before it"
    ),
    vc: str | None = JobVcOpt,
) -> None:
    """Every task's stdout/stderr, each line prefixed with its task (role-index).

    Logs live in `<share>/jobs/<job>/logs/<uid>/<role>-<index>.log` (uid: this submission),
    every attempt of a task after its "=== attempt N on NODE ===" line. A job that has not
    started says why it waits. Times (--since, --timestamps) are when the node's agent saw
    each line on the share (within half a second); a line whose time was not recorded
    shows "(time unknown)".
    """
    if since is not None:
        import time

        from scheduler.timespec import parse_when

        try:
            parse_when(since, time.time(), "--since")
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--since") from None
    client = api_client()
    name = job_ref(name, vc)
    options = LogOptions(
        role=role,
        index=index,
        attempt=attempt,
        tail=tail,
        prefix=prefix,
        since=since,
        timestamps=timestamps,
    )
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
        None,
        "--login",
        "-l",
        help="user to log in as (default: the user the task runs as, as the API says)",
    ),
) -> None:
    """Run a command in a running task (``pasture job exec JOB worker-0 -- nvidia-smi``),
    as kubectl exec does: through the task's own sshd, so only jobs submitted with
    ``ssh: true`` (or ``mpi``) and only their submitter or an admin. stdout and stderr
    stream back; the exit code is the command's (7 when the task cannot be reached)."""
    from scheduler.cli.config import load
    from scheduler.cli.jobexec import fetch_access, parse_task, run_openssh, run_remote

    if command[:1] == ["--"]:  # after the first argument every word is kept, -- too
        command = command[1:]
    if not command:
        raise typer.BadParameter("COMMAND: give the command after --")
    role, index = parse_task(task)
    try:  # one round trip, standard library only (jobexec.py: time to first output)
        access = fetch_access(load(), name, role, index)
    except ApiError as exc:
        if exc.status != 404:
            raise
        with job_hint(api_client(), name):  # "did you mean" for a mistyped job
            raise
    code = run_openssh(access, command, login)  # None: no ssh client or login unknown
    raise typer.Exit(run_remote(access, command, login) if code is None else code)
