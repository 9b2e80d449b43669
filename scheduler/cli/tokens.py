"""``pasture admin token create|list|revoke|rotate``: API tokens, on the master.

These talk to Redis directly (the first admin token cannot come from the API). Token
lifetimes come from the settings file (``api.token_ttl_days``, ``api.token_max_ttl_days``).
A secret is printed once, by ``create`` and ``rotate``; ``list`` never shows one.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from scheduler.cli.output import (
    REJECTED,
    PlainFormat,
    PlainOpt,
    console,
    emit_plain,
    err_console,
    plain,
)
from scheduler.cli.server import ConfigOpt, _settings
from scheduler.cli.text import Table, esc

if TYPE_CHECKING:
    from scheduler.store.tokens import TokenStore

# Mounted as ``pasture admin token`` by scheduler.cli.
token_app = typer.Typer(help="API tokens (every token expires).", no_args_is_help=True)

TtlOpt = typer.Option(
    None,
    "--ttl-days",
    min=0.001,
    help="lifetime in days (default api.token_ttl_days, at most api.token_max_ttl_days)",
)
NOT_FOUND = 5


def _tokens(config: Path | None) -> TokenStore:
    from scheduler.services import backend
    from scheduler.store.tokens import TokenStore

    settings = _settings(config)
    return TokenStore.from_settings(backend.redis_client(settings), getattr(settings, "api", None))


def _write_secret(token: str, output: Path | None, name: str) -> None:
    if output is None:
        typer.echo(token)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(output, 0o600)
    err_console.print(f"wrote token {esc(repr(name))} to {esc(output)}")


def _when(epoch: float) -> str:
    if epoch == float("inf"):
        return "never"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


@token_app.command("create")
def token_create(
    name: str = typer.Option(..., help="unique token name"),
    role: str = typer.Option(..., help="admin | user | agent"),
    vc: list[str] = typer.Option([], "--vc", help="a VC a user token may use (repeat)"),
    operator: list[str] = typer.Option(
        [],
        "--operator",
        help="a VC (one of --vc) where this user token is the operator: it may stop and"
        " delete every user's jobs there, not only its own (repeat)",
    ),
    output: Path | None = typer.Option(None, help="write the token to this file (0600)"),
    if_missing: bool = typer.Option(
        False,
        "--if-missing",
        help="do nothing (exit 0) when a live token of that name exists; an expired one "
        "is replaced",
    ),
    ttl_days: float | None = TtlOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Create an API token; prints it once (or writes it to --output with mode 0600)."""
    from scheduler.store.tokens import DAY_S, TokenExistsError

    tokens = _tokens(config)
    try:
        ttl_s = None if ttl_days is None else ttl_days * DAY_S
        token = tokens.create(name, role, vc, if_missing=if_missing, ttl_s=ttl_s, operates=operator)
    except TokenExistsError as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)} (or pass --if-missing)")
        raise typer.Exit(REJECTED) from None
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)}")
        raise typer.Exit(REJECTED) from None
    if token is not None:
        _write_secret(token, output, name)


@token_app.command("list")
def token_list(config: Path | None = ConfigOpt, output: PlainFormat = PlainOpt) -> None:
    """List token names, roles, VCs, creation and expiry (never the secrets).

    -o json|yaml: ``[{name, role, vcs, created, expires, operates, expired}]`` (times in epoch
    seconds; ``expires`` null for a token that never expires).
    """
    now = time.time()
    tokens = _tokens(config).list()
    data = [{**plain(t), "expired": t.expired(now)} for t in tokens]
    if emit_plain(data, output):
        return
    if not tokens:  # a sentence, not an empty table
        console.print("no tokens")
        return
    table = Table("name", "role", "vcs", "operates", "created", "expires")
    for t in tokens:
        expires = _when(t.expires) + (" (expired)" if t.expired(now) else "")
        vcs, operates = ", ".join(t.vcs), ", ".join(t.operates)
        table.add_row(t.name, t.role.value, vcs, operates, _when(t.created), expires)
    console.print(table)


@token_app.command("revoke")
def token_revoke(name: str, config: Path | None = ConfigOpt) -> None:
    """Revoke the token called NAME (exit 5 when there is none)."""
    if not _tokens(config).revoke(name):
        err_console.print(f"[red]error:[/red] no token named {esc(repr(name))}")
        raise typer.Exit(NOT_FOUND)
    console.print(f"revoked {esc(repr(name))}")


@token_app.command("rotate")
def token_rotate(
    name: str,
    output: Path | None = typer.Option(None, help="write the new token to this file (0600)"),
    ttl_days: float | None = TtlOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Give token NAME a new secret (printed once) and expiry; the old one stops at once.

    Exit 5 when there is no such token."""
    from scheduler.store.tokens import DAY_S

    try:
        token = _tokens(config).rotate(name, ttl_s=None if ttl_days is None else ttl_days * DAY_S)
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)}")
        raise typer.Exit(REJECTED) from None
    if token is None:
        err_console.print(f"[red]error:[/red] no token named {esc(repr(name))}")
        raise typer.Exit(NOT_FOUND)
    _write_secret(token, output, name)
