"""``pasture job submit FILE FILE...``: many job specs in one batch request."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.cli.output import console, err_console, print_json
from scheduler.cli.text import esc

if TYPE_CHECKING:
    from scheduler.api.schemas import BatchOut

MAX_FILES = 500  # the API's MAX_BATCH_JOBS


def submit_files(client: Any, files: list[Path], as_json: bool) -> int:
    """Parse ``files`` (YAML or JSON, the spec's bounded parser) and submit them in one
    ``POST /api/v1/jobs:batch``. Prints one line per file (or the answer as JSON).

    Returns the exit code: 0 when every file was stored, 1 otherwise.
    Raises ValueError for more than MAX_FILES files or a file that does not parse."""
    from scheduler.spec.bounded import load_document

    if len(files) > MAX_FILES:
        raise ValueError(f"at most {MAX_FILES} files in one submit, got {len(files)}")
    documents = []
    for f in files:
        try:
            documents.append(load_document(f.read_bytes(), as_json=f.suffix.lower() == ".json"))
        except ValueError as exc:
            raise ValueError(f"{f}: {exc}") from None
    return report(client.submit_batch(documents), [str(f) for f in files], as_json)


def report(answer: BatchOut, labels: Sequence[str], as_json: bool) -> int:
    """Print a batch answer: one line per document (``submitted job NAME (LABEL)`` on
    stdout, ``refused (STATUS): LABEL: why`` and warnings on stderr), or the answer as JSON.
    ``labels`` name the documents in the order they were sent (a file, a sweep's values).

    Returns the exit code: 0 when every document was stored, 1 otherwise."""
    if as_json:
        print_json(answer)
    for label, item in zip(labels, answer.items, strict=True):
        if as_json:
            continue
        label = esc(label)
        if item.status == 201:
            console.print(f"submitted job [bold]{esc(', '.join(item.names))}[/bold] ({label})")
            for warning in item.warnings:
                err_console.print(f"[yellow]warning:[/yellow] {label}: {esc(warning)}")
        else:
            detail = item.detail
            if isinstance(detail, list):
                detail = "; ".join(
                    f"{'.'.join(map(str, d.get('loc', []))) or '(top)'}: {d.get('msg')}"
                    for d in detail[:5]
                )
            err_console.print(f"[red]refused ({item.status}):[/red] {label}: {esc(detail)}")
    return 0 if answer.failed == 0 else 1
