"""Who is calling: the verified token's info, and the checks every service shares."""

from __future__ import annotations

from scheduler.services.errors import ForbiddenError
from scheduler.store.tokens import TokenInfo, TokenRole

Principal = TokenInfo


def require_role(principal: Principal, *roles: TokenRole) -> None:
    """Raise ForbiddenError unless the principal has one of ``roles``."""
    if principal.role not in roles:
        allowed = " or ".join(r.value for r in roles)
        raise ForbiddenError(
            f"token {principal.name!r} has role {principal.role.value}; this needs {allowed}"
        )


def require_vc(principal: Principal, vc: str) -> None:
    """Raise ForbiddenError unless the principal may use virtual cluster ``vc``."""
    require_role(principal, TokenRole.ADMIN, TokenRole.USER)
    if not principal.may_use_vc(vc):
        mine = ", ".join(principal.vcs) or "none"
        raise ForbiddenError(f"token {principal.name!r} may not use vc {vc!r} (its vcs: {mine})")
