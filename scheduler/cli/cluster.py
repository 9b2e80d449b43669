"""``pasture node list|show|cordon|uncordon|drain``, ``pasture vc list``, ``pasture status``."""

from __future__ import annotations

import time

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
    print_json,
    styled,
)
from scheduler.cli.views import node_allocation

node_app = typer.Typer(
    help="List and show nodes; cordon, uncordon and drain them.", no_args_is_help=True
)
vc_app = typer.Typer(help="Virtual clusters.", no_args_is_help=True)


def _capacity(n: dict) -> dict:
    """``{cpu_m, memory, gpu}`` of a node record (millicores, bytes, devices)."""
    if isinstance(n.get("capacity"), dict):
        return n["capacity"]
    return {"cpu_m": n.get("cpu_m", 0), "memory": n.get("memory", 0), "gpu": n.get("gpu", 0)}


def _labels(n: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items()))


@node_app.command("list")
@handle_errors
def node_list(output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """Nodes with state, address, capacity, GPU model, labels and heartbeat age.

    -o wide adds the executor and the heartbeat's time; -o json|yaml print the API's
    list; -o name one node name per line.
    """
    nodes = ApiClient(load()).nodes()
    fmt = output_format(output, as_json)
    if emit(nodes, fmt, (str(n.get("name")) for n in nodes)):
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
            str(n.get("name")),
            styled(n.get("state")),
            str(n.get("address", "")),
            fmt_resources(_capacity(n)),
            str(n.get("gpu_model") or ""),
            _labels(n),
            fmt_age(n.get("heartbeat"), now),
            str(n.get("state_reason") or ""),
        ]
        if wide:
            row += [fmt_time(n.get("heartbeat")), str(n.get("executor") or "")]
        table.add_row(*row)
    console.print(table)


def _active_jobs(client: ApiClient) -> list[dict]:
    """Scheduled and running jobs with their tasks (one request per job)."""
    jobs = []
    for state in ("scheduled", "running"):
        offset = 0
        while True:
            page = client.jobs(state=state, limit=1000, offset=offset)
            jobs += [client.job(str(j["name"])) for j in page["items"]]
            offset += len(page["items"])
            if not page["items"] or offset >= page.get("total", 0):
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
    free = {k: int(capacity.get(k) or 0) - used[k] for k in used}
    fmt = output_format(output, as_json)
    if emit({**node, "allocated": used, "free": free, "tasks": tasks}, fmt, [name]):
        return
    now = time.time()
    table = Table(show_header=False, box=None, title=f"node {name}", title_justify="left")
    table.add_column(no_wrap=True)
    table.add_column()
    table.add_row("state", styled(node.get("state")))
    table.add_row("address", str(node.get("address", "")))
    table.add_row("capacity", fmt_resources(capacity))
    table.add_row("allocated", fmt_resources(used))
    table.add_row("free", fmt_resources(free))
    table.add_row("gpu model", str(node.get("gpu_model") or "-"))
    table.add_row("labels", _labels(node) or "-")
    table.add_row(
        "heartbeat",
        f"{fmt_age(node.get('heartbeat'), now) or '-'} ago ({fmt_time(node.get('heartbeat'))})",
    )
    if node.get("executor"):
        table.add_row("executor", str(node["executor"]))
    if node.get("state_reason"):
        table.add_row("reason", str(node["state_reason"]))
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
    for e in node.get("events") or []:
        events.add_row(fmt_time(e.get("time")), styled(e.get("state")), str(e.get("reason", "")))
    console.print(events)


def _gpu_health_table(node: dict) -> None:
    """The agent's per-GPU health (NVML probe), when it reports any."""
    gpus = [g for g in (node.get("usage") or {}).get("gpu_health") or [] if isinstance(g, dict)]
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
    console.print(f"node {name}: {styled(node.get('state'))}")


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


@vc_app.command("list")
@handle_errors
def vc_list(output: OutputFormat = OutputOpt, as_json: bool = JsonOpt) -> None:
    """VCs with guarantee, max, used and borrowed resources.

    -o wide adds whether it may borrow; -o json|yaml the API's list; -o name the names.
    """
    vcs = ApiClient(load()).vcs()
    fmt = output_format(output, as_json)
    if emit(vcs, fmt, (str(v.get("name")) for v in vcs)):
        return
    columns = ["name", "guarantee", "max", "used", "borrowed", "running", "queued"]
    if fmt is OutputFormat.wide:
        columns.append("can borrow")
    table = Table(*columns)
    table.columns[0].no_wrap = True
    for v in vcs:
        row = [
            str(v.get("name")),
            fmt_resources(v.get("guarantee")),
            fmt_resources(v.get("max")) or "-",
            fmt_resources(v.get("used")),
            fmt_resources(v.get("borrowed")),
            str(v.get("jobs_running", "")),
            str(v.get("jobs_queued", "")),
        ]
        if fmt is OutputFormat.wide:
            row.append("yes" if v.get("can_borrow") else "no")
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
    table = Table("", "", title=f"cluster {s.get('cluster', '')}", show_header=False)
    for key, value in s.items():
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
