"""The one way the CLI prints text it did not write itself (issue 34, item 1).

Job names, reasons, cordon reasons, events, labels, task messages and log lines come
from jobs, users and nodes: they are data, never Rich markup and never terminal control.
Every command prints them through this module:

- :func:`visible` makes control characters visible instead of letting the terminal
  execute them: C0 controls and DEL become their Unicode control pictures (ESC ->
  ``␛``, NUL -> ``␀``, a newline inside one field -> ``␊``; U+2400..U+2421), C1
  controls and the bidirectional overrides/isolates (which reorder what a terminal
  shows; "Trojan Source", CVE-2021-42574) become ``<U+009B>``. Everything else, brackets
  and backslashes included, is kept as it is.
- :func:`esc` is :func:`visible` made inert for Rich markup, for the values put into a
  ``console.print(f"...")`` line that has markup of our own. It does not use
  :func:`rich.markup.escape`, whose output depends on what follows (a value ending in a
  backslash prints two of them unless a tag follows): ``[`` and ``\\`` become two
  private-use characters that no markup reads, and the CLI's consoles
  (:class:`scheduler.cli.output.Console`) turn them back after parsing
  (:func:`restore`). Private-use characters in the data itself are shown as
  ``<U+E000>`` so that they cannot pose as either.
- :class:`Table` is a Rich table whose ``str`` cells are plain text (a ``rich.text.Text``
  of :func:`visible`), never markup; cells with our own style are passed as ``Text``
  (:func:`styled`).
- :func:`visible_log_line` is :func:`visible` for the bytes of a log line (tabs kept,
  invalid UTF-8 shown as ``\\xNN``).
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console, ConsoleOptions
from rich.table import Table as _RichTable
from rich.text import Text

# C0 (but TAB in log lines), DEL, C1, and the bidi embeddings/overrides/isolates
# (and the two private-use characters that stand for "[" and "\\" inside markup)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ue000\ue001]")
_CONTROL_KEEP_TAB = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ue000\ue001]"
)
_OPEN, _BACKSLASH = "\ue000", "\ue001"


def _picture(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ .. ␟
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def visible(value: object) -> str:
    """``str(value)`` with every control character made visible (see the module doc);
    None -> ''. Shapes: any object -> one line of text without control characters."""
    if value is None:
        return ""
    return _CONTROL.sub(_picture, str(value))


def esc(value: object) -> str:
    """:func:`visible` text made inert for Rich markup: ``f"[red]{esc(reason)}[/red]"``
    printed by a CLI console shows ``reason``'s characters, ``[/data]``, ``[red]`` and
    a trailing backslash included (see the module doc)."""
    return visible(value).replace("\\", _BACKSLASH).replace("[", _OPEN)


def restore(text: Text) -> Text:
    """Turn :func:`esc`'s stand-ins back into ``[`` and ``\\`` after markup was parsed
    (same length, so the styles' spans stay where they were); ``text`` is changed and
    returned."""
    plain = text.plain
    if _OPEN in plain or _BACKSLASH in plain:
        text.plain = plain.replace(_OPEN, "[").replace(_BACKSLASH, "\\")
    return text


def visible_log_line(line: bytes) -> bytes:
    """One log line (bytes, with or without its ``\\n``) with its control characters
    made visible as :func:`visible` does, tabs kept; bytes that are not UTF-8 shown as
    ``\\xNN``. Returns UTF-8 bytes."""
    end = b"\n" if line.endswith(b"\n") else b""
    body = line[: len(line) - len(end)].decode("utf-8", "backslashreplace")
    return _CONTROL_KEEP_TAB.sub(_picture, body).encode() + end


def plain_text(value: object, style: str = "") -> Text:
    """A Rich ``Text`` of :func:`visible` (never parsed as markup), with ``style``."""
    return Text(visible(value), style=style)


STATE_STYLE = {
    "succeeded": "green",
    "running": "cyan",
    "scheduled": "cyan",
    "queued": "yellow",
    "submitted": "yellow",
    "preempted": "magenta",
    "failed": "red",
    "stopped": "dim",
    "ready": "green",
    "cordoned": "yellow",
    "draining": "yellow",
    "lost": "red",
}


def styled(state: Any) -> Text:
    """A job, task or node state as a coloured ``Text`` (plain text if unknown)."""
    s = str(state or "")
    return plain_text(s, STATE_STYLE.get(s, ""))


def markup_state(state: Any) -> str:
    """:func:`styled` as markup, for a ``console.print(f"...")`` line."""
    s = str(state or "")
    style = STATE_STYLE.get(s)
    return f"[{style}]{esc(s)}[/{style}]" if style else esc(s)


class Table(_RichTable):
    """``rich.table.Table`` whose ``str`` cells and title are plain text (never markup):
    the table for every CLI command (see the module doc).

    It never loses a character at any width (issue 34, item 8): every column folds a word
    too long for it onto the next line (Rich's default cuts it with "…"), and a column's
    ``min_width`` yields when honouring it would make the table wider than the terminal
    (Rich measures the columns again after shrinking them, clamps them back to their
    ``min_width``, and the console then cuts every line at the right edge).
    """

    def __init__(self, *headers: str, **kwargs: Any) -> None:
        title = kwargs.get("title")
        if isinstance(title, str):
            kwargs["title"] = plain_text(title)
        super().__init__(*headers, **kwargs)
        for column in self.columns:
            column.overflow = "fold"

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        """As Rich's, with ``overflow="fold"`` unless given."""
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)

    def _calculate_column_widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        widths = super()._calculate_column_widths(console, options)
        if sum(widths) <= options.max_width - self._extra_width:
            return widths
        kept = [column.min_width for column in self.columns]
        for column in self.columns:  # wider than the terminal: the minimums yield
            column.min_width = None
        try:
            return super()._calculate_column_widths(console, options)
        finally:
            for column, min_width in zip(self.columns, kept, strict=True):
                column.min_width = min_width

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        """As Rich's, with every ``str`` cell shown as the characters it is."""
        cells = [plain_text(c) if isinstance(c, str) else c for c in renderables]
        super().add_row(*cells, **kwargs)
