"""Task log service: read and follow ``<share>/jobs/<job>/logs/<role>-<index>.log``.

Agents write the files (conventions.md, "Logs"); this service only reads them from the
share as mounted on the master (``share_dir``). Following polls the file, because the
share may be a network file system where inotify sees no remote writes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from scheduler.services.errors import NotFoundError

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CHUNK = 64 * 1024


def _safe(kind: str, value: str) -> str:
    if not _SAFE.match(value) or ".." in value:
        raise NotFoundError(f"{kind} {value!r} not found")
    return value


class LogService:
    """Task logs on the cluster share.

    Args:
        share_dir: the share's local path on the master.
        poll_s: seconds between reads while following.
    """

    def __init__(self, share_dir: str | Path, poll_s: float = 0.25) -> None:
        self.share_dir = Path(share_dir)
        self.poll_s = poll_s

    def log_dir(self, job: str) -> Path:
        return self.share_dir / "jobs" / _safe("job", job) / "logs"

    def files(self, job: str) -> list[dict]:
        """``[{"role", "index", "size" (bytes)}]`` of the job's existing log files."""
        d = self.log_dir(job)
        out = []
        for p in sorted(d.glob("*.log")) if d.is_dir() else []:
            role, _, index = p.stem.rpartition("-")
            if role and index.isdigit():
                out.append({"role": role, "index": int(index), "size": p.stat().st_size})
        return sorted(out, key=lambda f: (f["role"], f["index"]))

    def path(self, job: str, role: str | None, index: int | None) -> Path:
        """The log file of one task; with no role, the first file (by role, index).

        Raises:
            NotFoundError: no such log (the task has not started yet, or a wrong role).
        """
        if role is None:
            files = self.files(job)
            if index is not None:
                files = [f for f in files if f["index"] == index]
            if not files:
                raise NotFoundError(f"job {job!r} has no task logs yet")
            role, index = files[0]["role"], files[0]["index"]
        p = self.log_dir(job) / f"{_safe('role', role)}-{int(index or 0)}.log"
        if not p.is_file():
            raise NotFoundError(f"no log for task {role}-{int(index or 0)} of job {job!r} yet")
        return p

    def read(self, job: str, role: str | None, index: int | None, offset: int = 0) -> bytes:
        """The log's bytes from ``offset`` (bytes; past the end gives b"") to its end."""
        path = self.path(job, role, index)
        with path.open("rb") as f:
            f.seek(min(max(offset, 0), path.stat().st_size))
            return f.read()

    async def follow(
        self,
        job: str,
        role: str | None,
        index: int | None,
        finished: Callable[[], bool],
        offset: int = 0,
    ) -> AsyncIterator[bytes]:
        """Yield the log's bytes as they are written, until ``finished()`` and EOF.

        Args:
            finished: called between polls; True once the job reached a final state.
                The file is read to its end once more after that.
        """
        path = self.path(job, role, index)
        with path.open("rb") as f:
            f.seek(min(max(offset, 0), path.stat().st_size))
            while True:
                chunk = f.read(CHUNK)
                if chunk:
                    yield chunk
                    continue
                if await asyncio.to_thread(finished):
                    rest = f.read()
                    if rest:
                        yield rest
                    return
                await asyncio.sleep(self.poll_s)
