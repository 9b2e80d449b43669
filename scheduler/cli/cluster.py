"""``pasture node list|show|cordon|uncordon|drain|delete``, ``pasture vc list``,
``pasture status``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from scheduler.cli.client import ApiClient
from scheduler.cli.config import load
from scheduler.cli.output import (
    JsonOpt,
    OutputFormat,
    OutputOpt,
    console,
    emit,
    fmt_age,
    fmt_resources,
    fmt_time,
    handle_errors,
    output_format,
    plain,
    print_json,
    styled,
)
from scheduler.cli.views import node_allocation
from scheduler.states import JobState

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut, NodeOut

node_app = typer.Typer(
    help="List and show nodes; cordon, uncordon, drain and delete them.", no_args_is_help=True
)
vc_app = typer.Typer(help="Virtual clusters.", no_args_is_help=True)


def _capacity(n: NodeOut) -> dict[str, int]:
    """``{cpu_m, memory, gpu}`` of a node (millicores, bytes, devices)."""
    return {"cpu_m": n.cpu_m, "memory": n.memory, "gpu": n.gpu}


def _labels(n: NodeOut) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(n.labels.items()))


@node_app.command("list")
@handle_errors
def node_list(output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """Nodes with state, address, capacity, GPU model, labels and heartbeat age.

    -o wide adds the executor and the heartbeat's time; -o json|yaml print the API's
    list; -o name one node name per line.
    """
    nodes = ApiClient(load()).nodes()
    fmt = output_format(output, as_json)
    if emit(nodes, fmt, (n.name for n in nodes)):
        return
    wide = fmt is OutputFormat.wide
    now = time.time()
    columns = ["name", "state", "address", "capacity", "gpu model", "labels", "heartbeat age"]
    columns += ["reason"]  # why cordoned (by whom / GPU health)
    if wide:
        columns += ["heartbeat", "executor"]
    table = Table(*columns)
    table.columns[0].no_wrap = True
    for n in nodes:
        row = [
            n.name,
            styled(n.state),
            n.address,
            fmt_resources(_capacity(n)),
            n.gpu_model or "",
            _labels(n),
            fmt_age(n.heartbeat, now),
            n.state_reason,
        ]
        if wide:
            row += [fmt_time(n.heartbeat), n.executor]
        table.add_row(*row)
    console.print(table)


def _active_jobs(client: ApiClient) -> list[JobOut]:
    """Scheduled and running jobs with their tasks (one request per job)."""
    jobs = []
    for state in (JobState.SCHEDULED, JobState.RUNNING):
        offset = 0
        while True:
            page = client.jobs(state=state, limit=1000, offset=offset)
            jobs += [client.job(j.name) for j in page.items]
            offset += len(page.items)
            if not page.items or offset >= page.total:
                break
    return jobs


@node_app.command("show")
@handle_errors
def node_show(name: str, output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """One node: capacity, allocated, free, its tasks, labels and heartbeat age.

    Allocated and tasks come from the scheduled and running jobs' tasks on the node.
    -o json|yaml print GET /nodes/NAME with ``allocated``, ``free`` and ``tasks`` added.
    """
    client = ApiClient(load())
    node = client.node(name)
    used, tasks = node_allocation(name, _active_jobs(client))
    capacity = _capacity(node)
    free = {k: capacity[k] - used[k] for k in used}
    fmt = output_format(output, as_json)
    if emit({**plain(node), "allocated": used, "free": free, "tasks": tasks}, fmt, [name]):
        return
    now = time.time()
    table = Table(show_header=False, box=None, title=f"node {name}", title_justify="left")
    table.add_column(no_wrap=True)
    table.add_column()
    table.add_row("state", styled(node.state))
    table.add_row("address", node.address)
    table.add_row("capacity", fmt_resources(capacity))
    table.add_row("allocated", fmt_resources(used))
    table.add_row("free", fmt_resources(free))
    table.add_row("gpu model", node.gpu_model or "-")
    table.add_row("labels", _labels(node) or "-")
    table.add_row(
        "heartbeat",
        f"{fmt_age(node.heartbeat, now) or '-'} ago ({fmt_time(node.heartbeat)})",
    )
    if node.executor:
        table.add_row("executor", node.executor)
    if node.state_reason:
        table.add_row("reason", node.state_reason)
    console.print(table)
    _gpu_health_table(node)
    tasks_table = Table("job", "role", "index", "state", "resources", title="tasks")
    tasks_table.columns[0].no_wrap = True
    for t in tasks:
        tasks_table.add_row(
            str(t["job"]), str(t["role"]), str(t["index"]), styled(t["state"]), fmt_resources(t)
        )
    console.print(tasks_table if tasks else "tasks: none")
    events = Table("time", "state", "reason", title="events")
    for e in node.events or []:
        events.add_row(fmt_time(e.time), styled(e.state), e.reason)
    console.print(events)


def _gpu_health_table(node: NodeOut) -> None:
    """The agent's per-GPU health (NVML probe), when it reports any (``usage`` is the
    agent's free-form report: its keys are the agent's, not the API's)."""
    gpus = [g for g in node.usage.get("gpu_health") or [] if isinstance(g, dict)]
    if not gpus:
        return
    table = Table("gpu", "healthy", "temp C", "power W", "problems / warnings", title="GPUs")
    for g in gpus:
        table.add_row(
            str(g.get("index")),
            "yes" if g.get("healthy", True) else "[red]no[/red]",
            "" if g.get("temperature_c") is None else f"{g['temperature_c']:g}",
            "" if g.get("power_w") is None else f"{g['power_w']:.0f}",
            "; ".join((g.get("problems") or []) + (g.get("warnings") or [])),
        )
    console.print(table)


