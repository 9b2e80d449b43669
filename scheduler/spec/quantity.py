"""Parse resource quantities: CPU to millicores, memory to bytes.

Accepted forms (Kubernetes quantity notation, which OpenPAI and Volcano users know):

cpu     ``2`` / ``2.5`` / ``"2"`` cores, ``"500m"`` millicores
memory  an int is bytes; suffixes ``K M G T P`` are powers of 1000, ``Ki Mi Gi Ti Pi`` powers
        of 1024 (``"4096M"`` = 4,096,000,000 bytes, ``"4Gi"`` = 4,294,967,296 bytes); a
        lowercase ``k`` is accepted as 1000. ``mib=True`` (MARO files) reads a bare number or
        a lowercase ``m`` suffix as MiB, as MARO does.

Errors: :class:`QuantityError` (a ``ValueError``) saying what was expected and what was given.
"""

from __future__ import annotations

import math
import re

from scheduler.units import format_bytes, format_millicores

_MEMORY_SUFFIX = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


# Any number above this is a typo (and 1e308 * 1000 is infinite: round() would raise).
_MAX_NUMBER = 1e18


class QuantityError(ValueError):
    """A quantity could not be parsed (message names expected forms and the given value)."""


def _split(value: object, what: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise QuantityError(f"{what}: expected a number or a quantity string, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise QuantityError(f"{what}: expected a finite number, got {value!r}")
        if value > _MAX_NUMBER:
            raise QuantityError(f"{what}: expected at most {_MAX_NUMBER:.0e}, got {value!r}")
        if value < 0:
            raise QuantityError(f"{what}: must not be negative, got {value!r}")
        return float(value), ""
    if not isinstance(value, str):
        raise QuantityError(f"{what}: expected a number or a quantity string, got {value!r}")
    if value.strip().startswith("-"):
        raise QuantityError(f"{what}: must not be negative, got {value!r}")
    m = _NUMBER.match(value)
    if not m:
        raise QuantityError(f"{what}: expected a quantity like '2', '500m', '4Gi', got {value!r}")
    if len(m.group(1)) > 24 or float(m.group(1)) > _MAX_NUMBER:
        raise QuantityError(f"{what}: expected at most {_MAX_NUMBER:.0e}, got {value!r}")
    return float(m.group(1)), m.group(2)


def parse_cpu(value: object) -> int:
    """CPU quantity -> millicores (int). ``2`` -> 2000, ``"500m"`` -> 500, ``0.5`` -> 500.

    Raises QuantityError for negative values, unknown suffixes and non-numbers.
    """
    number, suffix = _split(value, "cpu")
    if suffix == "":
        return round(number * 1000)
    if suffix == "m":
        return round(number)
    raise QuantityError(
        f"cpu: unknown unit {suffix!r} in {value!r}; expected cores ('2') or millicores ('500m')"
    )


def parse_memory(value: object, *, mib: bool = False) -> int:
    """Memory quantity -> bytes (int). ``"4Gi"`` -> 4294967296, ``"4096M"`` -> 4096000000.

    With ``mib=True`` a bare number and the suffixes ``m``/``M`` mean MiB (MARO's notation).
    Raises QuantityError for negative values, unknown suffixes and non-numbers.
    """
    number, suffix = _split(value, "memory")
    if mib and suffix in ("", "m", "M", "mb", "MB"):
        return round(number * 2**20)
    if suffix == "m":
        raise QuantityError(
            f"memory: unit 'm' (milli) makes no sense for memory in {value!r}; "
            "use 'M' (10^6) or 'Mi' (2^20)"
        )
    if suffix not in _MEMORY_SUFFIX:
        raise QuantityError(
            f"memory: unknown unit {suffix!r} in {value!r}; expected one of "
            "K M G T P Ki Mi Gi Ti Pi or a number of bytes"
        )
    return round(number * _MEMORY_SUFFIX[suffix])


def format_cpu(millicores: int) -> str:
    """Millicores -> '2' or '500m' (inverse of :func:`parse_cpu`;
    :func:`scheduler.units.format_millicores` with ``exact``)."""
    return format_millicores(millicores, exact=True)


def format_memory(n_bytes: int) -> str:
    """Bytes -> the largest exact binary unit ('4Gi', '512Mi') or a byte count (inverse
    of :func:`parse_memory`; :func:`scheduler.units.format_bytes` with ``exact``)."""
    return format_bytes(n_bytes, exact=True)
