"""Rich output helpers and the CLI's exit codes.

Exit codes (scripts can rely on them; documented in docs/cli.md):

=====  ==========================================================================
0      success (with ``--wait``: the job succeeded)
1      the job ended but did not succeed (failed or stopped), or a local failure
2      usage error (bad option; Typer's own code)
3      not configured: no endpoint/token (run ``pasture login`` or ``pasture dev up``)
4      unauthorized or forbidden (401/403)
5      not found (404)
6      rejected input: malformed or invalid spec, conflict, too large (400/409/413/422)
7      the API cannot be reached or failed (connection error, 5xx)
=====  ==========================================================================
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.text import Text

from scheduler.cli.client import ApiError
from scheduler.cli.config import ConfigError
from scheduler.cli.text import Table, esc, restore, visible
from scheduler.cli.text import markup_state as markup_state  # re-exported
from scheduler.cli.text import styled as styled  # re-exported
from scheduler.units import format_bytes, format_duration, format_resources

OK, JOB_NOT_SUCCEEDED, USAGE, NOT_CONFIGURED, AUTH, NOT_FOUND, REJECTED, UNAVAILABLE = range(8)

# Width of the "page" when stdout is not a terminal: wide enough that no table cell is
# cut or wrapped, so `pasture node list | grep NAME` finds every name in full.
PIPE_WIDTH = 10_000


class _Console(Console):
    """A Rich console whose width is unbounded when its file is not a terminal (Rich
    would otherwise lay tables out for 80 columns and cut cells), and which shows the
    values put into markup with :func:`scheduler.cli.text.esc` as the characters they
    are."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Rich's, then :func:`scheduler.cli.text.restore` (after the markup is parsed)."""
        return restore(super().render_str(text, **kwargs))

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if not self.is_terminal:
            return ConsoleDimensions(PIPE_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        vars(Console)["size"].fset(self, new_size)  # rich's own setter


# emoji off: ":smile:" in a reason is text, not an emoji code (see scheduler.cli.text)
console = _Console(emoji=False)
err_console = _Console(stderr=True, emoji=False)


class OutputFormat(enum.StrEnum):
    """``-o/--output`` of list and show commands (kubectl's set)."""

    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"
    name = "name"


class PlainFormat(enum.StrEnum):
    """``-o/--output`` of commands that print one record or a short list (no wide/name)."""

    table = "table"
    json = "json"
    yaml = "yaml"


PlainOpt = typer.Option(
    PlainFormat.table, "--output", "-o", help="table | json | yaml (the data as it came)"
)


def emit_plain(data: Any, fmt: PlainFormat) -> bool:
    """:func:`emit` for a :class:`PlainFormat`: True when json/yaml was printed."""
    return emit(data, OutputFormat(fmt.value))


OutputOpt = typer.Option(
    OutputFormat.table,
    "--output",
    "-o",
    help="table | wide (more columns) | json | yaml (the API's data) | name (one per line)",
)
JsonOpt = typer.Option(False, "--json", help="same as -o json")


def output_format(output: OutputFormat, as_json: bool) -> OutputFormat:
    """The effective format: ``--json`` is kept as a synonym of ``-o json``."""
    return OutputFormat.json if as_json else output


def plain(data: Any) -> Any:
    """The JSON data of API models (pydantic, with the fields the API added), dataclasses,
    lists and dicts of them; an enum as its value (``TaskState.RUNNING`` -> "running", so
    YAML can dump it); inf as None; anything else as it is."""
    import dataclasses

    if hasattr(data, "model_dump"):
        return data.model_dump(mode="json")
    if isinstance(data, enum.Enum):
        return plain(data.value)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return {f.name: plain(getattr(data, f.name)) for f in dataclasses.fields(data)}
    if isinstance(data, list | tuple | set | frozenset):
        return [plain(d) for d in data]
    if isinstance(data, dict):
        return {str(plain(k)): plain(v) for k, v in data.items()}
    if isinstance(data, float) and data in (float("inf"), float("-inf")):
        return None
    return data


def emit(data: Any, fmt: OutputFormat, names: Iterable[str] = ()) -> bool:
    """Print ``data`` for the machine formats; True when done (json, yaml, name), False
    for table/wide (the caller draws its table).

    ``json`` and ``yaml`` print the API's data as it came (so it round-trips); ``name``
    prints ``names`` one per line.
    """
    if fmt is OutputFormat.json:
        print_json(data)
    elif fmt is OutputFormat.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(plain(data), sort_keys=False, allow_unicode=True))
    elif fmt is OutputFormat.name:
        for name in names:
            sys.stdout.write(f"{visible(name)}\n")
    else:
        return False
    sys.stdout.flush()
    return True


WatchOpt = typer.Option(
    False, "--watch", "-w", help="redraw every --interval seconds until Ctrl-C (like watch)"
)
IntervalOpt = typer.Option(2.0, "--interval", min=0.1, help="seconds between --watch redraws")