def _action(action: str, name: str) -> None:
    node = ApiClient(load()).node_action(name, action)
    console.print(f"node {name}: {styled(node.state)}")


@node_app.command()
@handle_errors
def cordon(name: str) -> None:
    """Take no new tasks on NAME (running tasks stay)."""
    _action("cordon", name)


@node_app.command()
@handle_errors
def uncordon(name: str) -> None:
    """Make NAME schedulable again."""
    _action("uncordon", name)


@node_app.command()
@handle_errors
def drain(name: str) -> None:
    """Cordon NAME and move its running jobs elsewhere (they are requeued)."""
    _action("drain", name)


@node_app.command()
@handle_errors
def delete(
    name: str,
    force: bool = typer.Option(
        False, "--force", help="delete even if it heartbeated recently (the machine is gone)"
    ),
) -> None:
    """Delete NAME, a node gone for good: it is lost now, its tasks are requeued without
    charge and its record removed. Refused while it heartbeated within its fence bound."""
    ApiClient(load()).delete_node(name, force=force)
    console.print(f"node {name}: deleted (its tasks are requeued)")


@vc_app.command("list")
@handle_errors
def vc_list(output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """VCs with guarantee, max, used and borrowed resources.

    -o wide adds whether it may borrow; -o json|yaml the API's list; -o name the names.
    """
    vcs = ApiClient(load()).vcs()
    fmt = output_format(output, as_json)
    if emit(vcs, fmt, (v.name for v in vcs)):
        return
    columns = ["name", "guarantee", "max", "used", "borrowed", "running", "queued"]
    if fmt is OutputFormat.wide:
        columns.append("can borrow")
    table = Table(*columns)
    table.columns[0].no_wrap = True
    for v in vcs:
        row = [
            v.name,
            fmt_resources(v.guarantee),
            fmt_resources(v.max) or "-",
            fmt_resources(v.used),
            fmt_resources(v.borrowed),
            str(v.jobs_running),
            str(v.jobs_queued),
        ]
        if fmt is OutputFormat.wide:
            row.append("yes" if v.can_borrow else "no")
        table.add_row(*row)
    console.print(table)


# Status keys that are not for people: the store's change counter is not a version (the
# package version is `pasture --version`); it stays in --json.
_STATUS_HIDDEN = {"cluster", "version"}


@handle_errors
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Cluster summary: nodes and jobs by state, capacity and allocation."""
    s = ApiClient(load()).status()
    if as_json:
        print_json(s)
        return
    table = Table("", "", title=f"cluster {s.cluster}", show_header=False)
    for key, value in plain(s).items():
        if key in _STATUS_HIDDEN:
            continue
        if isinstance(value, dict) and {"cpu_m", "memory"} & set(value):
            text = fmt_resources(value)
        elif isinstance(value, dict):
            text = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        else:
            text = str(value)
        table.add_row(key, text)
    console.print(table)
