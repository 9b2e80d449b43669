"""``pasture job logs``: every task's log, each line prefixed ``role-index |``.

Built on the API's log endpoints as they are (``GET /jobs/NAME/logs/files`` lists
``{role, index, size}``; ``GET /jobs/NAME/logs?role=&index=&offset=`` answers the bytes
from ``offset`` to the end). Following polls both: a task's log is read only when its size
grew, from where the last read stopped, so tasks that start later (a new attempt, a
restarted task) join the stream, and it ends once the job is in a final state and every
log has been read to its end. ``--tail`` and ``--attempt`` are applied here, on the
client: each log file holds every attempt of its task, each after an agent header line
``=== attempt N on NODE ===`` (scheduler/agent/agent.py). Every read names the job's uid
(the submission first read), so a job deleted and submitted again under the same name
while this follows ends the stream with "not found" instead of mixing in the new job.
"""

from __future__ import annotations

import re
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.text import visible, visible_log_line
from scheduler.cli.views import TERMINAL, WAITING, reason_text
from scheduler.logtimes import UNKNOWN

if TYPE_CHECKING:
    from scheduler.api.schemas import JobOut, LogFileOut

ATTEMPT_HEADER = re.compile(rb"^=== attempt (\d+) on .* ===$")


@dataclass
class TaskLog:
    """Where one task's log stands: bytes read so far, the unfinished last line, the
    attempt its last header named, and the last lines kept for ``--tail``."""

    role: str
    index: int
    offset: int = 0
    partial: bytes = b""
    attempt: int | None = None
    kept: deque[str] = field(default_factory=deque)
    read_once: bool = False  # --since goes with the first read only

    @property
    def key(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass
class LogOptions:
    """What to show: ``role``/``index`` filters (None: all), ``attempt`` (None: all),
    ``tail`` (last N lines per task, None: all), ``prefix`` (None: unless both ``role``
    and ``index`` name one task), ``since`` (a duration ago or RFC 3339 time: sent with
    each task's first read, the API finds where it starts), ``timestamps`` (each line
    after its time, as the API writes it)."""

    role: str | None = None
    index: int | None = None
    attempt: int | None = None
    tail: int | None = None
    prefix: bool | None = None
    since: str | None = None
    timestamps: bool = False


class JobLogs:
    """Reads (and follows) the selected task logs of one job and writes their lines.

    Args:
        client: the API client. name: the job. options: see :class:`LogOptions`.
        write: where lines go (bytes; default stdout). notice: where "waiting to start"
            messages go (text; default stderr).
        poll_s: seconds between polls while following.
    """

    def __init__(
        self,
        client: ApiClient,
        name: str,
        options: LogOptions,
        write: Callable[[bytes], None] | None = None,
        notice: Callable[[str], None] | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.client = client
        self.name = name
        self.options = options
        self.write = write or _stdout
        self.notice = notice or _stderr
        self.poll_s = poll_s
        self.tasks: dict[tuple[str, int], TaskLog] = {}
        self.width = 0
        self._last_notice = ""
        self.uid: str | None = None  # the submission being read (set at the first read)

    def _gone(self) -> ApiError:
        return ApiError(404, f"job {self.name!r} was deleted or replaced while reading")

    def _job(self) -> JobOut:
        try:
            job = self.client.job(self.name)
        except ApiError as exc:  # deleted (not yet submitted again) while we read
            if exc.status == 404 and self.uid is not None:
                raise self._gone() from None
            raise
        if self.uid is None:
            self.uid = job.uid or None
        elif job.uid != self.uid:  # deleted and submitted again while we read
            raise self._gone()
        return job

    def _files(self) -> list[LogFileOut]:
        if self.uid is None:
            self._job()
        try:
            return self._selected(self.client.log_files(self.name, uid=self.uid))
        except ApiError as exc:
            if exc.status == 404 and self.uid is not None:
                raise self._gone() from None
            raise

    # -- selection ------------------------------------------------------------------------
    def _selected(self, files: list[LogFileOut]) -> list[LogFileOut]:
        o = self.options
        return [
            f
            for f in files
            if (o.role is None or f.role == o.role) and (o.index is None or f.index == o.index)
        ]

    def _prefix(self, task: TaskLog) -> bytes:
        show = self.options.prefix
        if show is None:  # a prefix unless one task was named (--role and --index)
            show = self.options.role is None or self.options.index is None
        if not show:
            return b""
        return f"{task.key:<{self.width}} | ".encode()

    # -- lines ----------------------------------------------------------------------------
    def _lines(self, task: TaskLog, data: bytes, final: bool) -> list[bytes]:
        """Complete lines of ``data`` (after ``task.partial``) that pass the attempt
        filter, each with its newline; the unfinished rest stays in ``task.partial``."""
        data = task.partial + data
        lines = data.split(b"\n")
        task.partial = b"" if final else lines.pop()
        if final and lines and lines[-1] == b"":
            lines.pop()
        out = []
        stamp = len(UNKNOWN) + 1 if self.options.timestamps else 0  # "<time> " first
        for line in lines:
            m = ATTEMPT_HEADER.match(line[stamp:])
            if m:
                task.attempt = int(m.group(1))
            if self.options.attempt is None or task.attempt == self.options.attempt:
                out.append(line + b"\n")
        return out

    def _emit(self, task: TaskLog, lines: list[bytes]) -> None:
        """Write ``lines`` with their task's prefix, control characters made visible
        (:func:`scheduler.cli.text.visible_log_line`: a task's ESC sequences never reach
        the terminal)."""
        prefix = self._prefix(task)
        if lines:
            self.write(b"".join(prefix + visible_log_line(line) for line in lines))

    def _read(self, f: LogFileOut, final: bool) -> tuple[TaskLog, list[bytes]]:
        key = (f.role, f.index)
        task = self.tasks.get(key)
        if task is None:
            task = self.tasks[key] = TaskLog(f.role, f.index)
            self.width = max(self.width, len(task.key))
        lines: list[bytes] = []
        if f.size > task.offset or (final and task.partial):
            data = b""
            while f.size > task.offset:
                try:
                    got, nxt = self.client.log_chunk(
                        self.name,
                        task.role,
                        task.index,
                        task.offset,
                        uid=self.uid,
                        since=None if task.read_once else self.options.since,
                        timestamps=self.options.timestamps,
                    )
                except ApiError as exc:
                    if exc.status == 404 and self.uid is not None:
                        raise self._gone() from None
                    raise
                task.read_once = True
                data += got
                if nxt <= task.offset:  # held back (its time not recorded yet): next poll
                    break
                task.offset = nxt
                if not self.options.timestamps:  # one answer reads to the end
                    break
            lines = self._lines(task, data, final)
        return task, lines

    # -- commands -------------------------------------------------------------------------
    def waiting_reason(self, job: JobOut) -> str | None:
        """The line to show while the job has not started (None once it has)."""
        if job.state not in WAITING:
            return None
        reason = reason_text(job.pending_reason) or job.reason or "queued"
        return f"job {self.name} is waiting to start ({job.state}): {reason}"

    def _say(self, text: str) -> None:
        if text != self._last_notice:
            self.notice(text)
            self._last_notice = text

    def show(self) -> bool:
        """Print the selected logs once (per task, in role/index order). False when the
        job has no selected log yet (a "waiting to start" notice was given if it waits)."""
        files = self._files()
        if not files:
            waiting = self.waiting_reason(self._job())
            if waiting:
                self._say(waiting)
            return False
        for f in files:
            self.tasks.setdefault((f.role, f.index), TaskLog(f.role, f.index))
        self.width = max(len(t.key) for t in self.tasks.values())
        for f in files:
            task, lines = self._read(f, final=True)
            self._emit(task, self._tail(lines))
        return True

    def _tail(self, lines: list[bytes]) -> list[bytes]:
        n = self.options.tail
        return lines if n is None else lines[-n:] if n > 0 else []

    def follow(self) -> JobOut:
        """Stream new lines of every selected task until the job is in a final state and
        every log is read to its end; returns the job's last record. Lines are written
        as they arrive, interleaved across tasks; ``tail`` applies to what existed when
        following began."""
        first = True
        while True:
            job = self._job()
            done = job.state in TERMINAL
            files = self._files()
            for f in files:  # width known before the first line is printed
                self.width = max(self.width, len(f"{f.role}-{f.index}"))
            if not files and (waiting := self.waiting_reason(job)):
                self._say(waiting)
            for f in files:
                task, lines = self._read(f, final=done)
                self._emit(task, self._tail(lines) if first else lines)
            first = False
            if done:
                return job
            time.sleep(self.poll_s)


def _stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _stderr(text: str) -> None:
    sys.stderr.write(visible(text) + "\n")
    sys.stderr.flush()
