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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.cli.client import ApiClient

TIMEOUT_S = 1.5  # the longest a <TAB> waits for the API, seconds
LIMIT = 1000  # jobs read for completion (newest first)


def _names(read: Callable[[ApiClient], list[str]], incomplete: str) -> list[str]:
    try:
        from scheduler.cli.client import ApiClient
        from scheduler.cli.config import load

        client = ApiClient(load(), timeout=TIMEOUT_S)
        try:
            names = read(client)
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - a completion fails silent, whatever went wrong
        return []
    return sorted(n for n in set(names) if n.startswith(incomplete))


def complete_jobs(incomplete: str) -> list[str]:
    """Names of visible jobs (the newest :data:`LIMIT`) starting with ``incomplete``."""
    return _names(lambda c: [j.name for j in c.jobs(limit=LIMIT).items], incomplete)


def complete_nodes(incomplete: str) -> list[str]:
    """Node names starting with ``incomplete``."""
    return _names(lambda c: [n.name for n in c.nodes()], incomplete)


def complete_vcs(incomplete: str) -> list[str]:
    """VC names starting with ``incomplete``."""
    return _names(lambda c: [v.name for v in c.vcs()], incomplete)


def complete_users(incomplete: str) -> list[str]:
    """Submitters (token names) of the visible jobs (the newest :data:`LIMIT`) starting
    with ``incomplete``: the values ``--user`` takes."""
    return _names(lambda c: [j.user for j in c.jobs(limit=LIMIT).items], incomplete)


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
