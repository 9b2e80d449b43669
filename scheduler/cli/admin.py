"""``pasture admin``: the group of :mod:`scheduler.cli.server` with the backup, restore
and token commands of :mod:`scheduler.cli.backup` and :mod:`scheduler.cli.tokens`
(registered when this module is first imported: by the root group, on first use)."""

from __future__ import annotations

from scheduler.cli import backup, server, tokens

server.admin_app.command("backup")(backup.backup)
server.admin_app.command("restore")(backup.restore)
server.admin_app.add_typer(tokens.token_app, name="token")

admin_app = server.admin_app
