"""The ``pasture job`` command group, and the "did you mean" hint its commands share.

The commands register themselves on :data:`app` from :mod:`scheduler.cli.jobsubmit`
(submit), :mod:`scheduler.cli.jobreads` (list, show, logs, exec), :mod:`scheduler.cli.jobs`
(stop, delete) and :mod:`scheduler.cli.jobspec` (validate, resubmit); a module of its own so
that none imports another for it. Each module is imported when one of its commands is
first named (:class:`JobCommands`, :mod:`scheduler.cli.lazy`): ``pasture job list`` loads
jobreads only.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator
from typing import Any

import typer

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.lazy import LazyGroup

ORDER = ("submit", "list", "show", "logs", "exec", "stop", "delete", "validate", "resubmit")
"""``pasture job --help`` lists its commands in this order (submit, reading, control, the
spec helpers), then any other in the order registered, whichever module imports first."""


class JobCommands(LazyGroup):
    """The ``job`` group's click class: each command imported with its module on first
    use; listed in :data:`ORDER`."""

    # the module that registers each command on :data:`app` when imported (None), or
    # that has the function registered here; "load all" imports them in this order
    lazy = {
        "list": ("scheduler.cli.jobreads", None),
        "show": ("scheduler.cli.jobreads", None),
        "logs": ("scheduler.cli.jobreads", None),
        "exec": ("scheduler.cli.jobreads", None),
        "stop": ("scheduler.cli.jobs", None),
        "delete": ("scheduler.cli.jobs", None),
        "validate": ("scheduler.cli.jobspec", None),
        "resubmit": ("scheduler.cli.jobspec", None),
        "submit": ("scheduler.cli.jobsubmit", None),
        "top": ("scheduler.cli.usage", "top"),
    }

    def list_commands(self, ctx: Any) -> list[str]:  # Typer's vendored click Context
        names = super().list_commands(ctx)
        rank = {n: i for i, n in enumerate(ORDER)}
        return sorted(names, key=lambda n: (rank.get(n, len(ORDER)), names.index(n)))


app = typer.Typer(help="Submit, watch and stop jobs.", no_args_is_help=True, cls=JobCommands)
JobCommands.app = app


def similar_jobs(client: ApiClient, name: str, limit: int = 1000) -> list[str]:
    """Up to 3 visible job names close to ``name`` (difflib ratio >= 0.6), best first."""
    try:
        page = client.jobs(limit=limit)
    except ApiError:
        return []
    names = [j.name for j in page.items]
    return difflib.get_close_matches(name, names, n=3, cutoff=0.6)


@contextlib.contextmanager
def job_hint(client: ApiClient, name: str) -> Iterator[None]:
    """Re-raise a 404 about job ``name`` with "did you mean: ..." when the job does not
    exist and similar names do (a 404 about something else, e.g. a log, passes as is)."""
    try:
        yield
    except ApiError as exc:
        if exc.status != 404:
            raise
        try:
            client.job(name)
        except ApiError as again:
            if again.status != 404:
                raise exc from None
            close = similar_jobs(client, name)
            if close:
                hint = f"{exc.message}; did you mean: {', '.join(close)}?"
                raise ApiError(exc.status, hint, exc.errors) from None
        raise
