"""``pasture``: the command line of a pasture cluster (Typer + Rich).

```
pasture login | status | template job
pasture job submit|list|show|logs|stop|delete -> REST API (httpx)
pasture node list|cordon|uncordon|drain      -> REST API
pasture vc list                              -> REST API
pasture data push|pull, image push           -> SSH (paramiko) to the master / nodes
pasture dev up|down                          -> scheduler.dev (local processes)
pasture serve api|loop, agent run, admin ... -> server side, Redis directly
  (admin backup|restore FILE: scheduler.cli.backup)
pasture sim ..., inventory ...               -> scheduler.sim.cli, scheduler.inventory
```
Exit codes: see :mod:`scheduler.cli.output`.
"""

from __future__ import annotations

import importlib

import typer

from scheduler.cli import backup, cluster, data, dev, jobs, login, server, tokens

app = typer.Typer(
    name="pasture",
    help="Run and manage training jobs on a pasture cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(jobs.app, name="job")
app.add_typer(cluster.node_app, name="node")
app.add_typer(cluster.vc_app, name="vc")
app.command("status")(cluster.status)
app.command("login")(login.login)
app.add_typer(login.template_app, name="template")
app.add_typer(data.data_app, name="data")
app.add_typer(data.image_app, name="image")
app.add_typer(dev.dev_app, name="dev")
app.add_typer(server.serve_app, name="serve")
app.add_typer(server.agent_app, name="agent")
server.admin_app.command("backup")(backup.backup)
server.admin_app.command("restore")(backup.restore)
app.add_typer(server.admin_app, name="admin")
server.admin_app.add_typer(tokens.token_app, name="token")

# Groups written by others, imported inside a guard so that a missing or broken one only
# breaks its own command: (name, module, attribute, help).
_MOUNTS = (
    ("sim", "scheduler.sim.cli", "app", "Trace-driven simulator of the scheduler core."),
    ("inventory", "scheduler.inventory", "app", "Ansible inventory from Pulumi stack outputs."),
)


def _mount(name: str, module: str, attribute: str, help_text: str) -> None:
    try:
        sub = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        app.command(
            name,
            help=f"{help_text} (unavailable: {module} did not import)",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False,
        )(_missing(name, module, exc))
        return
    app.add_typer(sub, name=name, help=help_text)


def _missing(name: str, module: str, exc: Exception):
    def command(ctx: typer.Context) -> None:
        typer.echo(
            f"error: 'pasture {name}' needs {module}, which is not available: {exc}", err=True
        )
        raise typer.Exit(1)

    return command


for _args in _MOUNTS:
    _mount(*_args)


def main() -> None:
    """Console script entry point (``pasture``)."""
    app()
