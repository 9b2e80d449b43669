"""``pasture node list|show|cordon|uncordon|drain|delete``, ``pasture vc list``,
``pasture status``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import typer

from scheduler.cli.client import ApiClient
from scheduler.cli.complete import complete_nodes
from scheduler.cli.config import load
from scheduler.cli.output import (
    IntervalOpt,
    JsonOpt,
    OutputFormat,
    OutputOpt,
    PlainFormat,
    PlainOpt,
    WatchOpt,
    cli_hints,
    console,
    emit,
    emit_plain,
    fmt_age,
    fmt_limit,
    fmt_resources,
    fmt_time,
    handle_errors,
    output_format,
    plain,
    styled,
    watch,
)
from scheduler.cli.text import Table, esc, markup_state, plain_text
from scheduler.cli.views import node_allocation
from scheduler.states import JobState

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut, NodeOut

node_app = typer.Typer(
    help="List and show nodes; cordon, uncordon, drain and delete them.", no_args_is_help=True
)
vc_app = typer.Typer(help="Virtual clusters.", no_args_is_help=True)
NodeArg = typer.Argument(..., help="node name", autocompletion=complete_nodes)


def _capacity(n: NodeOut) -> dict[str, int]:
    """``{cpu_m, memory, gpu}`` of a node (millicores, bytes, devices)."""
    return {"cpu_m": n.cpu_m, "memory": n.memory, "gpu": n.gpu}


def _labels(n: NodeOut) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(n.labels.items()))


@node_app.command("list")
@handle_errors
def node_list(
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
    watch_: bool = WatchOpt,
    interval: float = IntervalOpt,
) -> None:
    """Nodes with state, address, capacity, GPU model, labels and heartbeat age.

    -o wide adds the executor and the heartbeat's time; -o json|yaml print the API's
    list; -o name one node name per line. --watch redraws until Ctrl-C.
    """
    client = ApiClient(load())
    fmt = output_format(output, as_json)

    def draw() -> None:
        nodes = client.nodes()
        if emit(nodes, fmt, (n.name for n in nodes)):
            return
        if nodes:
            _node_table(nodes, wide=fmt is OutputFormat.wide)
        else:  # a sentence, not an empty table
            console.print("no nodes: none has registered (is an agent running?)")

    watch(draw, watch_, interval)


def _node_table(nodes: list[NodeOut], wide: bool) -> None:
    """Print the nodes table (see :func:`node_list`)."""
    now = time.time()
    columns = ["name", "state", "address", "capacity", "gpu model", "labels", "heartbeat age"]
    if wide:
        columns += ["heartbeat", "executor"]
    table = Table(*columns)
    table.columns[0].no_wrap = True
    # why cordoned (by whom / GPU health): wraps rather than shrinking to a stub
    table.add_column("reason", min_width=min(32, max(console.width // 3, 16)), ratio=1)
    for n in nodes:
        row = [
            n.name,
            styled(n.state),
            n.address,
            fmt_resources(_capacity(n)),
            n.gpu_model or "",
            _labels(n),
            fmt_age(n.heartbeat, now),
        ]
        if wide:
            row += [fmt_time(n.heartbeat), n.executor]
        row.append(n.state_reason)
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
def node_show(
    name: str = NodeArg, output: OutputFormat = OutputOpt, as_json: bool = JsonOpt
) -> None:
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
    table.add_row("capacity", fmt_resources(capacity, every=True))
    table.add_row("allocated", fmt_resources(used, every=True))
    table.add_row("free", fmt_resources(free, every=True))
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
    events = Table("time", "state", "reason", "jobs", title="events (oldest first)")
    for e in node.events or []:
        jobs = ", ".join(e.jobs or []) + (f" (+{e.other_jobs} other)" if e.other_jobs else "")
        events.add_row(fmt_time(e.time), styled(e.state), e.reason, jobs)
    console.print(events if node.events else "events: none")


@node_app.command("events")
@handle_errors
def node_events(
    name: str | None = typer.Argument(
        None, help="node name (also a forgotten one); none: every forgotten node"
    ),
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
) -> None:
    """A node's events, also after pasture forgot it (a node gone for good: an AKS node
    scaled down or Spot-evicted, once its tasks were requeued); without NAME, every
    forgotten node. Read-only. -o json|yaml print GET /nodes/NAME/events or GET
    /forgotten-nodes."""
    client = ApiClient(load())
    fmt = output_format(output, as_json)
    if name is None:
        gone = client.forgotten_nodes()
        if emit([plain(g) for g in gone], fmt, ["forgotten"]):
            return
        table = Table("time", "node", "reason", title="forgotten nodes")
        for g in gone:
            table.add_row(fmt_time(g.time), g.node, g.reason)
        console.print(table if gone else "no node was forgotten")
        return
    view = client.node_events(name)
    if emit(plain(view), fmt, [name]):
        return
    table = Table("time", "event", "reason", "jobs", title=f"events of node {name}")
    rows = [(e.time, styled(e.state), e.reason, _event_jobs(e)) for e in view.events]
    rows += [(f.time, plain_text("forgotten", "red"), f.reason, "") for f in view.forgotten]
    for when, what, reason, jobs in sorted(rows, key=lambda r: r[0]):
        table.add_row(fmt_time(when), what, reason, jobs)
    console.print(table)
    if not view.known:
        console.print(f"node {esc(name)} has no record now: pasture forgot it")


def _event_jobs(e: Any) -> str:
    return ", ".join(e.jobs or []) + (f" (+{e.other_jobs} other)" if e.other_jobs else "")


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
            "yes" if g.get("healthy", True) else plain_text("no", "red"),
            "" if g.get("temperature_c") is None else f"{g['temperature_c']:g}",
            "" if g.get("power_w") is None else f"{g['power_w']:.0f}",
            "; ".join((g.get("problems") or []) + (g.get("warnings") or [])),
        )
    console.print(table)


ReasonOpt = typer.Option(None, "--reason", help="why (kept in the node's event)")


def _action(action: str, name: str, reason: str | None) -> None:
    node = ApiClient(load()).node_action(name, action, reason)
    console.print(f"node {esc(name)}: {markup_state(node.state)}")
    verb = {"drain": "requeued", "cordon": "left running", "uncordon": "running"}[action]
    _print_affected(name, verb, node)


def _print_affected(name: str, verb: str, node: NodeOut) -> None:
    """The jobs an operator's action touched (``affected_jobs`` of the answer)."""
    jobs = node.affected_jobs or []
    others = node.affected_other_jobs or 0
    if jobs or others:
        more = f" (and {others} of other VCs)" if others else ""
        listed = esc(", ".join(jobs) or "-")
        console.print(f"jobs with tasks on {esc(name)}, {verb}: {listed}{more}")
    else:
        console.print(f"no job has tasks on {esc(name)}")


