"""Virtual cluster service: list VCs with guarantee, used and borrowed resources."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from scheduler.services.principal import Principal, require_role
from scheduler.services.records import as_dict
from scheduler.store.tokens import TokenRole

if TYPE_CHECKING:
    from scheduler.store import Store


class VcService:
    """Use cases on virtual clusters. Args: store: the backend store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def list(self, principal: Principal) -> list[dict[str, Any]]:
        """Every VC: ``{name, guarantee, max, can_borrow, used, borrowed, ...}``.

        Resources are ``{cpu_m (millicores), memory (bytes), gpu}`` as the store gives them.
        """
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        vcs: list[dict[str, Any]] = as_dict(self.store.vc_usage())
        return vcs

    def names(self, principal: Principal) -> builtins.list[str]:
        """The VC names the caller may use, sorted: every configured VC for an admin, the
        token's own VCs for a user (the jobs list's VC filter offers these)."""
        require_role(principal, TokenRole.ADMIN, TokenRole.USER)
        if principal.role is TokenRole.ADMIN:
            return sorted(self.store.vcs())
        return sorted(principal.vcs)
