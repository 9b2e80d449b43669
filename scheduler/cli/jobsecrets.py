"""Secret values given at submit, outside the job file: ``--secret NAME=VALUE`` and
``--secrets-file FILE`` of ``pasture job submit`` and ``pasture job resubmit``.

The job declares its secrets by name (``secrets: [TOKEN]`` in a pasture spec, or the
``secrets`` mapping of an OpenPAI v2 file); the values given here fill them and are sent
once, in the submit request's body, to the API, which seals them (docs/api.md, "Job
secrets"). A name the job does not declare is refused here, before anything is sent.
The CLI never prints a value; ``job resubmit`` cannot re-send values it never had in
clear: give them again with these options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

SecretOpt = typer.Option(
    None,
    "--secret",
    help="NAME=VALUE for a secret the job declares (repeatable; tasks see "
    "$PASTURE_SECRET_NAME; the value is sealed, never stored or shown in clear)",
)
SecretsFileOpt = typer.Option(
    None,
    "--secrets-file",
    exists=True,
    dir_okay=False,
    help="file of NAME=VALUE lines (# comments; the value is the rest of the line, verbatim)",
)


def read_secrets(pairs: list[str] | None, path: Path | None) -> dict[str, str]:
    """The values of ``--secrets-file`` lines, then ``--secret`` pairs (which win).

    Raises:
        typer.BadParameter: an item without ``NAME=`` (the message names the line or the
            option, never a value).
    """
    values: dict[str, str] = {}
    items = []
    if path is not None:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                items.append((line, f"--secrets-file line {n}"))
    items += [(p, "--secret") for p in pairs or []]
    for item, where in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter("expected NAME=VALUE", param_hint=where)
        values[name.strip()] = value
    return values


def attach(body: dict[str, Any], known: dict[str, str], given: dict[str, str]) -> dict[str, Any]:
    """``body`` (a pasture-format spec dict, ``secrets`` a list of names) with ``secrets``
    as the mapping the API takes: each declared name -> its value from ``given``, else
    ``known`` (the file's own), else None (the API then refuses it by name).

    Raises:
        typer.BadParameter: a given name the job does not declare.
    """
    declared = list(body.get("secrets") or [])
    undeclared = sorted(set(given) - set(declared))
    if undeclared:
        raise typer.BadParameter(
            f"{undeclared} not declared in the job's secrets (declared: {declared}); "
            "list the name under `secrets:` in the job file",
            param_hint="--secret",
        )
    if declared:
        body = {**body, "secrets": {n: given.get(n, known.get(n)) for n in declared}}
    return body
