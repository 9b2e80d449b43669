"""The one field codec and the one event builder of the store.

Redis hashes hold strings: :func:`encode` turns a record field into one (None -> "", dicts
and lists -> JSON, everything else -> ``str``) and :func:`as_float` / :func:`as_int` /
:func:`as_json` read them back ("" -> None). :func:`event` is the JSON of one entry of a
job's event list ``job:<job>:events``; the Lua commit script (``lua.COMMIT``) builds the
same shape in Lua for the events it appends. :class:`TaskReporter` is the one
``report_task`` of ``Store`` and ``NodeStore`` and the one form of an agent's report on a
task (the fields of a node's ``{kind: task}`` report entry); :func:`report_task_args`
turns it into the arguments of ``lua.REPORT_TASK`` (``Store`` and the loop's
``scheduler.store.reports``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis


def encode(value: Any) -> str:
    """One hash field: None -> "", dict / list -> JSON, else ``str(value)``."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def encode_fields(fields: Mapping[str, Any]) -> dict[str, str]:
    """Every field of ``fields`` through :func:`encode` (a mapping for ``HSET``)."""
    return {key: encode(value) for key, value in fields.items()}


def report_task_args(prefix: str, node: str, report: Mapping[str, str], *, wake: bool) -> list[str]:
    """``lua.REPORT_TASK``'s ARGV, in its order, for ``report`` (the fields of
    :meth:`TaskReporter.report_task`: job, key, attempt, state, exit_code, message, handle,
    cause, diagnosis, usage) on ``node``; ``wake``: the script wakes the loop (an agent's
    direct report), else not (the loop applying queued reports)."""
    return [
        prefix,
        report["job"],
        report["key"],
        report["attempt"],
        node,
        report["state"],
        report["exit_code"],
        report["message"],
        report["handle"],
        report["cause"],  # ARGV[10]
        report["diagnosis"],  # ARGV[11]: issue 19
        "" if wake else "quiet",  # ARGV[12]
        report["usage"],  # ARGV[13]: issue 34
    ]


class TaskReporter:
    """The one ``report_task`` an agent calls, whichever store it has: the admin
    :class:`scheduler.store.Store` (applied at once by ``lua.REPORT_TASK``) or its node's
    :class:`scheduler.store.agent_store.NodeStore` (queued on the node's report stream for
    the loop). Each implements :meth:`_send_report`."""

    def report_task(
        self,
        job: str,
        key: str,
        attempt: int,
        node: str,
        state: str,
        exit_code: int | None = None,
        message: str = "",
        handle: str = "",
        cause: str = "",
        diagnosis: dict[str, Any] | None = None,
        pipe: redis.client.Pipeline | None = None,
        usage: dict[str, Any] | None = None,
    ) -> bool:
        """A report on task ``key`` of ``job`` at ``attempt`` on ``node``: its state
        (running / succeeded / failed / stopped / lost), exit code, message, executor
        handle, infrastructure ``cause`` (a records.Cause, then the attempt is not charged;
        "" otherwise), ``diagnosis`` (the failure's class,
        :func:`scheduler.rules.diagnosis.diagnose_report`) and ``usage`` (the ended task's
        ``{cpu_s, max_rss}``, CPU seconds and bytes,
        :meth:`scheduler.agent.taskusage.TaskUsageSampler.final`), kept in the task's
        record. With ``pipe`` (a redis-py pipeline) the report is only queued on it (a
        caller reporting many at once). Returns whether it was taken (see
        :meth:`_send_report`). Raises ValueError when this store may not write ``node``."""
        report = {  # the one form of a report: strings, JSON for the structured parts
            "job": job,
            "key": key,
            "attempt": str(attempt),
            "state": str(state),
            "exit_code": "" if exit_code is None else str(exit_code),
            "message": message,
            "handle": handle,
            "cause": str(cause),
            "diagnosis": json.dumps(diagnosis) if diagnosis else "",
            "usage": json.dumps(usage) if usage else "",
        }
        return self._send_report(node, report, pipe)

    def _send_report(
        self, node: str, report: dict[str, str], pipe: redis.client.Pipeline | None
    ) -> bool:
        """Deliver ``report`` on a task of ``node`` (``{job, key, attempt, state, exit_code
        ('' for None), message, handle, cause, diagnosis (JSON or ''), usage (JSON or
        '')}``); see :meth:`report_task`."""
        raise NotImplementedError


def as_float(v: str | None) -> float | None:
    """A float field; None when absent or ""."""
    return None if v in (None, "") else float(v)


def as_int(v: str | None) -> int | None:
    """An int field; None when absent or ""."""
    return None if v in (None, "") else int(v)


def as_json(v: str | None) -> Any:
    """A JSON field; None when absent or ""."""
    return None if v in (None, "") else json.loads(v)


def event(time: float, state: str, attempt: int | str, reason: str) -> str:
    """One job event: ``{"time" (s), "state", "attempt", "reason"}`` as JSON."""
    return json.dumps({"time": time, "state": state, "attempt": int(attempt), "reason": reason})
