"""Bulk control of jobs: ``pasture job stop`` and ``pasture job delete`` by name or by a
selection (filters), with confirmation; the other job commands are in jobsubmit, jobreads
and jobspec."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.complete import complete_states, complete_users, complete_vcs
from scheduler.cli.jobcommon import JobsArg, api_client, job_state
from scheduler.cli.jobgroup import app, job_hint
from scheduler.cli.jobsubmit import wait_for
from scheduler.cli.output import (
    JOB_NOT_SUCCEEDED,
    cli_hints,
    console,
    err_console,
    exit_code_for,
    handle_errors,
    markup_state,
)
from scheduler.cli.text import esc
from scheduler.cli.views import (
    TERMINAL,
)

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut


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


UserSel = typer.Option(
    None,
    "--user",
    "-u",
    help="every job of this user (with a confirmation)",
    autocompletion=complete_users,
)
StateSel = typer.Option(
    None,
    "--state",
    help="every job in this state (with a confirmation)",
    callback=lambda v: job_state(v),
    autocompletion=complete_states,
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
    client = api_client()
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
    client = api_client()
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
