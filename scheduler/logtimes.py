"""When each part of a task's log reached the share: the time index beside the log.

The log (``<role>-<index>.log``, :mod:`scheduler.logpaths`) stays a plain, unchanged copy
of what the task wrote: users read it directly and download it. Times lie beside it in
``<role>-<index>.log.times``, written by the node's agent (writer: :class:`LogTimeRecorder`)
and read by the API's log service (reader: :class:`LogTimes`) for ``pasture job logs
--since`` and ``--timestamps``.

Why beside, and why by polling: the task writes its log itself (the process executor
hands it the file as stdout; containers and pods redirect into it), so no byte passes
through the agent, and the task keeps writing while its agent restarts. The agent looks
at the size of every local task's log every :data:`POLL_S` seconds and appends a record
when it grew; a line's time is therefore when the agent first saw it complete on the
share, at most :data:`POLL_S` seconds after the task wrote it, never before.

Format: a sequence of 16-byte little-endian records ``(end: uint64, t: float64)``
(``struct`` ``<Qd``), in file order. Record *i* covers the log's bytes from the previous
record's ``end`` (0 for the first) up to ``end``:

- ``t > 0``: the agent first saw those bytes on the share at Unix time ``t`` (seconds);
- ``t < 0``: their time is unknown (written before the agent watched the file: a log of a
  pasture without times, or bytes written while the agent was down), but they were on the
  share at ``-t``, an upper bound that ``--since`` uses.

``abs(t)`` never decreases from one record to the next, so the records can be searched by
time. A trailing partial record (the agent stopped mid-write) is ignored. Bytes past the
last record have no time yet (a running task, seen at the next poll) or never will (an
old log, an agent that died); readers decide by the log's age (:mod:`scheduler.services.logs`).

Stdlib only, as :mod:`scheduler.logpaths`: the agent and the API share it.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

RECORD = struct.Struct("<Qd")
"""One record: (end offset in bytes, Unix seconds; negative: unknown, on the share by then)."""
POLL_S = 0.5
"""Seconds between two looks of the agent at its tasks' logs (the times' resolution)."""
SUFFIX = ".times"
UNKNOWN = "(time unknown)".ljust(24)
"""What ``--timestamps`` prints for a line whose time was not recorded (as wide as a time)."""


def times_path(log_path: str | Path) -> Path:
    """``<role>-<index>.log.times``: the time index of the log at ``log_path``."""
    p = Path(log_path)
    return p.with_name(p.name + SUFFIX)


def rfc3339(t: float) -> str:
    """Unix seconds ``t`` as RFC 3339 UTC with milliseconds, ``2026-11-28T04:05:55.123Z``
    (24 characters, as :data:`UNKNOWN`)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class LogTimes:
    """Reader of a time index opened by the caller (``f``: binary, seekable; the caller
    closes it). Reads records on demand with ``pread``: memory stays bounded whatever the
    index's size.

    Args:
        f: the open index file. Its size is read once, here.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._fd = f.fileno()
        self.count = os.fstat(self._fd).st_size // RECORD.size

    def record(self, i: int) -> tuple[int, float]:
        """Record ``i`` (0-based): ``(end, t)``; see the module docstring."""
        data = os.pread(self._fd, RECORD.size, i * RECORD.size)
        end, t = RECORD.unpack(data)
        return int(end), float(t)

    def records(self, i: int, n: int) -> list[tuple[int, float]]:
        """Up to ``n`` records from ``i`` in one read."""
        n = max(0, min(n, self.count - i))
        data = os.pread(self._fd, n * RECORD.size, i * RECORD.size)
        return [(int(e), float(t)) for e, t in RECORD.iter_unpack(data[: len(data) // 16 * 16])]

    @property
    def end(self) -> int:
        """The log's bytes covered by the index (the last record's end; 0 when empty)."""
        return self.record(self.count - 1)[0] if self.count else 0

    def covering(self, offset: int) -> int:
        """The index of the first record whose ``end`` is past byte ``offset`` (the
        record that holds it); :attr:`count` when no record does. Binary search."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.record(mid)[0] > offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def first_since(self, since: float) -> int:
        """The index of the first record whose time (or, unknown, its upper bound) is at
        or after ``since`` (Unix seconds); :attr:`count` when none is. Binary search over
        ``abs(t)``, which never decreases."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if abs(self.record(mid)[1]) >= since:
                hi = mid
            else:
                lo = mid + 1
        return lo


class LogTimeRecorder:
    """The agent's writer of time indexes (module docstring): :meth:`observe` a log after
    writing to it and on every poll; :meth:`forget` it once its task ended. Thread-safe
    (the agent's poll thread and its passes both call it).

    Args:
        clock: Unix seconds now (tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.time
        self._lock = threading.Lock()
        self._seen: dict[Path, tuple[int, float]] = {}  # log -> (indexed end, last |t|)

    def observe(self, log_path: str | Path) -> None:
        """Record the bytes the log gained since the last record: seen now. The first time
        this recorder looks at a log, bytes past its index (there before the recorder
        watched it) are recorded as of unknown time instead.

        Errors of the share (a missing log, a full disk) are left to the caller
        (``OSError``); a planted index (a link, not a regular file, hard linked) is never
        written through (``OSError`` ``ELOOP``/``EPERM``).
        """
        path = Path(log_path)
        with self._lock:
            seen = self._seen.get(path)
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # not written yet: whatever comes is seen from now
                if seen is None:
                    self._seen[path] = self._last(times_path(path))
                return
            now = self._clock()
            if seen is None:
                end, last = self._last(times_path(path))
                self._seen[path] = seen = (end, last)
                if size > end:  # there before we watched: time unknown, on the share by now
                    t = max(now, last)
                    self._append(times_path(path), size, -t)
                    self._seen[path] = (size, t)
                return
            end, last = seen
            if size > end:
                t = max(now, last)
                self._append(times_path(path), size, t)
                self._seen[path] = (size, t)

    def forget(self, log_path: str | Path) -> None:
        """Stop tracking the log (its task ended; call :meth:`observe` once before)."""
        with self._lock:
            self._seen.pop(Path(log_path), None)

    def watched(self) -> list[Path]:
        """The logs being tracked."""
        with self._lock:
            return list(self._seen)

    @staticmethod
    def _last(index: Path) -> tuple[int, float]:
        """``(end, abs(t))`` of the index's last record; (0, 0.0) when there is none."""
        try:
            with _open_index(index, os.O_RDONLY) as f:
                times = LogTimes(f)
                if not times.count:
                    return 0, 0.0
                end, t = times.record(times.count - 1)
                return end, abs(t)
        except FileNotFoundError:
            return 0, 0.0

    @staticmethod
    def _append(index: Path, end: int, t: float) -> None:
        with _open_index(index, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as f:
            pos = os.fstat(f.fileno()).st_size
            if pos % RECORD.size:  # a partial record of a crash: overwrite it
                os.ftruncate(f.fileno(), pos - pos % RECORD.size)
            os.write(f.fileno(), RECORD.pack(end, t))


def _open_index(index: Path, flags: int) -> BinaryIO:
    """The index open without following a link; refused (``OSError``) when it is not a
    regular file with one link (a task may have planted it: tasks write beneath the
    share)."""
    fd = os.open(index, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise OSError(f"time index {index} is not a plain file; not used")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb" if flags & os.O_ACCMODE == os.O_RDONLY else "wb")
    except BaseException:
        os.close(fd)
        raise
