"""pasture's scheduler core: pure placement, queueing, virtual-cluster and preemption policy.

Entry point: ``schedule(snapshot, policy, now) -> Decision`` (see :mod:`scheduler.core.model`
for the types and :mod:`scheduler.core.policy` for the policy). No Redis, HTTP or clock.
"""

from scheduler.core.adapt import adapt
from scheduler.core.explain import Explanation, NodeVerdict, explain
from scheduler.core.history import History, HistoryWindow
from scheduler.core.model import (
    Bind,
    Decision,
    Job,
    Node,
    NodeState,
    PendingReason,
    Preemption,
    PriorityClass,
    ReasonKind,
    RunningJob,
    Snapshot,
    TaskPlacement,
    TaskRole,
    VirtualCluster,
)
from scheduler.core.plugins import FILTERS, SCORERS
from scheduler.core.policy import Backfill, Policy, PreemptionMode
from scheduler.core.queue import QUEUE_ORDERS
from scheduler.core.resources import ZERO, Resources
from scheduler.core.scheduler import schedule

__all__ = [
    "History",
    "HistoryWindow",
    "adapt",
    "FILTERS",
    "QUEUE_ORDERS",
    "SCORERS",
    "ZERO",
    "Backfill",
    "Bind",
    "Decision",
    "Explanation",
    "Job",
    "Node",
    "NodeState",
    "NodeVerdict",
    "PendingReason",
    "Policy",
    "Preemption",
    "PreemptionMode",
    "PriorityClass",
    "ReasonKind",
    "Resources",
    "RunningJob",
    "Snapshot",
    "TaskPlacement",
    "TaskRole",
    "VirtualCluster",
    "explain",
    "schedule",
]
