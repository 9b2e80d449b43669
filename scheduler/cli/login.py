"""``pasture login`` and ``pasture template job``."""

from __future__ import annotations

from pathlib import Path

import typer

from scheduler.cli.client import ApiClient
from scheduler.cli.config import ClientConfig, save_login
from scheduler.cli.output import console, handle_errors


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
) -> None:
    """Save the endpoint and token to the config file (mode 0600)."""
    config = ClientConfig(endpoint.rstrip("/"), token, str(ca_cert) if ca_cert else None)
    if check:
        who = ApiClient(config).whoami()
        vcs = ", ".join(who["vcs"]) or "-"
        console.print(f"token {who['name']!r}: role {who['role']}, vcs {vcs}")
    path = save_login(config.endpoint, token, config.ca_cert)
    console.print(f"saved {path}")


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
        console.print(f"wrote {output}")
