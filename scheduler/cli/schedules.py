"""``pasture schedule submit|list|show|suspend|resume|delete``: scheduled jobs (a Volcano
CronJob or a pasture schedule, run by the loop on their cron schedule; docs/jobs.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from scheduler.cli.client import ApiClient
from scheduler.cli.config import load
from scheduler.cli.output import console, err_console, handle_errors

app = typer.Typer(help="Scheduled jobs: a job run on a cron schedule.", no_args_is_help=True)


def _client() -> ApiClient:
    return ApiClient(load())


def _print(item: dict[str, Any], as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(item))
        return
    state = "suspended" if item["suspend"] else "active"
    console.print(
        f"schedule {item['name']} ({item['schedule']}, {item['concurrency_policy']}, {state})"
        f" in vc {item['vc']}; runs: {', '.join(item['runs']) or 'none yet'}",
        markup=False,
        highlight=False,
    )


@app.command()
@handle_errors
def submit(
    file: Path = typer.Argument(
        ..., exists=True, dir_okay=False, help="Volcano CronJob or schedule"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the stored schedule as JSON"),
) -> None:
    """Submit a scheduled job: a Volcano CronJob file, or a pasture schedule
    ``{name, schedule, job, ...}`` (YAML or JSON). Its job passes a job submit's checks."""
    ctype = "application/json" if file.suffix.lower() == ".json" else "application/yaml"
    item = _client().request(
        "POST", "/api/v1/schedules", content=file.read_bytes(), headers={"content-type": ctype}
    )
    _print(item, as_json)
    for warning in item.get("warnings", []):
        err_console.print(f"warning: {warning}", markup=False, highlight=False)


@app.command("list")
@handle_errors
def list_(as_json: bool = typer.Option(False, "--json", help="JSON")) -> None:
    """The schedules of your VCs."""
    items = _client().request("GET", "/api/v1/schedules")["items"]
    if as_json:
        console.print_json(json.dumps(items))
        return
    if not items:  # a sentence, not an empty table
        console.print("no schedules")
        return
    table = Table("NAME", "SCHEDULE", "POLICY", "STATE", "VC", "RUNS")
    for i in items:
        table.add_row(
            i["name"],
            i["schedule"],
            i["concurrency_policy"],
            "suspended" if i["suspend"] else "active",
            i["vc"],
            str(len(i["runs"])),
        )
    console.print(table, markup=False)


@app.command()
@handle_errors
def show(name: str, as_json: bool = typer.Option(False, "--json", help="JSON")) -> None:
    """One schedule and its runs (job names)."""
    _print(_client().request("GET", f"/api/v1/schedules/{name}"), as_json)


@app.command()
@handle_errors
def suspend(name: str) -> None:
    """No new runs until resumed."""
    _print(_client().request("POST", f"/api/v1/schedules/{name}/suspend"), False)


@app.command()
@handle_errors
def resume(name: str) -> None:
    """Runs start again at the next scheduled time."""
    _print(_client().request("POST", f"/api/v1/schedules/{name}/resume"), False)


@app.command()
@handle_errors
def delete(name: str) -> None:
    """Delete a schedule (its runs stay jobs of their own)."""
    _client().request("DELETE", f"/api/v1/schedules/{name}")
    console.print(f"deleted schedule {name}", markup=False, highlight=False)
