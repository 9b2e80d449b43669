"""``pasture dev up|down``: the process-mode dev cluster (backend: :mod:`scheduler.dev`)."""

from __future__ import annotations

import json
from types import ModuleType

import typer

from scheduler.cli.output import console, err_console
from scheduler.cli.text import esc

dev_app = typer.Typer(
    help="Local process-mode cluster for development and tests.", no_args_is_help=True
)


def _dev() -> ModuleType:
    try:
        from scheduler import dev
    except ImportError as exc:
        err_console.print(f"[red]error:[/red] scheduler.dev is not available: {esc(exc)}")
        raise typer.Exit(1) from None
    return dev


@dev_app.command("up")
def up(
    nodes: int = typer.Option(2, min=1, help="number of agents (nodes)"),
    gpus: int | None = typer.Option(
        None,
        "--gpus",
        "--gpus-per-node",
        min=0,
        help="pin every node to N GPUs (fake ones on a host without NVIDIA driver); "
        "default: the first node detects this host's GPUs by NVML, the others have none",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="print endpoint, token, share, settings path... as JSON"
    ),
) -> None:
    """Start redis-server, the API, the loop and N agents as local processes. Prints the
    endpoint and admin token, the share, the settings file that the admin commands take
    as --config, and how to add a user and a VC."""
    dev = _dev()
    try:
        with console.status(f"starting a dev cluster with {nodes} node(s)"):
            cluster = dev.up(nodes=nodes, gpus_per_node=gpus)
    except dev.DevError as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)}")
        raise typer.Exit(1) from None
    state = cluster.to_dict()
    info = {
        k: state[k]
        for k in (
            "endpoint",
            "token",
            "redis_url",
            "redis_password_file",
            "share_dir",
            "nodes",
            "gpus",
            "task_users",
            "task_users_why",
        )
    }
    info["settings"] = state["scheduler_config"]
    if as_json:
        typer.echo(json.dumps(info))
        return
    console.print(f"endpoint: {esc(info['endpoint'])}")
    console.print(f"token:    {esc(info['token'])}")
    console.print(f"nodes:    {esc(', '.join(info['nodes']))}")
    how = "pinned by --gpus" if gpus is not None else "detected by NVML"
    per_node = ", ".join(f"{n}: {g}" for n, g in zip(info["nodes"], info["gpus"], strict=True))
    console.print(f"gpus:     {esc(per_node)} ({esc(how)})")
    console.print(f"share:    {esc(info['share_dir'])}")
    if info["task_users"] == "vc":
        console.print("tenants:  each VC's tasks run as its own Unix user (pasture-<vc>)")
    else:
        console.print(
            f"tenants:  NOT separated: {esc(info['task_users_why'])}; every VC's tasks run as"
            " your user (docs/runtime-env.md, Tenants' Unix users)",
            highlight=False,
        )
    password = esc(info["redis_password_file"])
    console.print(f"redis:    {esc(info['redis_url'])} (password in {password})")
    settings = esc(info["settings"])
    console.print(f"settings: {settings} (the admin commands' --config)")
    console.print("the pasture CLI uses this cluster until 'pasture dev down' (no login needed)")
    console.print(
        "add a user:  pasture admin token create --config"
        f" {settings} --name alice --role user --vc default",
        highlight=False,
    )
    console.print(
        f"add a VC:    edit virtual_clusters in {settings}, then"
        f" pasture admin vc apply --config {settings}",
        highlight=False,
    )
    console.print(
        f"dashboard:   {esc(info['endpoint'])}/ (log in with the token above)", highlight=False
    )


@dev_app.command("down")
def down() -> None:
    """Stop every process of the dev cluster and remove its state."""
    dev = _dev()
    with console.status("stopping the dev cluster"):
        stopped = dev.down()
    console.print("dev cluster stopped" if stopped else "no dev cluster was running")
