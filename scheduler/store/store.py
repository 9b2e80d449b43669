"""The Redis store: jobs, tasks, nodes, virtual clusters, the allocation ledger, events.

:class:`Store` combines the store's areas, one module each: ``jobs.py`` (jobs, transitions,
events), ``tasks.py`` (tasks, agents' reports, the ledger, the commit), ``nodes.py``
(registration, heartbeats, node states), ``cluster.py`` (VCs, usage histories, loop
statistics, status, the cluster condition), on ``base.py`` (client, keys, clock) with one
field codec and one event builder (``codec.py``); tokens are ``tokens.py``.

Key layout: see ``scheduler/store/README.md``. All writes that must not interleave run as
one Lua script (:mod:`scheduler.store.lua`) or one MULTI transaction. Times are Redis'
clock (``TIME``), in seconds.

Errors: :class:`JobExistsError`, :class:`JobNotFoundError`, :class:`NodeNotFoundError`,
:class:`JobActiveError` (``LookupError``/``ValueError``/``RuntimeError`` subclasses the API
maps to 409 / 404).
"""

from __future__ import annotations

from scheduler.states import TaskState
from scheduler.store.base import (
    DEFAULT_PREFIX,
    JobActiveError,
    JobExistsError,
    JobNotFoundError,
    NodeNotFoundError,
)
from scheduler.store.cluster import CYCLE_BUCKETS, ClusterMixin
from scheduler.store.jobs import JobsMixin
from scheduler.store.nodes import (
    NODE_STATES,
    USAGE_SAMPLE_S,
    USAGE_SAMPLES,
    NodesMixin,
    usage_sample,
)
from scheduler.store.tasks import TasksMixin


class Store(JobsMixin, TasksMixin, NodesMixin, ClusterMixin):
    """All reads and writes of pasture's state in Redis (see the module docstring).

    Args:
        client: a redis-py client created with ``decode_responses=True``.
        prefix: key prefix (default ``pasture:``), shared with ``store/tokens.py``.
    """


__all__ = [
    "CYCLE_BUCKETS",
    "DEFAULT_PREFIX",
    "NODE_STATES",
    "USAGE_SAMPLES",
    "USAGE_SAMPLE_S",
    "JobActiveError",
    "JobExistsError",
    "JobNotFoundError",
    "NodeNotFoundError",
    "Store",
    "TaskState",
    "usage_sample",
]
