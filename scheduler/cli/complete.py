"""Shell completion of job, node, VC and user names from the API, and of context names
and job states without it (Typer autocompletion).

Each function is a Typer ``autocompletion`` callback: it gets the word typed so far and
returns the visible names that start with it. The API ones ask the API of the effective
context (:func:`scheduler.cli.config.load`: a ``--context NAME`` earlier on the command
line counts, as ``pasture --context prod job show <TAB>`` must list prod's jobs) with a
short timeout (:data:`TIMEOUT_S`), and fail silent: no configuration, an unreachable API
or any error gives no candidates, never a message (a completion must not print into the
user's command line). Install with ``pasture --install-completion`` (bash, zsh, fish,
PowerShell).

A <TAB> is a fresh ``pasture`` process that needs a list of names, so it asks with the
standard library's HTTP client (``urllib.request``: the same endpoint, token, proxy
settings and TLS trust as :class:`scheduler.cli.client.ApiClient`, whose httpx and
response models would cost ~0.1 s of each <TAB>), and the root group imports only the
commands on the way to the one completed (:mod:`scheduler.cli.lazy`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.cli.config import ClientConfig

TIMEOUT_S = 1.5  # the longest a <TAB> waits for the API, seconds
LIMIT = 1000  # jobs read for completion (newest first)


def get_json(config: ClientConfig, path: str, timeout: float = TIMEOUT_S) -> Any:
    """``GET endpoint + path`` (path with its query) with the bearer token: the decoded
    JSON answer.

    With :func:`scheduler.cli.transport.send`, as :class:`scheduler.cli.client.ApiClient`
    sends its requests (TLS trust, proxies, timeout).

    Raises:
        OSError: the API cannot be reached, timed out or answered 4xx/5xx (the
            :class:`scheduler.cli.transport.ApiError`'s message).
        ValueError: the answer is not JSON.
    """
    import json

    from scheduler.cli import transport

    try:
        _, _, body = transport.send(config, "GET", path, timeout=timeout)
    except transport.ApiError as exc:
        raise OSError(exc.message) from None
    return json.loads(body)


def _names(path: str, records: Callable[[Any], Any], incomplete: str) -> list[str]:
    """The names in ``records(<the JSON answer to GET path>)`` (a list of objects with a
    ``name``) that start with ``incomplete``, sorted; [] on any error."""
    try:
        from scheduler.cli.config import load

        names = _name_list(records(get_json(load(), path)))
    except Exception:  # noqa: BLE001 - a completion fails silent, whatever went wrong
        return []
    return sorted(n for n in set(names) if n.startswith(incomplete))


def _name_list(records: Any) -> list[str]:
    """The ``name`` of each record of a JSON list (records without a text name skipped)."""
    if not isinstance(records, list):
        return []
    return [r["name"] for r in records if isinstance(r, dict) and isinstance(r.get("name"), str)]


def complete_jobs(incomplete: str) -> list[str]:
    """Names of visible jobs (the newest :data:`LIMIT`) starting with ``incomplete``."""
    return _names(
        f"/api/v1/jobs?limit={LIMIT}",
        lambda page: page.get("items") if isinstance(page, dict) else None,
        incomplete,
    )


def complete_nodes(incomplete: str) -> list[str]:
    """Node names starting with ``incomplete``."""
    return _names("/api/v1/nodes", lambda nodes: nodes, incomplete)


def complete_vcs(incomplete: str) -> list[str]:
    """VC names starting with ``incomplete``."""
    return _names("/api/v1/vcs", lambda vcs: vcs, incomplete)


def complete_users(incomplete: str) -> list[str]:
    """Submitters (token names) of the visible jobs (the newest :data:`LIMIT`) starting
    with ``incomplete``: the values ``--user`` takes."""
    return _names(
        f"/api/v1/jobs?limit={LIMIT}",
        lambda page: [
            {"name": j.get("user")}
            for j in (page.get("items") or [] if isinstance(page, dict) else [])
            if isinstance(j, dict)
        ],
        incomplete,
    )


def complete_states(incomplete: str) -> list[str]:
    """Job states (:class:`scheduler.states.JobState`) starting with ``incomplete``."""
    from scheduler.states import JobState

    return [s.value for s in JobState if s.value.startswith(incomplete)]


def complete_contexts(incomplete: str) -> list[str]:
    """Context names of the login file starting with ``incomplete`` (no API asked)."""
    try:
        from scheduler.cli.config import contexts

        _, known = contexts()
    except Exception:  # noqa: BLE001 - a completion fails silent
        return []
    return sorted(n for n in known if n.startswith(incomplete))
