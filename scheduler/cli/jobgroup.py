"""The ``pasture job`` command group, and the "did you mean" hint its commands share.

The commands register themselves on :data:`app` from :mod:`scheduler.cli.jobs` (submit, list,
show, logs, stop, delete...) and :mod:`scheduler.cli.jobspec` (validate, resubmit); a module
of its own so that neither imports the other for it.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator

import typer

from scheduler.cli.client import ApiClient, ApiError

app = typer.Typer(help="Submit, watch and stop jobs.", no_args_is_help=True)


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