def watch(draw: Callable[[], None], enabled: bool, interval_s: float) -> None:
    """Run ``draw`` once, or with ``enabled`` every ``interval_s`` seconds until Ctrl-C
    (exit 0). On a terminal the screen is cleared before each draw; piped, each draw
    starts with a line ``--- <UTC time> ---`` (so a log of the output reads as frames).
    An API error ends the watch with its exit code (see :func:`handle_errors`).

    Ctrl-C between draws ends the watch at once; during a draw it ends it when the draw
    is done (a request is bounded by the client's timeout), and a second Ctrl-C then ends
    it at once. KeyboardInterrupt is raised only in this loop's own code, never inside
    the HTTP client, Rich or logging, where it can leave a lock held and the process
    hanging at exit (a watch ignored SIGINT for 30 s once in CI)."""
    import signal
    import time

    if not enabled:
        draw()
        return
    drawing = stop = False

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal stop
        if drawing and not stop:
            stop = True  # finish this draw, then end
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        while True:
            drawing = True
            if console.is_terminal:
                console.clear()
            else:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
                console.print(f"--- {stamp} UTC ---", highlight=False)
            draw()
            console.file.flush()
            drawing = False
            if stop:
                return
            time.sleep(interval_s)
    except KeyboardInterrupt:
        return
    finally:
        signal.signal(signal.SIGINT, previous)


def exit_code_for(status: int) -> int:
    """The exit code for an API status (0 = connection failed)."""
    if status in (401, 403):
        return AUTH
    if status == 404:
        return NOT_FOUND
    if status in (400, 409, 413, 422):
        return REJECTED
    return UNAVAILABLE


LOGIN_AGAIN = (
    "log in again: ask an admin for a new token (pasture admin token create) and run"
    " 'pasture login ENDPOINT' (or set PASTURE_TOKEN)"
)

P = ParamSpec("P")
R = TypeVar("R")


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn ConfigError / ApiError into a red message and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            err_console.print(f"[red]error:[/red] {esc(exc)}")
            raise typer.Exit(NOT_CONFIGURED) from None
        except ApiError as exc:
            status = exc.status or "connection"
            message = exc.message
            if exc.errors:  # the table below lists each problem: the summary would repeat them
                n = len(exc.errors)
                message = f"{message.partition(': ')[0]} ({n} problem{'s' if n > 1 else ''}):"
            err_console.print(f"[red]error ({status}):[/red] {esc(message)}")
            if exc.status == 401:
                err_console.print(esc(LOGIN_AGAIN))
            if exc.errors:
                table = Table("field", "problem", "given", box=None)
                for e in exc.errors:
                    loc = e.get("loc", [])
                    path = ".".join(map(str, loc)) if isinstance(loc, list) else str(loc)
                    given = "" if e.get("input") is None else json.dumps(e["input"], default=str)
                    table.add_row(path or "(document)", str(e.get("msg", "")), given[:60])
                err_console.print(table)
            raise typer.Exit(exit_code_for(exc.status)) from None

    return wrapper


def print_json(data: Any) -> None:
    """JSON of ``data`` (API models as their JSON): coloured on a terminal, plain
    ``json.dumps`` when piped."""
    text = json.dumps(plain(data), default=str, indent=2)
    if console.is_terminal:
        console.print_json(text)
    else:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def fmt_resources(r: Any, every: bool = False) -> str:
    """``{cpu_m, memory, gpu}`` (millicores, bytes, devices; a dict or an API model such
    as ``ResourcesOut``) -> '2 cpu, 4Gi, 1 gpu' (:func:`scheduler.units.format_resources`;
    ``every``: '0 cpu, 0B, 0 gpu', no part left out)."""
    if r is None:
        return ""
    if not isinstance(r, dict):
        r = plain(r)
    return format_resources(r.get("cpu_m"), r.get("memory"), r.get("gpu"), every=every)


def fmt_limit(r: Any) -> str:
    """A VC's ``max`` (``{cpu_m, memory, gpu}``; a zero or missing part means no cap on it)
    -> only the capped parts ('4 gpu'), or 'no cap' when none is capped."""
    if r is not None and not isinstance(r, dict):
        r = plain(r)
    r = r or {}
    capped = {k: r.get(k) or None for k in ("cpu_m", "memory", "gpu")}
    return format_resources(capped["cpu_m"], capped["memory"], capped["gpu"]) or "no cap"


def fmt_bytes(n: Any) -> str:
    """Bytes -> '23.5Gi' (:func:`scheduler.units.format_bytes`); '' when unknown."""
    return format_bytes(n) if isinstance(n, int | float) else ""


def fmt_age(t: Any, now: float) -> str:
    """Seconds since epoch time ``t`` as a duration ('3m20s'); '' when unknown."""
    return format_duration(now - t) if isinstance(t, int | float) and t > 0 else ""


def fmt_time(t: Any) -> str:
    """Epoch seconds or ISO text -> 'YYYY-mm-dd HH:MM:SS' (UTC)."""
    import datetime as dt

    if isinstance(t, int | float):
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if t is None else str(t)


@contextlib.contextmanager
def cli_hints() -> Iterator[None]:
    """Re-raise an API error whose hint names an API parameter (``force=true``) with the
    CLI flag instead (``--force``)."""
    try:
        yield
    except ApiError as exc:
        if "force=true" in exc.message:
            raise ApiError(
                exc.status, exc.message.replace("force=true", "--force"), exc.errors
            ) from None
        raise
