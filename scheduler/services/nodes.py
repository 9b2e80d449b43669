"""Node service: list, cordon, uncordon, drain.

Reading nodes is open to every role; changing a node's state needs an admin or agent
token (agent tokens are what automation such as the on-prem Pulumi stack uses to drain).
"""

from __future__ import annotations

from typing import Any

from scheduler.services import backend
from scheduler.services.errors import NotFoundError
from scheduler.services.principal import Principal, require_role
from scheduler.services.records import as_dict
from scheduler.store.tokens import TokenRole

# action -> the NodeState value (scheduler.core.model.NodeState) the store records.
ACTIONS = {"cordon": "cordoned", "uncordon": "ready", "drain": "draining"}


class NodeService:
    """Use cases on nodes. Args: store: the backend store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def list(self, principal: Principal) -> list[dict]:
        """Every node: name, address, state, capacity, allocated, labels, last heartbeat."""
        return as_dict(self.store.list_nodes())

    def get(self, principal: Principal, name: str) -> dict:
        """One node with its ``events`` (automatic cordons...). Raises NotFoundError for an
        unknown node."""
        node = self.store.get_node(name)
        if node is None:
            raise NotFoundError(f"node {name!r} not found")
        return {**as_dict(node), "events": self.store.node_events(name)}

    def set_state(self, principal: Principal, name: str, action: str) -> dict:
        """Cordon (no new tasks), uncordon (ready) or drain (cordon and move tasks off).

        Args:
            action: ``cordon``, ``uncordon`` or ``drain``.

        Raises:
            ForbiddenError: a user token. NotFoundError: unknown node.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.AGENT)
        try:
            self.store.set_node_state(name, ACTIONS[action], reason=f"{action} by {principal.name}")
        except backend.not_found_errors():
            raise NotFoundError(f"node {name!r} not found") from None
        return self.get(principal, name)