@node_app.command()
@handle_errors
def cordon(name: str = NodeArg, reason: str | None = ReasonOpt) -> None:
    """Take no new tasks on NAME (running tasks stay). Leaves a node event: who, when,
    why (--reason), which jobs had tasks there."""
    _action("cordon", name, reason)


@node_app.command()
@handle_errors
def uncordon(name: str = NodeArg, reason: str | None = ReasonOpt) -> None:
    """Make NAME schedulable again (a node event, as cordon)."""
    _action("uncordon", name, reason)


@node_app.command()
@handle_errors
def drain(name: str = NodeArg, reason: str | None = ReasonOpt) -> None:
    """Cordon NAME and move its running jobs elsewhere (they are requeued, uncharged);
    prints the jobs it requeues and leaves a node event, as cordon."""
    _action("drain", name, reason)


@node_app.command()
@handle_errors
def delete(
    name: str = NodeArg,
    force: bool = typer.Option(
        False, "--force", help="delete even if it heartbeated recently (the machine is gone)"
    ),
) -> None:
    """Delete NAME, a node gone for good: it is lost now, its tasks are requeued without
    charge and its record removed. Refused while it heartbeated within its fence bound."""
    with cli_hints():
        node = ApiClient(load()).delete_node(name, force=force)
    console.print(f"node {esc(name)}: deleted (its tasks are requeued)")
    _print_affected(name, "requeued", node)


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
            fmt_limit(v.max),
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


def _status_text(key: str, value: Any) -> str | None:
    """One status value for people; None to leave the row out (an empty condition)."""
    if key == "condition":
        if not value:
            return None  # no condition: the cluster is normal
        if isinstance(value, dict):
            detail = value.get("message") or value.get("reason") or ""
            return f"{value.get('kind', '?')}" + (f": {detail}" if detail else "")
        return str(value)
    if value is None:
        return "-"
    if isinstance(value, dict) and {"cpu_m", "memory"} & set(value):
        return fmt_resources(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
    return str(value)


@handle_errors
def status(
    output: PlainFormat = PlainOpt,
    as_json: bool = typer.Option(False, "--json", help="same as -o json"),
) -> None:
    """Cluster summary: nodes and jobs by state, capacity and allocation, and the loop's
    cluster condition when there is one (e.g. a disruption)."""
    s = ApiClient(load()).status()
    if emit_plain(s, PlainFormat.json if as_json else output):
        return
    table = Table("", "", title=f"cluster {s.cluster}", show_header=False)
    for key, value in plain(s).items():
        if key in _STATUS_HIDDEN:
            continue
        text = _status_text(key, value)
        if text is not None:
            table.add_row(key, text)
    console.print(table)
