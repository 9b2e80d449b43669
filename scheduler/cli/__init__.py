"""``pasture``: the command line of a pasture cluster (Typer + Rich).

```
pasture login | context list|use | status | template job
pasture job submit|list|show|logs|stop|delete|resubmit|top -> REST API (httpx)
pasture usage --since --until --by user|vc   -> REST API (GPU-hours)
pasture job validate FILE                    -> scheduler.spec, offline
pasture node list|show|cordon|uncordon|drain -> REST API
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
from typing import Any

import typer
import typer.main

from scheduler.cli import coercion
from scheduler.cli.complete import complete_contexts
from scheduler.cli.lazy import MARKUP_MODE, LazyGroup


class RootCommands(LazyGroup):
    """``pasture``'s commands, each imported when first named (see
    :mod:`scheduler.cli.lazy`): ``pasture job list`` imports the job-reading commands only.
    ``--help`` lists them in :attr:`order` (Typer's: single commands, then groups)."""

    lazy = {
        "usage": ("scheduler.cli.usage", "usage"),
        "status": ("scheduler.cli.cluster", "status"),
        "login": ("scheduler.cli.login", "login"),
        "job": ("scheduler.cli.jobgroup", "app"),  # jobgroup.JobCommands: lazy too
        "schedule": ("scheduler.cli.schedules", "app"),
        "node": ("scheduler.cli.cluster", "node_app"),
        "vc": ("scheduler.cli.cluster", "vc_app"),
        "context": ("scheduler.cli.login", "context_app"),
        "template": ("scheduler.cli.login", "template_app"),
        "data": ("scheduler.cli.data", "data_app"),
        "image": ("scheduler.cli.data", "image_app"),
        "dev": ("scheduler.cli.dev", "dev_app"),
        "serve": ("scheduler.cli.server", "serve_app"),
        "agent": ("scheduler.cli.server", "agent_app"),
        "admin": ("scheduler.cli.admin", "admin_app"),  # with backup, restore, token
    }
    order = (
        *("usage", "status", "login", "sim", "inventory", "job", "schedule", "node", "vc"),
        *("context", "template", "data", "image", "dev", "serve", "agent", "admin"),
    )


def _flags_without_type() -> None:
    """``--help`` lists a flag without a type: Typer 0.29 shows every flag as taking a
    ``<bool>`` (``--force <bool>``), which reads as if it wanted a value. Its value
    types stay (``--limit <int>``)."""
    from typer.core import TyperOption

    typed = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:  # Typer's own click
        return None if self.is_flag else typed(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_without_type()
coercion.install()  # plain option values without pydantic (scheduler/cli/coercion.py)

# MARKUP_MODE (markdown): a docstring's paragraphs are reflowed to the terminal (its
# hard line breaks are gone) and ``code`` prints as code, not between double backticks.
app = typer.Typer(
    name="pasture",
    help="Run and manage training jobs on a pasture cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=MARKUP_MODE,
    cls=RootCommands,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"pasture {version('pasture')}")
        except PackageNotFoundError:
            typer.echo("pasture (not installed: version unknown)")
        raise typer.Exit()


def _set_context(value: str | None) -> str | None:
    """``--context``: set as soon as it is parsed, so that shell completion (which parses
    the command line but runs no command) asks that context's API too."""
    from scheduler.cli import config

    config.context_override = value
    return value


@app.callback()
def _root(
    _show_version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print the installed pasture package version and exit.",
    ),
    context: str | None = typer.Option(
        None,
        "--context",
        envvar="PASTURE_CONTEXT",
        help="Use this cluster of the login file (pasture context list), not the current.",
        callback=_set_context,
        autocompletion=complete_contexts,
    ),
) -> None:
    """Run and manage training jobs on a pasture cluster."""
    from scheduler.cli import config

    config.context_override = context


# Groups written by others, mounted lazily: their module (the simulator loads numpy) is
# imported only when the command runs, and a missing or broken one only breaks its own
# command. (name, module, attribute, help).
_MOUNTS = (
    ("sim", "scheduler.sim.cli", "app", "Trace-driven simulator of the scheduler core."),
    ("inventory", "scheduler.inventory", "app", "Ansible inventory from Pulumi stack outputs."),
)


def _mount(name: str, module: str, attribute: str, help_text: str) -> None:
    """Register ``pasture NAME ...``: on use, import ``module.attribute`` (a Typer app)
    and hand it every argument after NAME (``--help`` included)."""

    def command(ctx: typer.Context) -> None:
        try:
            sub = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            typer.echo(
                f"error: 'pasture {name}' needs {module}, which is not available: {exc}",
                err=True,
            )
            raise typer.Exit(1) from None
        typer.main.get_command(sub).main(args=list(ctx.args), prog_name=f"pasture {name}")

    app.command(
        name,
        help=help_text,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(command)


for _args in _MOUNTS:
    _mount(*_args)


def main() -> None:
    """Console script entry point (``pasture``)."""
    app()
