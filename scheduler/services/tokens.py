"""Token service: list, revoke and rotate API tokens (admin only).

Creating tokens stays on the master (``pasture admin token create``, talking to Redis):
the first admin token cannot come from the API. A secret is returned only by a rotation,
once; listings never hold secrets.
"""

from __future__ import annotations

from typing import Any

from scheduler.services.errors import InvalidSpecError, NotFoundError
from scheduler.services.principal import Principal, require_role
from scheduler.store.tokens import DAY_S, TokenInfo, TokenRole, TokenStore


def token_dict(info: TokenInfo, now: float) -> dict[str, Any]:
    """``{name, role, vcs, created, expires (epoch s), expired}`` of a token."""
    return {
        "name": info.name,
        "role": info.role.value,
        "vcs": list(info.vcs),
        "created": info.created,
        "expires": info.expires,
        "expired": info.expired(now),
    }


class TokenService:
    """Admin use cases on tokens. Args: tokens: the token store."""

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens

    def list(self, principal: Principal) -> list[dict[str, Any]]:
        """Every token (expired ones too), sorted by name. Raises ForbiddenError."""
        require_role(principal, TokenRole.ADMIN)
        now = self.tokens.now()
        return [token_dict(t, now) for t in self.tokens.list()]

    def revoke(self, principal: Principal, name: str) -> None:
        """Delete the token ``name``. Raises ForbiddenError, NotFoundError."""
        require_role(principal, TokenRole.ADMIN)
        if not self.tokens.revoke(name):
            raise NotFoundError(f"token {name!r} not found")

    def rotate(
        self, principal: Principal, name: str, ttl_days: float | None = None
    ) -> dict[str, Any]:
        """A new secret for the token ``name`` (the old one stops working at once), valid
        ``ttl_days`` (the store's default when None, at most its maximum).

        Returns:
            :func:`token_dict` plus ``token`` (the new secret, shown this once).

        Raises:
            ForbiddenError, NotFoundError, InvalidSpecError (422: a lifetime the store refuses).
        """
        require_role(principal, TokenRole.ADMIN)
        # A lifetime over the maximum is cut to it (as Vault caps a TTL at max_ttl): the
        # answer's ``expires`` says what was granted.
        ttl_s = None if ttl_days is None else min(ttl_days * DAY_S, self.tokens.max_ttl_s)
        try:
            secret = self.tokens.rotate(name, ttl_s=ttl_s)
        except ValueError as exc:
            problem = {"loc": ["body", "ttl_days"], "msg": str(exc), "type": "value_error"}
            raise InvalidSpecError(str(exc), [problem]) from None
        if secret is None:
            raise NotFoundError(f"token {name!r} not found")
        info = self.tokens.get(name)
        if info is None:  # revoked between the rotation and this read
            raise NotFoundError(f"token {name!r} not found")
        return {**token_dict(info, self.tokens.now()), "token": secret}
