"""``pasture job submit --dry-run FILE``: the API's ``POST /api/v1/jobs:dry-run``.

The server runs every check of a submit (the same parse and validation, VC, "can never
be placed") and the scheduler core's ``explain()`` on a read-only snapshot of the
cluster; nothing is stored. This module prints its answer (:class:`DryRunOut`): per job,
task -> node when it would be placed now, else the pending reason and how many nodes
each filter rejected per role.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.cli.client import ApiClient
from scheduler.cli.output import OK, console, err_console, print_json
from scheduler.cli.text import Table, esc

if TYPE_CHECKING:
    from scheduler.api.schemas import DryRunJobOut, DryRunOut


def dry_run_file(
    client: ApiClient,
    path: Path,
    name: str | None,
    vc: str | None,
    env: list[str] | None,
    sets: list[str] | None,
    as_json: bool = False,
) -> int:
    """Dry-run ``path`` (with the submit's overrides) and print the answer.

    Returns:
        The exit code: 0 (valid; placed now or not). A refused spec raises ApiError (422,
        409, 403), which ``handle_errors`` turns into its exit code.
    """
    from scheduler.cli.jobspec import spec_body

    body, is_json = spec_body(path, name, vc, env, sets)
    answer = client.dry_run(body, json_body=is_json)
    if as_json:
        print_json(answer)
    else:
        print_dry_run(answer)
    for warning in answer.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {esc(warning)}")
    return OK


def print_dry_run(answer: DryRunOut) -> None:
    """The people's view of a dry run (see the module docstring)."""
    for job in answer.jobs:
        _print_job(job)
    console.print("dry run: nothing was submitted")


def _print_job(job: DryRunJobOut) -> None:
    head = f"job [bold]{esc(job.name)}[/bold] (vc {esc(job.vc)}, priority {job.priority}) is valid"
    if job.placed:
        console.print(f"{head}; it would be placed now:")
        table = Table("task", "node")
        table.columns[0].no_wrap = True
        table.columns[1].no_wrap = True
        for p in job.placements:
            table.add_row(f"{p.role}-{p.index}", p.node)
        console.print(table)
        return
    reason = job.pending_reason
    why = f"{reason.message} ({reason.kind})" if reason else "no reason given"
    console.print(f"{head}; it would wait: [yellow]{esc(why)}[/yellow]")
    rejected = [
        f"{role}: " + ", ".join(f"{n} by {f}" for f, n in sorted(counts.items()))
        for role, counts in job.rejected.items()
        if counts
    ]
    if rejected:
        console.print(f"nodes rejected (of {job.nodes}): " + esc("; ".join(rejected)))
