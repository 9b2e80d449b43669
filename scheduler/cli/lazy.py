"""Command groups whose commands are imported on first use (``pasture``'s start-up).

Click's pattern "Lazily loading subcommands" (click documentation, *Complex Applications*):
a group class whose ``get_command`` imports the module of the one command named on the
command line, so ``pasture job list`` imports the job-reading commands and never the
node, data, admin or server ones, and Typer builds (inspects the signature of, makes the
options of) only the commands on the way to the one that runs. ``--help`` of a group,
the "did you mean" of a mistyped name and a name no table knows load every command of
that group, so what they print is what the eager app printed.

A :class:`LazyGroup` subclass names its commands in :attr:`LazyGroup.lazy`, in the order
``--help`` lists them: ``{name: (module, attribute)}``, where the attribute is a Typer app
(the command is that group), a function (the command), or ``None`` (importing the module
registers the command on the group's own Typer app, as ``@app.command("list")`` in
:mod:`scheduler.cli.jobreads` does). tests/scheduler/cli/test_cli_lazy.py checks that every
table names every command it can load, and that the lazy app prints the help the eager
one did.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

import typer
import typer.main
from typer.core import TyperGroup
from typer.models import CommandInfo

MARKUP_MODE: Any = "markdown"
"""``--help``'s markup of every pasture command (the root app's and each lazily built
one's): a docstring's paragraphs are reflowed to the terminal and ``code`` prints as
code, not between double backticks."""

# Typer's vendored click Context and Command: typed Any here, as in jobgroup.JobCommands


def _group_callback() -> None:
    """The callback that makes a one-command holder app a group (see :func:`build`)."""


def build(name: str, target: Any) -> Any:
    """The click command that ``app.add_typer(target, name=name)`` (``target`` a Typer
    app), ``app.command(name)(target)`` (a function) or the registration ``target`` (a
    Typer ``CommandInfo``) would have put into a Typer app's group.

    Built by Typer itself from a holder app with that one command, so the options, help
    and classes are exactly Typer's (the holder has Typer's defaults, as ``pasture``'s
    root app does: :data:`MARKUP_MODE` and short pretty exceptions).
    """
    holder = typer.Typer(rich_markup_mode=MARKUP_MODE)
    holder.callback()(_group_callback)  # a group: a lone command would be the app itself
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    elif isinstance(target, CommandInfo):
        holder.registered_commands.append(target)
    else:
        holder.command(name)(target)
    group = typer.main.get_command(holder)
    assert isinstance(group, TyperGroup)
    return group.commands[name]


class LazyGroup(TyperGroup):
    """A Typer group whose :attr:`lazy` commands are imported when first named.

    :attr:`app` is the group's own Typer app when modules register commands on it (an
    entry ``(module, None)``); commands registered on it in no table are found by loading
    every table entry first.
    """

    lazy: ClassVar[Mapping[str, tuple[str, str | None]]] = {}
    app: ClassVar[typer.Typer | None] = None
    order: ClassVar[tuple[str, ...]] = ()
    """``--help``'s order when it differs from :attr:`lazy`'s (names of commands
    registered eagerly among the lazy ones); others follow as registered."""

    def _load(self, name: str) -> None:
        module_name, attribute = self.lazy[name]
        module = importlib.import_module(module_name)
        if attribute is not None:
            self.commands[name] = build(name, getattr(module, attribute))
        else:
            self._add_registered(only=name)  # its module's other commands: when named

    def _add_registered(self, only: str | None = None) -> None:
        """Build the commands registered on :attr:`app` that the group lacks (``only``:
        that one)."""
        if self.app is None:
            return
        for info in self.app.registered_commands:
            name = info.name or typer.main.get_command_name(getattr(info.callback, "__name__", ""))
            if name and name not in self.commands and only in (None, name):
                self.commands[name] = build(name, info)

    def load_all(self) -> None:
        """Import every table entry (``--help``, unknown names, suggestions)."""
        for name in self.lazy:
            if name not in self.commands:
                self._load(name)
        self._add_registered()

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, imported on first use; None when no module has it."""
        if cmd_name not in self.commands:
            if cmd_name in self.lazy:
                self._load(cmd_name)
            if cmd_name not in self.commands:
                # registered by a module no entry names, or unknown: then "did you
                # mean" (Typer's, from the group's commands) sees every name
                self.load_all()
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command (all imported): the table's order, then the others as
        registered."""
        self.load_all()
        order = self.order or tuple(self.lazy)
        ranked = [n for n in order if n in self.commands]
        return ranked + [n for n in self.commands if n not in order]
