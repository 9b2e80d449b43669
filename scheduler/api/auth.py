"""Bearer-token authentication: every route but /healthz depends on :func:`principal`.

A request without a token answers 401; one whose token is unknown, revoked or expired
answers 401 and counts as a failure against its client address; an address over the
failure limit answers 429 with ``Retry-After`` (see :mod:`scheduler.api.ratelimit`).
"""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from scheduler.store.tokens import TokenInfo

_bearer = HTTPBearer(auto_error=False, description="an API token (pasture admin token create)")


def client_address(request: Request) -> str:
    """The client's address as the server saw it ("unknown" when the server gives none)."""
    return request.client.host if request.client else "unknown"


def refuse_if_blocked(request: Request) -> None:
    """Raise 429 (with ``Retry-After``) when the client's address has too many recent
    failed authentications."""
    wait = request.app.state.auth_limiter.retry_after(client_address(request))
    if wait is not None:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"too many failed authentications from this address; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def verify_token(request: Request, token: str) -> TokenInfo | None:
    """The token's info, None when it does not verify (the failure is counted).

    Raises:
        HTTPException 429: the client's address is blocked.
    """
    refuse_if_blocked(request)
    info = request.app.state.tokens.verify(token)
    if info is None:
        request.app.state.auth_limiter.failed(client_address(request))
    return info


def principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> TokenInfo:
    """The verified token of the request.

    Raises:
        HTTPException 401: no ``Authorization: Bearer <token>`` header, or an unknown,
            revoked or expired token.
        HTTPException 429: too many failed authentications from the client's address.
    """
    if credentials is None or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    info = verify_token(request, credentials.credentials)
    if info is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "unknown, revoked or expired token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return info
