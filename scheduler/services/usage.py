"""Usage service: utilisation history for charts (the cluster's per-minute means, one
node's samples).

Figures are percentages (0-100) of cpu, memory and GPU, as the agents report them in
their heartbeats; a resource nobody reported is None, never a made-up 0. Nodes are
visible to every role (as ``GET /api/v1/nodes``), and no sample names a job, so admins
and users read the same history; agent tokens read none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scheduler.services.errors import NotFoundError
from scheduler.services.principal import Principal, require_role
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.store import Store

# the longest window a caller may ask for (s): the store keeps 2 h of samples
MAX_WINDOW_S = 7200


@dataclass(frozen=True)
class UsageSample:
    """One point of a usage chart: ``t`` (s since the epoch; the minute's start for the
    cluster's means) and ``cpu``, ``mem``, ``gpu`` in percent (None: not reported)."""

    t: float
    cpu: float | None = None
    mem: float | None = None
    gpu: float | None = None


@dataclass(frozen=True)
class UsageWindow:
    """Samples of the last ``window_s`` seconds up to ``now`` (s, the store's clock),
    oldest first."""

    now: float
    window_s: int
    samples: list[UsageSample] = field(default_factory=list)


def _pct(v: Any) -> float | None:
    return None if v is None else float(v)


def _samples(rows: list[dict[str, Any]]) -> list[UsageSample]:
    out = [
        UsageSample(float(r.get("t", 0)), *(_pct(r.get(k)) for k in ("cpu", "mem", "gpu")))
        for r in rows
    ]
    return sorted(out, key=lambda s: s.t)


class UsageService:
    """Utilisation history. Args: store: the backend store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def cluster(self, principal: Principal, window_s: int) -> UsageWindow:
        """The cluster's per-minute mean utilisation over the last ``window_s`` seconds
        (at most :data:`MAX_WINDOW_S`). Raises ForbiddenError for an agent token."""
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        window_s = min(int(window_s), MAX_WINDOW_S)
        now = self.store.now()
        rows = self.store.cluster_usage(now - window_s, now)
        return UsageWindow(now, window_s, _samples(rows))

    def node(self, principal: Principal, name: str, window_s: int) -> UsageWindow:
        """Node ``name``'s samples (one per heartbeat) over the last ``window_s`` seconds.

        Raises:
            ForbiddenError: an agent token. NotFoundError: unknown node.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        if self.store.get_node(name) is None:
            raise NotFoundError(f"node {name!r} not found")
        window_s = min(int(window_s), MAX_WINDOW_S)
        now = self.store.now()
        rows = self.store.usage_history(name, since=now - window_s)
        return UsageWindow(now, window_s, _samples(rows))
