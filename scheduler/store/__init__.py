"""Everything that touches Redis: jobs, tasks, nodes, VCs, the allocation ledger, events,
the atomic Decision commit, and tokens (``tokens.py``). Key layout: README.md here."""

from scheduler.states import JobState, TaskState
from scheduler.store.records import (
    Allocation,
    JobRecord,
    NodeRecord,
    TaskRecord,
    VCUsage,
)
from scheduler.store.store import (
    JobActiveError,
    JobExistsError,
    JobNotFoundError,
    NodeNotFoundError,
    Store,
)

__all__ = [
    "Allocation",
    "JobActiveError",
    "JobExistsError",
    "JobNotFoundError",
    "JobRecord",
    "JobState",
    "NodeNotFoundError",
    "NodeRecord",
    "Store",
    "TaskRecord",
    "TaskState",
    "VCUsage",
]
