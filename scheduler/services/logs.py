"""Task log service: read and follow ``<share>/jobs/<job>/logs/<uid>/<role>-<index>.log``
(the layout is :mod:`scheduler.logpaths`; ``uid`` is the submission's own id, so a new job
under a deleted job's name never reads the old job's files).

Agents write the files (conventions.md, "Logs"); this service only reads them from the
share as mounted on the master (``share_dir``). Following polls the file, because the
share may be a network file system where inotify sees no remote writes.

Times (``since``, ``timestamps``): the agent records when each part of a log reached the
share in ``<role>-<index>.log.times`` beside it (:mod:`scheduler.logtimes`); this service
finds where ``since`` starts by searching that index, and prefixes each line with its
time (:meth:`LogService.timed`). A line the index does not cover yet is held back while
the log is still being written (its time comes with the agent's next look), and shown as
of unknown time once the log has been quiet for ``SETTLED_S`` or the job ended (an old
log, an agent that was down).

Tasks write to the share too, so every open goes through :mod:`scheduler.sharefs`:
nothing beneath the share is followed out of the job's directory (a symbolic link, a hard
link, ``..``, a FIFO are refused with :class:`LogRefusedError`, 403).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from scheduler import sharefs
from scheduler.logpaths import job_log_dir
from scheduler.logtimes import UNKNOWN, LogTimes, rfc3339, times_path
from scheduler.services.errors import ForbiddenError, NotFoundError

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CHUNK = 64 * 1024
TIMED_MAX = 1024 * 1024
"""Bytes of the log one timed answer reads at most (memory bound; the caller goes on
from the answer's next offset)."""
SETTLED_S = 3.0
"""Seconds without a write after which lines the time index does not cover are shown as
of unknown time instead of held back for the agent's next look (six of its polls)."""


def _safe(kind: str, value: str) -> str:
    if not _SAFE.match(value) or ".." in value:
        raise NotFoundError(f"{kind} {value!r} not found")
    return value


class LogRefusedError(ForbiddenError):
    """A log path beneath the share is a link, hard-linked, or not a regular file: a task
    planted it, and it is not read (403)."""


class LogService:
    """Task logs on the cluster share.

    Args:
        share_dir: the share's local path on the master.
        poll_s: seconds between reads while following.
    """

    def __init__(self, share_dir: str | Path, poll_s: float = 0.25) -> None:
        self.share_dir = Path(share_dir)
        self.poll_s = poll_s

    def log_dir(self, job: str, uid: str = "") -> Path:
        """The directory of submission ``uid`` of ``job`` (:func:`job_log_dir`)."""
        try:
            return job_log_dir(self.share_dir, _safe("job", job), uid)
        except ValueError:
            raise NotFoundError(f"job {job!r} has no logs of uid {uid!r}") from None

    def files(self, job: str, uid: str = "") -> list[dict[str, Any]]:
        """``[{"role", "index", "size" (bytes)}]`` of the existing log files of one
        submission (``uid``) of the job."""
        out = []
        for name, size in self._list(self.log_dir(job, uid)):
            role, _, index = name.removesuffix(".log").rpartition("-")
            if name.endswith(".log") and role and index.isdigit():
                out.append({"role": role, "index": int(index), "size": size})
        return sorted(out, key=lambda f: (f["role"], f["index"]))

    def _list(self, directory: Path) -> list[tuple[str, int]]:
        """``[(name, bytes)]`` of the regular files in ``directory`` (sharefs.list_files)."""
        try:
            return sharefs.list_files(self.share_dir, sharefs.relative(self.share_dir, directory))
        except sharefs.UnsafePathError as exc:
            raise LogRefusedError(f"the job's log directory is refused: {exc.strerror}") from None

    def open(self, path: Path) -> BinaryIO:
        """``path`` (beneath the share) open for reading, through sharefs: never a link,
        a hard-linked file or anything outside the share. The caller closes it.

        Raises:
            NotFoundError: no such file. LogRefusedError: a link, hard link or not a
                regular file.
        """
        try:
            fd = sharefs.open_beneath(self.share_dir, sharefs.relative(self.share_dir, path))
        except sharefs.UnsafePathError as exc:
            raise LogRefusedError(f"log {path.name!r} is refused: {exc.strerror}") from None
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"no log {path.name!r} yet") from None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def size(self, path: Path) -> int:
        """The log's size in bytes now (read through :meth:`open`)."""
        with self.open(path) as f:
            return os.fstat(f.fileno()).st_size

    def path(self, job: str, role: str | None, index: int | None, uid: str = "") -> Path:
        """The log file of one task of submission ``uid``; with no role, the first file
        (by role, index).

        Raises:
            NotFoundError: no such log (the task has not started yet, or a wrong role).
        """
        if role is None:
            files = self.files(job, uid)
            if index is not None:
                files = [f for f in files if f["index"] == index]
            if not files:
                raise NotFoundError(f"job {job!r} has no task logs yet")
            role, index = files[0]["role"], files[0]["index"]
        p = self.log_dir(job, uid) / f"{_safe('role', role)}-{int(index or 0)}.log"
        try:
            self.open(p).close()
        except NotFoundError:
            raise NotFoundError(
                f"no log for task {role}-{int(index or 0)} of job {job!r} yet"
            ) from None
        return p

    def read(
        self,
        job: str,
        role: str | None,
        index: int | None,
        offset: int = 0,
        limit: int = CHUNK,
        uid: str = "",
    ) -> bytes:
        """At most ``limit`` bytes of the log from ``offset`` (bytes; past the end gives b"").

        The whole answer is in memory, so ``limit`` is what bounds it; use :meth:`stream`
        for more than a chunk.
        """
        return b"".join(self.stream(self.path(job, role, index, uid), offset, limit))

    def stream(self, path: Path, offset: int = 0, limit: int | None = None) -> Iterator[bytes]:
        """Yield the file's bytes from ``offset`` in chunks of at most ``CHUNK`` bytes,
        ``limit`` bytes in all (None: to the end as it is when the read starts), so that
        memory stays bounded whatever the file's size. The file is opened now (errors
        raise here, before a response starts), read as the iterator is consumed."""
        f = self.open(path)
        try:
            end = os.fstat(f.fileno()).st_size
        except BaseException:
            f.close()
            raise
        start = min(max(offset, 0), end)
        left = end - start if limit is None else min(max(limit, 0), end - start)
        return _chunks(f, start, left)

    def tail_offset(self, path: Path, lines: int) -> int:
        """The byte offset where the last ``lines`` lines of the file start.

        Reads backwards from the end in ``CHUNK``-byte blocks and keeps only a count of
        the newlines seen, so memory is bounded by one block whatever the file's size or
        the lines' length. A final line without a newline counts as a line.
        """
        with self.open(path) as f:
            pos = end = os.fstat(f.fileno()).st_size
            if lines <= 0 or end == 0:
                return end
            f.seek(end - 1)
            wanted = lines + 1 if f.read(1) == b"\n" else lines  # skip the final newline
            while pos > 0:
                size = min(CHUNK, pos)
                pos -= size
                f.seek(pos)
                block = f.read(size)
                count = block.count(b"\n")
                if count >= wanted:
                    cut = len(block)
                    for _ in range(wanted):
                        cut = block.rindex(b"\n", 0, cut)
                    return pos + cut + 1
                wanted -= count
            return 0

    def _times(self, path: Path) -> BinaryIO | None:
        """The log's time index open for reading (through sharefs), or None when it has
        none (a log of a pasture without times) or it is refused (planted by a task)."""
        try:
            return self.open(times_path(path))
        except (NotFoundError, LogRefusedError):
            return None

    def since_offset(self, path: Path, since: float) -> int:
        """The byte offset of the first line of the log written at or after ``since``
        (Unix seconds): the start of the line that holds the first byte the agent saw at
        or after ``since``. Lines of unknown time are kept unless the index (or, without
        one, the log's last write) shows they were on the share before ``since``."""
        with self.open(path) as f:
            st = os.fstat(f.fileno())
            size, recent = st.st_size, st.st_mtime >= since
            idx = self._times(path)
            if idx is None:
                return 0 if recent else size
            with idx:
                times = LogTimes(idx)
                i = times.first_since(since)
                if i < times.count:
                    start = times.record(i - 1)[0] if i else 0
                else:
                    start = times.end if recent else size
            return _line_start(f, min(start, size))

    def timed(
        self, path: Path, offset: int, now: float, final: bool = False, limit: int = TIMED_MAX
    ) -> tuple[bytes, int]:
        """The complete lines of the log from ``offset`` (a line start), each prefixed
        with its time (RFC 3339 UTC, :func:`scheduler.logtimes.rfc3339`, then a space) or
        ``(time unknown)`` padded to the same width; and the offset to go on from.

        A line's time is the record of its last byte (when the agent saw it complete).
        Lines the index does not cover yet, and an unfinished last line, are held back
        (not in the answer; the next offset stops before them) unless the log has had no
        write for ``SETTLED_S`` seconds before ``now`` or ``final`` (the job ended): then
        they are shown, of unknown time when not covered, an unfinished line with a
        newline added. At most ``limit`` bytes of the log are read (a line longer than
        that is cut into lines of ``limit`` bytes, each with a time).
        """
        with self.open(path) as f:
            st = os.fstat(f.fileno())
            settled = final or now - st.st_mtime >= SETTLED_S
            start = min(max(offset, 0), st.st_size)
            f.seek(start)
            data = f.read(min(limit, st.st_size - start))
        idx = self._times(path)
        out: list[bytes] = []
        pos = start
        with idx or _NoFile():
            times = _Cursor(LogTimes(idx), start) if idx is not None else None
            lines = data.split(b"\n")
            for n, line in enumerate(lines):
                complete = n < len(lines) - 1
                if not complete and (not line or not (settled or (n == 0 and len(data) == limit))):
                    break  # an unfinished last line waits for its end (one cut if too long)
                end = pos + len(line) + (1 if complete else 0)  # past the line's last byte
                if times is not None and end - 1 < times.covered:
                    t = times.at(end - 1)
                    stamp = rfc3339(t) if t > 0 else UNKNOWN
                elif settled:
                    stamp = UNKNOWN
                else:
                    break  # the agent has not seen it yet: its time comes with its next look
                out.append(stamp.encode() + b" " + line + b"\n")
                pos = end
        return b"".join(out), pos

    async def follow(
        self,
        job: str,
        role: str | None,
        index: int | None,
        finished: Callable[[], bool],
        offset: int = 0,
        limit: int | None = None,
        uid: str = "",
        timestamps: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> AsyncIterator[bytes]:
        """Yield the log's bytes as they are written, until ``finished()`` and EOF, or
        until ``limit`` bytes (None: no limit) were yielded; with ``timestamps``, whole
        lines each with its time (:meth:`timed`; ``clock``: Unix seconds now), ending
        after the answer that reached ``limit``.

        Args:
            finished: called between polls; True once the job reached a final state.
                The file is read to its end once more after that.
        """
        path = self.path(job, role, index, uid)
        if timestamps:
            sent = 0
            async for chunk in self._follow_timed(path, finished, offset, clock):
                yield chunk
                sent += len(chunk)
                if limit is not None and sent >= limit:  # whole lines: may pass it
                    return
            return
        left = float("inf") if limit is None else max(limit, 0)
        with self.open(path) as f:
            f.seek(min(max(offset, 0), os.fstat(f.fileno()).st_size))
            done = False
            while left > 0:
                chunk = await asyncio.to_thread(f.read, int(min(CHUNK, left)))
                if chunk:
                    left -= len(chunk)
                    yield chunk
                    continue
                if done:
                    return
                done = await asyncio.to_thread(finished)  # then read to the end once more
                if not done:
                    await asyncio.sleep(self.poll_s)

    async def _follow_timed(
        self,
        path: Path,
        finished: Callable[[], bool],
        offset: int,
        clock: Callable[[], float] | None,
    ) -> AsyncIterator[bytes]:
        import time

        now = clock or time.time
        pos, done = offset, False
        while True:
            data, pos = await asyncio.to_thread(self.timed, path, pos, now(), done)
            if data:
                yield data
                continue
            if done:
                return
            done = await asyncio.to_thread(finished)  # then read to the end once more
            if not done:
                await asyncio.sleep(self.poll_s)


class _Cursor:
    """Walks a time index forwards: the time of bytes at increasing offsets, reading its
    records in batches."""

    def __init__(self, times: LogTimes, offset: int) -> None:
        self.times = times
        self.covered = times.end
        self.base = times.covering(offset)
        self.batch = times.records(self.base, 256)
        self.k = 0

    def at(self, offset: int) -> float:
        """The time of the record holding byte ``offset`` (< :attr:`covered`, and not
        before the last offset asked)."""
        while self.batch[self.k][0] <= offset:
            self.k += 1
            if self.k == len(self.batch):
                self.base += len(self.batch)
                self.batch, self.k = self.times.records(self.base, 256), 0
        return self.batch[self.k][1]


class _NoFile:
    """``with`` stand-in for a missing index."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _line_start(f: BinaryIO, pos: int) -> int:
    """The offset of the start of the line that holds byte ``pos`` of ``f`` (after the
    last newline before it), reading backwards in ``CHUNK`` blocks."""
    end = pos
    while end > 0:
        size = min(CHUNK, end)
        f.seek(end - size)
        block = f.read(size)
        cut = block.rfind(b"\n")
        if cut >= 0:
            return end - size + cut + 1
        end -= size
    return 0


def _chunks(f: BinaryIO, start: int, left: int) -> Iterator[bytes]:
    """``left`` bytes of ``f`` from ``start`` in chunks of at most ``CHUNK``; closes ``f``."""
    with f:
        f.seek(start)
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
