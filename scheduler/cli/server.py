"""Server-side commands: ``serve api|loop``, ``agent run``, ``admin token|vc``.

These run on the master / nodes (the Ansible roles call them, see conventions.md) and talk
to Redis directly, never to the API.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import typer
from rich.table import Table

from scheduler.cli.output import NOT_CONFIGURED, REJECTED, console, err_console

serve_app = typer.Typer(help="Run the master's services.", no_args_is_help=True)
agent_app = typer.Typer(help="Run the node agent.", no_args_is_help=True)
admin_app = typer.Typer(help="Administration (talks to Redis directly).", no_args_is_help=True)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
vc_admin_app = typer.Typer(help="Virtual clusters from the settings file.", no_args_is_help=True)
admin_app.add_typer(token_app, name="token")
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


def _settings(config: Path | None):
    from scheduler.services import backend

    try:
        return backend.load_scheduler_settings(config)
    except (OSError, ValueError) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(NOT_CONFIGURED) from None


def _entry(module: str, function: str):
    """The backend's entry point ``module.function``; a clear error when it is missing."""
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        err_console.print(f"[red]error:[/red] {module}.{function} is not available: {exc}")
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


@token_app.command("create")
def token_create(
    name: str = typer.Option(..., help="unique token name"),
    role: str = typer.Option(..., help="admin | user | agent"),
    vc: list[str] = typer.Option([], "--vc", help="a VC a user token may use (repeat)"),
    output: Path | None = typer.Option(None, help="write the token to this file (0600)"),
    if_missing: bool = typer.Option(
        False, "--if-missing", help="do nothing (exit 0) when the name exists"
    ),
    config: Path | None = ConfigOpt,
) -> None:
    """Create an API token; prints it once (or writes it to --output with mode 0600)."""
    import os

    from scheduler.services import backend
    from scheduler.store.tokens import TokenExistsError, TokenStore

    settings = _settings(config)
    tokens = TokenStore(backend.redis_client(settings))
    try:
        token = tokens.create(name, role, vc, if_missing=if_missing)
    except TokenExistsError as exc:
        err_console.print(f"[red]error:[/red] {exc} (or pass --if-missing)")
        raise typer.Exit(REJECTED) from None
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(REJECTED) from None
    if token is None:
        return
    if output is None:
        typer.echo(token)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(output, 0o600)
    err_console.print(f"wrote token {name!r} to {output}")


@token_app.command("list")
def token_list(config: Path | None = ConfigOpt) -> None:
    """List token names, roles and VCs (never the secrets)."""
    from scheduler.services import backend
    from scheduler.store.tokens import TokenStore

    tokens = TokenStore(backend.redis_client(_settings(config)))
    table = Table("name", "role", "vcs")
    for t in tokens.list():
        table.add_row(t.name, t.role.value, ", ".join(t.vcs))
    console.print(table)


@token_app.command("revoke")
def token_revoke(name: str, config: Path | None = ConfigOpt) -> None:
    """Revoke the token called NAME (exit 5 when there is none)."""
    from scheduler.services import backend
    from scheduler.store.tokens import TokenStore

    if not TokenStore(backend.redis_client(_settings(config))).revoke(name):
        err_console.print(f"[red]error:[/red] no token named {name!r}")
        raise typer.Exit(5)
    console.print(f"revoked {name!r}")


@vc_admin_app.command("apply")
def vc_apply(config: Path | None = ConfigOpt) -> None:
    """(Re)write the VCs from ``virtual_clusters`` in the settings file."""
    from scheduler.services import backend

    settings = _settings(config)
    names = backend.apply_vcs(settings, backend.open_store(settings))
    console.print(f"applied {len(names)} vc(s): {', '.join(names)}")
