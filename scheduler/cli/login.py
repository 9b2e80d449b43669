"""``pasture login``, ``pasture context list|use`` and ``pasture template job``."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from scheduler.cli import config as cfg
from scheduler.cli.client import ApiClient
from scheduler.cli.complete import complete_contexts
from scheduler.cli.config import ClientConfig, save_login
from scheduler.cli.output import (
    NOT_CONFIGURED,
    PlainFormat,
    PlainOpt,
    console,
    emit_plain,
    err_console,
    handle_errors,
)
from scheduler.cli.text import esc


@handle_errors
def login(
    endpoint: str = typer.Argument(..., help="API endpoint, e.g. https://10.77.1.10:8443"),
    token: str = typer.Option(
        ...,
        prompt=True,
        hide_input=True,
        envvar="PASTURE_TOKEN",
        help="API token (pasture admin token create)",
    ),
    ca_cert: Path | None = typer.Option(
        None,
        "--ca-cert",
        exists=True,
        dir_okay=False,
        help="CA bundle that signed the API's certificate",
    ),
    check: bool = typer.Option(True, help="verify the token against the API first"),
    context: str = typer.Option(
        cfg.DEFAULT_CONTEXT, "--context", help="name of this cluster in the login file"
    ),
) -> None:
    """Save the endpoint and token as a context of the login file (mode 0600) and make
    it the current one."""
    config = ClientConfig(endpoint.rstrip("/"), token, str(ca_cert) if ca_cert else None)
    if check:
        who = ApiClient(config).whoami()
        vcs = ", ".join(who.vcs) or "-"
        console.print(f"token {esc(repr(who.name))}: role {esc(who.role)}, vcs {esc(vcs)}")
    path = save_login(config.endpoint, token, config.ca_cert, context=context)
    console.print(f"saved context {esc(repr(context))} in {esc(path)} (current)")


context_app = typer.Typer(
    help="Clusters saved by 'pasture login --context NAME'.", no_args_is_help=True
)


@context_app.command("list")
@handle_errors
def context_list(output: PlainFormat = PlainOpt) -> None:
    """The login file's contexts: name, endpoint, which is current (*), and which cluster
    commands use now and why (a running dev cluster, PASTURE_CONTEXT, the environment).

    -o json|yaml: ``{current, in_use: {endpoint, source}, contexts: [{name, endpoint,
    current}]}`` (never a token).
    """
    current, known = cfg.contexts()
    try:
        effective = cfg.load()
        in_use: dict[str, str] | None = {
            "endpoint": effective.endpoint,
            "source": effective.source,
        }
    except cfg.ConfigError:
        in_use = None
    rows = [
        {"name": n, "endpoint": str(known[n].get("endpoint", "")), "current": n == current}
        for n in sorted(known)
    ]
    if emit_plain({"current": current, "in_use": in_use, "contexts": rows}, output):
        return
    if not known:
        console.print("no contexts: pasture login ENDPOINT --context NAME")
    for row in rows:
        mark = "*" if row["current"] else " "
        console.print(f"{esc(mark)} {esc(row['name'])}\t{esc(row['endpoint'])}", highlight=False)
    if in_use is not None:
        source = esc(in_use["source"])
        console.print(f"in use: {esc(in_use['endpoint'])} ({source})", highlight=False)


@context_app.command("use")
def context_use(
    name: str = typer.Argument(..., help="context name", autocompletion=complete_contexts),
) -> None:
    """Make NAME the current context (later commands talk to its cluster, also while a
    dev cluster started earlier runs; a later ``pasture dev up`` takes over again)."""
    try:
        path = cfg.use_context(name)
    except cfg.ConfigError as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)}")
        raise typer.Exit(NOT_CONFIGURED) from None
    console.print(f"current context: {esc(name)} ({esc(path)})")
    if cfg.context_override or os.environ.get("PASTURE_CONTEXT"):
        err_console.print(
            "[yellow]note:[/yellow] PASTURE_CONTEXT / --context is set and wins over it"
        )
    if os.environ.get("PASTURE_ENDPOINT") or os.environ.get("PASTURE_TOKEN"):
        err_console.print(
            "[yellow]note:[/yellow] PASTURE_ENDPOINT / PASTURE_TOKEN are set and win over it"
        )


template_app = typer.Typer(help="Write commented example specs.", no_args_is_help=True)


@template_app.command("job")
def template_job(
    output: Path | None = typer.Option(None, "--output", "-o", help="write here, not stdout"),
) -> None:
    """Print (or write) a commented example job spec."""
    from scheduler.services.backend import job_template

    text = job_template()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        console.print(f"wrote {esc(output)}")
