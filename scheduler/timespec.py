"""Points in time as users write them (``pasture usage --since``, the dashboard's GPU-hours
page): ``<n><s|m|h|d|w>`` (that long before now), Unix seconds, or ISO 8601 (UTC unless
it names a zone). Stdlib only, so the CLI and the API share it without loading the other.
"""

from __future__ import annotations

import datetime as dt
import re

DEFAULT_USAGE_SINCE = "7d"
"""The one default start of a usage report (``pasture usage --since``, the dashboard's
GPU-hours page): a week before now."""

LATEST_TIME_S = dt.datetime(dt.MAXYEAR, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()
"""The latest time a report can name (Unix seconds, the last whole second of year 9999:
Python's ``datetime.MAXYEAR``); a later one cannot be printed as a date, so the API
refuses it (422 naming the field)."""

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, now: float, what: str = "time") -> float:
    """``text`` as Unix seconds (``now``: the reference for durations, s), a time from
    1970 to the end of year 9999 (:data:`LATEST_TIME_S`).

    Raises:
        ValueError: none of the forms, or a time outside those years (``nan``, ``inf``,
            ``1e300``, ``99999w``); the message names ``what``, the forms and the text.
    """
    t = text.strip()
    m = _AGO.match(t)
    if m:
        return _in_range(now - float(m.group(1)) * _UNIT_S[m.group(2)], what, text)
    try:
        seconds = float(t)
    except ValueError:
        pass
    else:
        return _in_range(seconds, what, text)
    try:
        d = dt.datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(
            f"{what}: expected a duration ago (2h, 30m, 7d), an ISO date or time "
            f"(2026-11-26, 2026-11-26T10:00) or Unix seconds, got {text!r}"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return _in_range(d.timestamp(), what, text)


def _in_range(seconds: float, what: str, text: str) -> float:
    if not 0.0 <= seconds <= LATEST_TIME_S:  # also refuses nan
        raise ValueError(f"{what}: expected a time from 1970 to the end of 9999, got {text!r}")
    return seconds
