"""Trace readers: Philly job log, Alibaba openb pod list, and any CSV with the right columns.

Every reader returns a list of :class:`TraceJob` sorted by submit time. Rows a replay cannot
use (no GPUs, never ran) are counted in :class:`TraceStats`, never silently dropped; rows
that are malformed raise :class:`TraceError` naming the file, row, column, what was expected
and what was given.

Sources:
    Philly: ``philly_jobs.csv`` (Jeon et al., ATC'19; job-level form from the Sia SOSP'23
        artifact), columns ``timestamp,duration,num_gpus,gpu_time,cluster``.
    openb: ``openb_pod_list_default.csv`` (Alibaba clusterdata cluster-trace-gpu-v2023, used
        by Weng et al., "Beware of Fragmentation", ATC'23).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

TIME_FORMATS = ("seconds", "datetime")
COLUMN_KEYS = ("submit", "duration", "gpus", "vc", "cpu", "memory", "checkpoint", "name")
REQUIRED_COLUMNS = ("submit", "duration", "gpus")

PHILLY_COLUMNS = {
    "submit": "timestamp",
    "duration": "duration",
    "gpus": "num_gpus",
    "vc": "cluster",
}
DEFAULT_VC = "default"
MIB = 1024 * 1024


class TraceError(ValueError):
    """A trace file or its column mapping is unusable (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, as the simulator replays it.

    Attributes:
        name: unique id (the trace's own name, or ``job-<row>``).
        submit_s: submit time, seconds (epoch seconds for datetime traces).
        duration_s: run time on dedicated resources, seconds (> 0).
        gpus: GPUs the whole job uses (>= 1).
        vc: virtual cluster (tenant) the job is charged to.
        cpu_m: CPU of the whole job in millicores, None when the trace has none (synthesised
            later, see :mod:`scheduler.sim.cluster`).
        memory: memory of the whole job in bytes, None when the trace has none.
        checkpoint_s: checkpoint interval in seconds of run time, None when the job declares
            none (then a preemption costs only the restart cost).
    """

    name: str
    submit_s: float
    duration_s: float
    gpus: int
    vc: str = DEFAULT_VC
    cpu_m: int | None = None
    memory: int | None = None
    checkpoint_s: float | None = None


@dataclass(slots=True)
class TraceStats:
    """What a reader kept and what it left out (reported by the CLI)."""

    rows: int = 0
    kept: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def parse_columns(spec: str) -> dict[str, str]:
    """Parse ``submit=COL,duration=COL,gpus=COL[,vc=COL,cpu=COL,memory=COL,checkpoint=COL]``.

    ``cpu`` is in millicores, ``memory`` in MiB, ``checkpoint`` in seconds.

    Raises:
        TraceError: unknown key, missing ``=``, or a required key absent.
    """
    mapping: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, col = part.partition("=")
        key, col = key.strip(), col.strip()
        if not sep or not col:
            raise TraceError(f"--columns: expected KEY=COLUMN, got {part!r}")
        if key not in COLUMN_KEYS:
            raise TraceError(f"--columns: unknown key {key!r}; expected one of {COLUMN_KEYS}")
        mapping[key] = col
    missing = [k for k in REQUIRED_COLUMNS if k not in mapping]
    if missing:
        raise TraceError(f"--columns: missing {', '.join(missing)} (got {spec!r})")
    return mapping


def _parse_time(value: str, time_format: str) -> float:
    if time_format == "seconds":
        return float(value)
    text = value.strip().replace("T", " ").removesuffix("Z")
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _field(row: Mapping[str, str], col: str, where: str, kind: str, conv: Callable[[str], T]) -> T:
    raw = row.get(col)
    if raw is None:
        raise TraceError(f"{where}: column {col!r} is missing")
    try:
        return conv(raw)
    except (ValueError, OverflowError):
        raise TraceError(f"{where}: column {col!r} must be {kind}, got {raw!r}") from None


def read_csv(
    path: str | Path,
    columns: Mapping[str, str],
    time_format: str = "seconds",
    stats: TraceStats | None = None,
) -> list[TraceJob]:
    """Read any CSV with submit time, duration and GPU count columns.

    Args:
        path: the CSV file (header row required).
        columns: key -> column name, keys from :data:`COLUMN_KEYS` (see :func:`parse_columns`).
        time_format: "seconds" (a number) or "datetime" (ISO 8601 / ``YYYY-MM-DD HH:MM:SS``,
            naive times are UTC).
        stats: filled with what was kept and skipped.

    Returns:
        jobs sorted by (submit time, row), rows with fewer than 1 GPU or a non-positive
        duration skipped (counted in ``stats``).

    Raises:
        TraceError: file missing, header lacks a mapped column, a value does not parse.
    """
    if time_format not in TIME_FORMATS:
        raise TraceError(f"--time-format: expected one of {TIME_FORMATS}, got {time_format!r}")
    stats = stats if stats is not None else TraceStats()
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {str(path)!r} does not exist")
    jobs: list[TraceJob] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh, skipinitialspace=True)
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        absent = [c for c in columns.values() if c not in header]
        if absent:
            raise TraceError(f"{path}: columns {absent} not in header {header}")
        c = columns
        for i, row in enumerate(reader, start=2):
            stats.rows += 1
            where = f"{path.name} row {i}"
            submit = _field(
                row,
                c["submit"],
                where,
                f"a {time_format} time",
                lambda v: _parse_time(v, time_format),
            )
            duration = _field(row, c["duration"], where, "a number of seconds", float)
            gpus_f = _field(row, c["gpus"], where, "a GPU count", float)
            if not math.isfinite(duration) or not math.isfinite(submit):
                raise TraceError(f"{where}: submit and duration must be finite numbers")
            if gpus_f != int(gpus_f):
                raise TraceError(
                    f"{where}: column {c['gpus']!r} must be a whole GPU count, got {gpus_f}"
                )
            gpus = int(gpus_f)
            if gpus < 1:
                stats.skip("no GPUs")
                continue
            if duration <= 0:
                stats.skip("non-positive duration")
                continue
            vc = (row.get(c["vc"]) or DEFAULT_VC).strip() if "vc" in c else DEFAULT_VC
            cpu = (
                _field(row, c["cpu"], where, "millicores", lambda v: int(float(v)))
                if "cpu" in c
                else None
            )
            mem = (
                _field(row, c["memory"], where, "MiB", lambda v: int(float(v) * MIB))
                if "memory" in c
                else None
            )
            ckpt = None
            if "checkpoint" in c and (row.get(c["checkpoint"]) or "").strip():
                ckpt = _field(row, c["checkpoint"], where, "seconds", float)
                if ckpt <= 0:
                    raise TraceError(f"{where}: column {c['checkpoint']!r} must be > 0, got {ckpt}")
            name = row[c["name"]].strip() if "name" in c else f"job-{i - 1}"
            jobs.append(TraceJob(name, submit, duration, gpus, vc or DEFAULT_VC, cpu, mem, ckpt))
    jobs.sort(key=lambda j: j.submit_s)  # stable: rows keep their order at equal times
    stats.kept = len(jobs)
    return jobs


def read_philly(path: str | Path, stats: TraceStats | None = None) -> list[TraceJob]:
    """Read Philly's ``philly_jobs.csv`` (submit as UTC datetime, VC = ``cluster``).

    Philly has no CPU/memory requests; they are synthesised per GPU (see
    :func:`scheduler.sim.cluster.synthesise_requests`).
    """
    return read_csv(path, PHILLY_COLUMNS, "datetime", stats)


def read_openb_pods(path: str | Path, stats: TraceStats | None = None) -> list[TraceJob]:
    """Read the openb pod list (``openb_pod_list_default.csv``).

    Rule (documented in the README): submit = ``creation_time``; duration =
    ``deletion_time - scheduled_time`` (the run time); pods never scheduled (phase
    Pending, no ``scheduled_time``), CPU-only pods (``num_gpu`` 0) and zero-length pods are
    skipped and counted. Fractional-GPU pods (``gpu_milli`` < 1000, GPU sharing) are
    replayed as one whole GPU because the core allocates whole devices. VC = ``qos``
    (LS, BE, Burstable, Guaranteed). CPU (``cpu_milli``) and memory (``memory_mib``) are
    the pod's own requests.

    Raises:
        TraceError: file missing, a required column absent, a value does not parse.
    """
    stats = stats if stats is not None else TraceStats()
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {str(path)!r} does not exist")
    need = (
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "creation_time",
        "deletion_time",
        "scheduled_time",
        "qos",
    )
    jobs: list[TraceJob] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        absent = [c for c in need if c not in (reader.fieldnames or [])]
        if absent:
            raise TraceError(f"{path}: columns {absent} not in header {reader.fieldnames}")
        for i, row in enumerate(reader, start=2):
            stats.rows += 1
            where = f"{path.name} row {i}"
            gpus = _field(row, "num_gpu", where, "a GPU count", int)
            if gpus < 1:
                stats.skip("no GPUs")
                continue
            if not row["scheduled_time"].strip():
                stats.skip("never scheduled")
                continue
            created = _field(row, "creation_time", where, "seconds", float)
            started = _field(row, "scheduled_time", where, "seconds", float)
            deleted = _field(row, "deletion_time", where, "seconds", float)
            duration = deleted - started
            if duration <= 0:
                stats.skip("non-positive duration")
                continue
            jobs.append(
                TraceJob(
                    name=row["name"],
                    submit_s=created,
                    duration_s=duration,
                    gpus=gpus,
                    vc=row["qos"] or DEFAULT_VC,
                    cpu_m=_field(row, "cpu_milli", where, "millicores", int),
                    memory=_field(row, "memory_mib", where, "MiB", int) * MIB,
                )
            )
    jobs.sort(key=lambda j: j.submit_s)
    stats.kept = len(jobs)
    return jobs


def select_window(jobs: list[TraceJob], n: int | None, skip: int = 0) -> list[TraceJob]:
    """N consecutive jobs by submit time after skipping the first ``skip``.

    Raises:
        TraceError: negative arguments, or fewer than one job left.
    """
    if skip < 0 or (n is not None and n < 1):
        raise TraceError(f"--jobs must be >= 1 and --skip >= 0, got jobs={n} skip={skip}")
    window = jobs[skip : None if n is None else skip + n]
    if not window:
        raise TraceError(f"--skip {skip} leaves no jobs (the trace has {len(jobs)} usable jobs)")
    return window
