"""Server-side commands: ``serve api|loop``, ``agent run``, ``admin token|vc``.

These run on the master / nodes (the Ansible roles call them, see conventions.md) and talk
to Redis directly, never to the API.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from scheduler.cli.output import NOT_CONFIGURED, console, err_console
from scheduler.cli.text import esc

if TYPE_CHECKING:
    from scheduler.settings import SchedulerSettings

serve_app = typer.Typer(help="Run the master's services.", no_args_is_help=True)
agent_app = typer.Typer(help="Run the node agent.", no_args_is_help=True)
admin_app = typer.Typer(help="Administration (talks to Redis directly).", no_args_is_help=True)
vc_admin_app = typer.Typer(help="Virtual clusters from the settings file.", no_args_is_help=True)
admin_app.add_typer(vc_admin_app, name="vc")

ConfigOpt = typer.Option(
    None,
    "--config",
    "-c",
    envvar="PASTURE_CONFIG",
    help="settings file (default /etc/pasture/scheduler.yaml)",
)
AgentConfigOpt = typer.Option(
    None,
    "--config",
    "-c",
    envvar="PASTURE_CONFIG",
    help="settings file (default /etc/pasture/agent.yaml)",
)


def _settings(config: Path | None) -> SchedulerSettings:
    from scheduler.services import backend

    try:
        return backend.load_scheduler_settings(config)
    except (OSError, ValueError) as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)}")
        raise typer.Exit(NOT_CONFIGURED) from None


def _entry(module: str, function: str) -> Callable[..., Any]:
    """The backend's entry point ``module.function``; a clear error when it is missing."""
    try:
        entry: Callable[..., Any] = getattr(importlib.import_module(module), function)
        return entry
    except (ImportError, AttributeError) as exc:
        where = esc(f"{module}.{function}")
        err_console.print(f"[red]error:[/red] {where} is not available: {esc(exc)}")
        raise typer.Exit(1) from None


@serve_app.command("api")
def serve_api(
    config: Path | None = ConfigOpt,
    host: str | None = typer.Option(None, help="override api.host"),
    port: int | None = typer.Option(None, help="override api.port"),
) -> None:
    """Serve the REST API with uvicorn (TLS when api.tls_cert/api.tls_key are set)."""
    from scheduler.api.server import serve

    _settings(config)  # fail early with a clear message
    serve(config, host=host, port=port)


@serve_app.command("loop")
def serve_loop(config: Path | None = ConfigOpt) -> None:
    """Run the scheduling loop (snapshot -> core -> commit) until SIGTERM."""
    _entry("scheduler.loop", "main")(["--config", str(config)] if config else [])


@agent_app.command("run")
def agent_run(config: Path | None = AgentConfigOpt) -> None:
    """Run the node agent: register, heartbeat, run the tasks bound to this node."""
    _entry("scheduler.agent", "main")(["--config", str(config)] if config else [])


@vc_admin_app.command("apply")
def vc_apply(config: Path | None = ConfigOpt) -> None:
    """(Re)write the VCs from ``virtual_clusters`` in the settings file."""
    from scheduler.services import backend

    settings = _settings(config)
    names = backend.apply_vcs(settings, backend.open_store(settings))
    console.print(f"applied {len(names)} vc(s): {esc(', '.join(names))}")
