"""Job secrets in a spec: names only in the stored spec, values split off at parse time.

A job declares its secrets in ``secrets``: a mapping NAME -> VALUE (OpenPAI protocol v2's
``secrets`` section, or pasture's own spec), or a list of NAMEs whose values are given at
submit (``pasture job submit --secret NAME=VALUE`` / ``--secrets-file FILE``, which turn
the list into a mapping before sending). :func:`split_secrets` replaces the mapping by the
sorted list of names (what :class:`scheduler.spec.JobSpec` stores) and returns the values
apart; the API seals them (:mod:`scheduler.sealed`) and the agent gives each task its
values as ``PASTURE_SECRET_<NAME>`` environment variables at start-up, nowhere else.

An OpenPAI ``<% $secrets.NAME %>`` reference in a command becomes the shell reference
``${PASTURE_SECRET_NAME}`` (:func:`shell_ref`), so the command text never holds the value.

No error raised here ever carries a value: ``input`` is the name or None.
"""

from __future__ import annotations

import re
from typing import Any

from scheduler.spec.errors import SpecError

NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"
"""A secret's name: a C identifier of at most 63 characters (OpenPAI's secret pattern)."""
ENV_PREFIX = "PASTURE_SECRET_"
"""A task sees secret NAME as the environment variable ``PASTURE_SECRET_<NAME>``."""
MAX_SECRETS = 64
MAX_VALUE_BYTES = 64 * 1024
REF = re.compile(r"<%\s*\$secrets\.([A-Za-z0-9_]+)\s*%>")
"""An OpenPAI secret reference ``<% $secrets.NAME %>`` (group 1: the name)."""

_NAME = re.compile(NAME_RE)


def env_name(name: str) -> str:
    """The environment variable that holds secret ``name`` in a task."""
    return ENV_PREFIX + name


def shell_ref(name: str) -> str:
    """The shell reference that stands for secret ``name`` in a command."""
    return "${" + env_name(name) + "}"


def check_name(name: object, loc: str) -> str:
    """``name`` if it is a valid secret name. Raises SpecError at ``loc``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpecError.one(
            loc, "expected a secret name of [A-Za-z0-9_] starting with a letter or _ (<= 63)", name
        )
    return name


def check_value(value: object, loc: str) -> str:
    """``value`` if it can be a secret's value (a string, or a number, on one line, at most
    64 KiB). Raises SpecError at ``loc`` without echoing the value."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SpecError.one(loc, f"expected a string value, got {type(value).__name__}")
    text = str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        raise SpecError.one(
            loc, "a secret value is one line without NUL; base64-encode multi-line values"
        )
    if len(text.encode()) > MAX_VALUE_BYTES:
        raise SpecError.one(loc, f"a secret value is at most {MAX_VALUE_BYTES} bytes")
    return text


def split_secrets(
    doc: dict[str, Any], prefix: str = "", *, require_values: bool = True
) -> tuple[dict[str, Any], dict[str, str]]:
    """Split a pasture-shaped spec dict's ``secrets`` into names and values.

    Args:
        doc: the spec dict (not changed).
        prefix: put before ``secrets`` in error locations (``"(translated) "``).
        require_values: refuse a declared name without a value (the API); False lets the
            CLI read a file whose values come with ``--secret``.

    Returns:
        (a copy of ``doc`` whose ``secrets`` is the sorted list of names, {name: value}).

    Raises:
        SpecError: not a mapping/list, a bad name, over 64 secrets, a bad value, or (with
            ``require_values``) a name without a value ("give it with --secret NAME=VALUE").
    """
    raw = doc.get("secrets")
    if raw is None:
        return doc, {}
    loc = f"{prefix}secrets"
    if isinstance(raw, list):
        raw = dict.fromkeys(raw)
    elif not isinstance(raw, dict):
        raise SpecError.one(loc, f"expected a mapping NAME: VALUE, got {type(raw).__name__}")
    if len(raw) > MAX_SECRETS:
        raise SpecError.one(loc, f"at most {MAX_SECRETS} secrets, got {len(raw)}")
    values: dict[str, str] = {}
    for name, value in raw.items():
        check_name(name, f"{loc}.{name}")
        if value is not None:
            values[name] = check_value(value, f"{loc}.{name}")
        elif require_values:
            raise SpecError.one(
                f"{loc}.{name}",
                "declared without a value; give it at submit with `pasture job submit "
                "--secret NAME=VALUE` (or --secrets-file FILE)",
                name,
            )
    return {**doc, "secrets": sorted(raw)}, values


def find_ref(
    value: object, loc: str, allowed: frozenset[str] = frozenset()
) -> tuple[str, str] | None:
    """The first secret reference in ``value`` (walked recursively) outside the dotted
    locations in ``allowed`` (and below them): (its location, the secret's name), or None."""
    if loc in allowed:
        return None
    if isinstance(value, str):
        m = REF.search(value)
        return (loc, m.group(1)) if m else None
    if isinstance(value, dict):
        children = [(f"{loc}.{k}" if loc else str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        children = [(f"{loc}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    for where, child in children:
        found = find_ref(child, where, allowed)
        if found:
            return found
    return None


def refuse_pasture_refs(doc: dict[str, Any]) -> None:
    """A pasture spec reads a secret from ``$PASTURE_SECRET_<NAME>``; refuse OpenPAI's
    ``<% $secrets.x %>`` anywhere in it (it would stay literal text). Raises SpecError."""
    found = find_ref(doc, "", frozenset({"secrets"}))
    if found:
        raise SpecError.one(
            found[0],
            f"<% $secrets.{found[1]} %> is OpenPAI v2 syntax; in a pasture spec write "
            f'"${env_name(found[1])}" in a command (and list {found[1]} under secrets)',
            found[1],
        )
