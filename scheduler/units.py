"""One formatter per unit, for everything people read (CLI tables, messages).

- bytes -> binary units with one decimal: ``format_bytes(24684084 * 1024) == "23.5Gi"``,
  ``format_bytes(512 * 2**20) == "512Mi"`` (a whole number of a unit drops the decimal),
  ``format_bytes(900) == "900"`` (bytes, no suffix). The suffixes are the ones a spec accepts
  (``scheduler.spec.quantity.parse_memory``), so a printed figure can be pasted back.
- millicores -> cores: ``format_millicores(2000) == "2"``, ``format_millicores(500) ==
  "500m"``, ``format_millicores(2500) == "2.5"``.
- seconds -> a duration: ``format_duration(45) == "45s"``, ``format_duration(200) ==
  "3m20s"``, ``format_duration(7500) == "2h5m"``, ``format_duration(200000) == "2d7h"``
  (two most significant units, as kubectl prints ages).

``exact=True`` (bytes, millicores) gives the lossless form a spec stores instead:
``format_bytes(1536 * 2**20, exact=True) == "1536Mi"``, ``format_millicores(2500,
exact=True) == "2500m"`` (:func:`scheduler.spec.quantity.format_memory` / ``format_cpu``
are these).

Every part of pasture formats through here: the CLI, the dashboard, the core's pending
reasons, the spec's fit messages and serialiser, the diagnosis texts. Pure functions of
their arguments; no I/O, no imports (the core may use them). Negative or missing values
are the callers' to handle (they print ``-``).
"""

from __future__ import annotations

_BINARY = (("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def format_bytes(n_bytes: float, exact: bool = False) -> str:
    """Bytes -> the largest binary unit (Ki..Pi) the value reaches, one decimal at most;
    under 1Ki, the number of bytes. ``exact``: the largest unit that divides the (whole)
    number of bytes, else the byte count, so that parsing it back gives the same bytes."""
    if exact:
        whole = int(n_bytes)
        for suffix, size in _BINARY:
            if whole and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    sign = "-" if n_bytes < 0 else ""
    n = abs(n_bytes)
    for suffix, size in _BINARY:
        if n >= size:
            value = round(n / size, 1)
            text = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
            return f"{sign}{text}{suffix}"
    return f"{sign}{n:.0f}"


def format_millicores(millicores: float, exact: bool = False) -> str:
    """Millicores -> cores ('2', '2.5') or, under one core, millicores ('500m').
    ``exact``: whole cores ('2') or millicores ('2500m'), never rounded."""
    m = int(round(millicores))
    if exact:
        return str(m // 1000) if m % 1000 == 0 else f"{m}m"
    if abs(m) < 1000 and m != 0:
        return f"{m}m"
    return f"{m / 1000:g}"


def format_gpu_hours(hours: float) -> str:
    """GPU-hours for a report: two decimals (``12.35``), and two significant digits below
    0.01 (``0.0056``: a few GPU-seconds are not shown as nothing); ``0.00`` for zero."""
    if 0 < abs(hours) < 0.01:
        return f"{hours:.2g}"
    return f"{hours:.2f}"


def format_duration(seconds: float) -> str:
    """Seconds -> '45s', '3m20s', '2h5m', '2d7h' (the two largest units)."""
    s = max(int(seconds), 0)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    return f"{s}s"


def format_resources(
    cpu_m: float | None, memory: float | None, gpu: float | None, every: bool = False
) -> str:
    """``(millicores, bytes, devices)`` -> '2 cpu, 23.5Gi, 1 gpu' (None parts and 0 GPUs
    left out). ``every``: 0 GPUs shown too, and memory under 1Ki with its unit
    ('0 cpu, 0B, 0 gpu': a node's capacity, allocated and free, where 0 is news)."""
    parts = []
    if cpu_m is not None:
        parts.append(f"{format_millicores(cpu_m)} cpu")
    if memory is not None:
        text = format_bytes(memory)
        parts.append(f"{text}B" if every and abs(memory) < 1024 else text)
    if gpu or (every and gpu is not None):
        parts.append(f"{gpu:g} gpu")
    return ", ".join(parts)
