"""Live sizing of elastic jobs from the throughput they measure themselves (issue 36).

A running job may write, in its job directory on the cluster share,
``$PASTURE_JOB_DIR/.pasture/throughput.json``: one JSON object
``{"replicas": n, "steps_per_s": x}`` (or ``"samples_per_s"`` instead of ``"steps_per_s"``),
the rate it measures now on n replicas of its elastic role. A step must be the same
amount of work at every width (a fixed global batch); a job with a fixed per-replica
batch reports ``samples_per_s``. The loop reads the file of each running job with an
elastic role at most every :data:`READ_EVERY_S` seconds, keeps the latest rate per
replica count (per job, in memory: a restarted loop learns again), and hands the core
``Job.scaling`` = :func:`scheduler.spec.model.speedup_table` of the measured rates. Once
a job has measured anything, its measurements replace the rates its spec declares
(``throughput:``; the units may differ); with neither, the core treats it as linear.

The file is data from a tenant: it is opened beneath the share without following links
(:func:`scheduler.sharefs.open_beneath`), read up to :data:`MAX_BYTES`, and must be exactly
that object (replicas an integer in 1..the role's maximum, the rate a finite number > 0);
anything else is ignored with one warning per job and problem naming the field, what was
expected and what was given. A job can only size itself with it, between its minimum and
maximum, as with the declared ``throughput:`` (a job that overstates its scaling gets
more replicas while GPUs are idle, as a spec that declares it would).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from scheduler.core.model import Job, RunningJob, Snapshot
from scheduler.sharefs import open_beneath
from scheduler.spec.model import speedup_table

log = logging.getLogger(__name__)

THROUGHPUT_FILE = ".pasture/throughput.json"
MAX_BYTES = 4096
READ_EVERY_S = 5.0
UNITS = ("steps_per_s", "samples_per_s")


class ThroughputError(ValueError):
    """A job's throughput file is not the documented object (message: field, expected,
    given)."""


def parse_report(raw: bytes, max_replicas: int) -> tuple[str, int, float]:
    """``(unit, replicas, rate)`` from the file's bytes.

    Raises:
        ThroughputError: not UTF-8 JSON, not an object of ``replicas`` and exactly one of
            :data:`UNITS`, replicas not an integer in 1..``max_replicas``, or the rate not
            a finite number > 0.
    """
    if len(raw) > MAX_BYTES:
        raise ThroughputError(f"{THROUGHPUT_FILE}: expected at most {MAX_BYTES} bytes, got more")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ThroughputError(f"{THROUGHPUT_FILE}: expected a JSON object, got {exc}") from None
    if not isinstance(doc, dict):
        raise ThroughputError(
            f"{THROUGHPUT_FILE}: expected a JSON object, got {type(doc).__name__}"
        )
    units = [u for u in UNITS if u in doc]
    extra = sorted(set(doc) - {"replicas", *UNITS})
    if len(units) != 1 or extra or "replicas" not in doc:
        raise ThroughputError(
            f"{THROUGHPUT_FILE}: expected the keys replicas and one of {list(UNITS)}, "
            f"got {sorted(doc)[:8]}"
        )
    n, x = doc["replicas"], doc[units[0]]
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_replicas:
        raise ThroughputError(
            f"{THROUGHPUT_FILE}: replicas: expected an integer in 1..{max_replicas}, "
            f"got {str(n)[:40]!r}"
        )
    if isinstance(x, bool) or not isinstance(x, int | float) or not (math.isfinite(x) and x > 0):
        raise ThroughputError(
            f"{THROUGHPUT_FILE}: {units[0]}: expected a finite number > 0, got {str(x)[:40]!r}"
        )
    return units[0], n, float(x)


@dataclass(slots=True)
class _Measured:
    unit: str = ""
    rates: dict[int, float] = field(default_factory=dict)
    read_at: float = -math.inf
    warned: set[str] = field(default_factory=set)


class MeasuredThroughput:
    """The loop's record of what running elastic jobs measured (module docstring).

    Args:
        share_dir: the cluster share as mounted where the loop runs.
        read_every_s: seconds between two reads of one job's file.
    """

    def __init__(self, share_dir: Path, read_every_s: float = READ_EVERY_S) -> None:
        self.share_dir = share_dir
        self.read_every_s = read_every_s
        self._jobs: dict[str, _Measured] = {}

    def rates(self, job: str) -> dict[int, float]:
        """The latest measured rate per replica count of ``job`` (``{}`` when none)."""
        m = self._jobs.get(job)
        return dict(m.rates) if m else {}

    def _read(self, job: str, max_replicas: int, m: _Measured) -> None:
        rel = f"jobs/{job}/{THROUGHPUT_FILE}"
        try:
            fd = open_beneath(self.share_dir, rel)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._warn(job, m, f"{THROUGHPUT_FILE}: not read ({exc.strerror or exc})")
            return
        try:
            raw = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
        try:
            unit, n, x = parse_report(raw, max_replicas)
        except ThroughputError as exc:
            self._warn(job, m, str(exc))
            return
        if unit != m.unit:  # a new unit: the old rates are not comparable
            m.unit, m.rates = unit, {}
        m.rates[n] = x

    @staticmethod
    def _warn(job: str, m: _Measured, msg: str) -> None:
        if msg not in m.warned and len(m.warned) < 8:
            m.warned.add(msg)
            log.warning("job %s: %s; ignored", job, msg)

    def _scaled(self, job: Job, now: float, read: bool) -> Job:
        roles = [r for r in job.roles if r.elastic]
        if not roles:
            return job
        m = self._jobs.setdefault(job.name, _Measured())
        if read and now - m.read_at >= self.read_every_s:
            m.read_at = now
            self._read(job.name, roles[0].replicas, m)
        if not m.rates:
            return job
        table = speedup_table(m.rates)
        return job if table == job.scaling else replace(job, scaling=table)

    def apply(self, snapshot: Snapshot, now: float, live: Mapping[str, object]) -> Snapshot:
        """``snapshot`` with the measured scaling of each job with an elastic role:
        running jobs' files are read (at most every ``read_every_s`` at ``now``, seconds),
        waiting ones keep what their earlier attempts measured. Jobs not in ``live`` (the
        loop's active jobs by name) are forgotten."""
        for name in [n for n in self._jobs if n not in live]:
            del self._jobs[name]
        running = tuple(
            rj if (j := self._scaled(rj.job, now, True)) is rj.job else _with_job(rj, j)
            for rj in snapshot.running
        )
        pending = tuple(
            self._scaled(j, now, False) if j.name in self._jobs else j for j in snapshot.pending
        )
        return replace(snapshot, running=running, pending=pending)


def _with_job(rj: RunningJob, job: Job) -> RunningJob:
    return replace(rj, job=job)
