"""Task log service: read and follow ``<share>/jobs/<job>/logs/<uid>/<role>-<index>.log``
(the layout is :mod:`scheduler.logpaths`; ``uid`` is the submission's own id, so a new job
under a deleted job's name never reads the old job's files).

Agents write the files (conventions.md, "Logs"); this service only reads them from the
share as mounted on the master (``share_dir``). Following polls the file, because the
share may be a network file system where inotify sees no remote writes.

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
from scheduler.services.errors import ForbiddenError, NotFoundError

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CHUNK = 64 * 1024


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

    async def follow(
        self,
        job: str,
        role: str | None,
        index: int | None,
        finished: Callable[[], bool],
        offset: int = 0,
        limit: int | None = None,
        uid: str = "",
    ) -> AsyncIterator[bytes]:
        """Yield the log's bytes as they are written, until ``finished()`` and EOF, or
        until ``limit`` bytes (None: no limit) were yielded.

        Args:
            finished: called between polls; True once the job reached a final state.
                The file is read to its end once more after that.
        """
        path = self.path(job, role, index, uid)
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
