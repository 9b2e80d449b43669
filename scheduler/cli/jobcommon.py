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


JobArg = typer.Argument(
    ..., help="job name (NAME.VC names the job of VC VC)", autocompletion=complete_jobs
)
JobVcOpt = typer.Option(
    None, "--vc", help="the job's VC, when you have jobs of that name in several VCs"
)


def job_ref(name: str, vc: str | None) -> str:
    """What the API's ``/jobs/{name}`` takes for job ``name`` of ``vc``: ``<name>.<vc>``
    (:func:`scheduler.jobref.qualified_name`'s form), or ``name`` as given when no VC is
    (the API then finds it among the caller's VCs)."""
    return name if vc is None else f"{name}.{vc}"


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
