"""The one field codec and the one event builder of the store.

Redis hashes hold strings: :func:`encode` turns a record field into one (None -> "", dicts
and lists -> JSON, everything else -> ``str``) and :func:`as_float` / :func:`as_int` /
:func:`as_json` read them back ("" -> None). :func:`event` is the JSON of one entry of a
job's event list ``job:<job>:events``; the Lua commit script (``lua.COMMIT``) builds the
same shape in Lua for the events it appends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def encode(value: Any) -> str:
    """One hash field: None -> "", dict / list -> JSON, else ``str(value)``."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def encode_fields(fields: Mapping[str, Any]) -> dict[str, str]:
    """Every field of ``fields`` through :func:`encode` (a mapping for ``HSET``)."""
    return {key: encode(value) for key, value in fields.items()}


def as_float(v: str | None) -> float | None:
    """A float field; None when absent or ""."""
    return None if v in (None, "") else float(v)


def as_int(v: str | None) -> int | None:
    """An int field; None when absent or ""."""
    return None if v in (None, "") else int(v)


def as_json(v: str | None) -> Any:
    """A JSON field; None when absent or ""."""
    return None if v in (None, "") else json.loads(v)


def event(time: float, state: str, attempt: int | str, reason: str) -> str:
    """One job event: ``{"time" (s), "state", "attempt", "reason"}`` as JSON."""
    return json.dumps({"time": time, "state": state, "attempt": int(attempt), "reason": reason})
