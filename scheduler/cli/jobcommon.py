"""What the ``pasture job`` commands share: the job-name arguments, ``--state``'s check and
the API client from the login file."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from scheduler.cli.client import ApiClient
from scheduler.cli.complete import complete_jobs
from scheduler.cli.config import load
from scheduler.states import JobState

if TYPE_CHECKING:
    pass


JobArg = typer.Argument(..., help="job name", autocompletion=complete_jobs)
JobsArg = typer.Argument(None, help="job names", autocompletion=complete_jobs, show_default=False)


def job_state(value: str | None) -> str | None:
    """``--state``: a job state, checked before any request (the API's 422 showed no
    given value).

    Raises:
        typer.BadParameter: not a job state (names the expected ones and the given).
    """
    if value is None or value in {s.value for s in JobState}:
        return value
    expected = ", ".join(s.value for s in JobState)
    raise typer.BadParameter(f"expected one of {expected}; got {value!r}", param_hint="--state")


def api_client() -> ApiClient:
    """The API client of the current login or context (:func:`scheduler.cli.config.load`)."""
    return ApiClient(load())
