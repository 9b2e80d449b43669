"""``pasture node ...``, ``pasture vc list``, ``pasture status``."""

from __future__ import annotations

import typer
from rich.table import Table

from scheduler.cli.client import ApiClient
from scheduler.cli.config import load
from scheduler.cli.output import console, fmt_resources, fmt_time, handle_errors, print_json, styled

node_app = typer.Typer(help="List nodes; cordon, uncordon and drain them.", no_args_is_help=True)
vc_app = typer.Typer(help="Virtual clusters.", no_args_is_help=True)


def _capacity(n: dict) -> dict:
    if isinstance(n.get("capacity"), dict):
        return n["capacity"]
    return {"cpu_m": n.get("cpu_m", 0), "memory": n.get("memory", 0), "gpu": n.get("gpu", 0)}


@node_app.command("list")
@handle_errors
def node_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """Nodes with state, address, capacity, labels and last heartbeat."""
    nodes = ApiClient(load()).nodes()
    if as_json:
        print_json(nodes)
        return
    table = Table(
        "name", "state", "address", "capacity", "gpu model", "labels", "heartbeat", "reason"
    )
    for n in nodes:
        table.add_row(
            str(n.get("name")),
            styled(n.get("state")),
            str(n.get("address", "")),
            fmt_resources(_capacity(n)),
            str(n.get("gpu_model") or ""),
            ",".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items())),
            fmt_time(n.get("heartbeat")),
            str(n.get("state_reason") or ""),  # why cordoned (by whom / GPU health)
        )
    console.print(table)


@node_app.command("show")
@handle_errors
def node_show(name: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """One node: state and why, capacity, GPU health (agent's NVML probe) and events."""
    n = ApiClient(load()).node(name)
    if as_json:
        print_json(n)
        return
    console.print(
        f"[bold]{n.get('name')}[/bold]  state={styled(n.get('state'))}"
        f"  {fmt_resources(_capacity(n))}  heartbeat={fmt_time(n.get('heartbeat'))}"
    )
    if n.get("state_reason"):
        console.print(f"reason: {n['state_reason']}")
    gpus = [g for g in (n.get("usage") or {}).get("gpu_health") or [] if isinstance(g, dict)]
    if gpus:
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
    table = Table("time", "state", "reason", title="events")
    for e in n.get("events") or []:
        table.add_row(fmt_time(e.get("time")), styled(e.get("state")), str(e.get("reason", "")))
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
def vc_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """VCs with guarantee, max, used and borrowed resources."""
    vcs = ApiClient(load()).vcs()
    if as_json:
        print_json(vcs)
        return
    table = Table("name", "guarantee", "max", "used", "borrowed", "running", "queued")
    for v in vcs:
        table.add_row(
            str(v.get("name")),
            fmt_resources(v.get("guarantee")),
            fmt_resources(v.get("max")) or "-",
            fmt_resources(v.get("used")),
            fmt_resources(v.get("borrowed")),
            str(v.get("jobs_running", "")),
            str(v.get("jobs_queued", "")),
        )
    console.print(table)


@handle_errors
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Cluster summary: nodes and jobs by state, capacity and allocation."""
    s = ApiClient(load()).status()
    if as_json:
        print_json(s)
        return
    table = Table("", "", title=f"cluster {s.get('cluster', '')}", show_header=False)
    for key, value in s.items():
        if key == "cluster":
            continue
        if isinstance(value, dict) and {"cpu_m", "memory"} & set(value):
            text = fmt_resources(value)
        elif isinstance(value, dict):
            text = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        else:
            text = str(value)
        table.add_row(key, text)
    console.print(table)
