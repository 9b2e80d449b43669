"""Cluster status service: one summary of nodes, jobs and resources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler.services.principal import Principal, require_role
from scheduler.services.records import as_dict
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.store import Store


class StatusService:
    """Cluster summary. Args: store: the backend store."""

    def __init__(self, store: Store, cluster_name: str = "") -> None:
        self.store = store
        self.cluster_name = cluster_name

    def status(self, principal: Principal | None = None) -> dict[str, Any]:
        """``{cluster, nodes: {state: n}, jobs: {state: n}, capacity, allocated, ...}``."""
        if principal is not None:
            require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        out: dict[str, Any] = as_dict(self.store.cluster_status())
        out.setdefault("cluster", self.cluster_name)
        return out

    def now(self) -> float:
        """The cluster's clock: the store's (Redis server) time in seconds since the epoch,
        the clock every stored time (created, heartbeat, start_time...) is taken from."""
        return self.store.now()
