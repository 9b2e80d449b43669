"""Where a job's files and a task's log live on the cluster share: the one definition the
agent (writer), the executors (what a task sees) and the API's log service (reader) share.

Layout (docs/cli.md, "Logs")::

    <share>/jobs/<job>/logs/<uid>/<role>-<index>.log   a job with a uid (every job
                                                       submitted since uids exist)
    <share>/jobs/<job>/logs/<role>-<index>.log         a job stored before (uid "")

``uid`` is the submission's own id (:attr:`scheduler.store.records.JobRecord.uid`): a job
deleted or replaced and submitted again under the same name writes to a new directory, so
the new job's logs never hold the old job's attempts, and the old job's directory is left
as it was (``job delete`` does not remove files from the share). Each file holds every
attempt of its task, each after an agent header line ``=== attempt N on NODE ===``.

Stdlib only: the CLI and the agent import it without loading the API.
"""

from __future__ import annotations

import re
from pathlib import Path

UID = re.compile(r"^[0-9a-f]{32}$")
"""What a uid looks like (``uuid4().hex``); anything else is refused as a path part."""


def job_dir(share: str | Path, job: str) -> Path:
    """``<share>/jobs/<job>``: the job's directory on the share, the only one of the
    share's job directories its tasks see (docs/runtime-env.md "What a task sees")."""
    return Path(share) / "jobs" / job


def team_dir(share: str | Path, vc: str) -> Path:
    """``<share>/teams/<vc>``: the VC's team directory (OpenPAI's team-wise storage),
    visible read-write to the VC's tasks when an admin made it (owned by the VC's Unix
    user, :mod:`scheduler.tenants`)."""
    return Path(share) / "teams" / vc


def job_log_dir(share: str | Path, job: str, uid: str) -> Path:
    """The directory of one submission's task logs (see the module docstring).

    Raises:
        ValueError: ``uid`` is neither "" nor 32 lowercase hex digits.
    """
    base = job_dir(share, job) / "logs"
    if not uid:
        return base
    if not UID.match(uid):
        raise ValueError(f"job uid must be 32 lowercase hex digits, got {uid!r}")
    return base / uid


def task_log_path(share: str | Path, job: str, uid: str, role: str, index: int) -> Path:
    """``<job_log_dir>/<role>-<index>.log`` of one task (every attempt appended)."""
    return job_log_dir(share, job, uid) / f"{role}-{int(index)}.log"
