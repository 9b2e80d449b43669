"""``pasture admin backup FILE`` / ``pasture admin restore FILE [--force]``.

Run on the master (or anywhere the scheduler settings reach Redis with the admin
credential). The snapshot and the file format: :mod:`scheduler.store.backup`; the
recovery point: docs/ansible.md "Backup and recovery".
"""

from __future__ import annotations

from pathlib import Path

import typer

from scheduler.cli.output import REJECTED, console, err_console
from scheduler.cli.server import ConfigOpt, _settings
from scheduler.cli.text import esc
from scheduler.units import format_bytes


def backup(
    file: Path = typer.Argument(..., help="backup file to write (gzip JSON, mode 0600)"),
    config: Path | None = ConfigOpt,
) -> None:
    """Write a consistent snapshot of the store (every pasture:* key) to FILE."""
    import redis

    from scheduler.store import backup as store_backup

    client = store_backup.raw_client(_settings(config).redis)
    try:
        info = store_backup.backup(client, file)
    except (store_backup.BackupError, redis.RedisError, OSError) as exc:
        err_console.print(f"[red]error:[/red] backup failed: {esc(exc)}")
        raise typer.Exit(1) from None
    console.print(
        f"backed up {info.keys} key(s) ({format_bytes(info.payload_bytes)}) to {esc(info.path)}"
    )


def restore(
    file: Path = typer.Argument(..., help="backup file written by 'pasture admin backup'"),
    force: bool = typer.Option(
        False,
        "--force",
        help="replace a store that holds jobs; stops, ends and deletions since the backup are kept",
    ),
    config: Path | None = ConfigOpt,
) -> None:
    """Restore FILE into the store while agents run; refuses a store that holds jobs
    unless --force. Prints what was kept from after the backup and what is lost. Stop the
    loop and the API first (systemctl stop pasture-loop pasture-api), start them after."""
    import redis

    from scheduler.store import backup as store_backup

    client = store_backup.raw_client(_settings(config).redis)
    try:
        info = store_backup.restore(client, file, force=force)
    except store_backup.BackupError as exc:
        err_console.print(f"[red]error:[/red] {esc(exc)}")
        raise typer.Exit(REJECTED) from None
    except (redis.RedisError, OSError) as exc:
        err_console.print(f"[red]error:[/red] restore failed: {esc(exc)}")
        raise typer.Exit(1) from None
    console.print(f"restored {info.keys} key(s) from {esc(info.path)}")
    for line in info.kept:
        console.print(f"kept: {line}", markup=False, highlight=False)
    for line in info.lost:
        console.print(f"lost: {line}", markup=False, highlight=False)
