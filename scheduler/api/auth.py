"""Bearer-token authentication: every route but /healthz depends on :func:`principal`."""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from scheduler.store.tokens import TokenInfo

_bearer = HTTPBearer(auto_error=False, description="an API token (pasture admin token create)")


def principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> TokenInfo:
    """The verified token of the request.

    Raises:
        HTTPException 401: no ``Authorization: Bearer <token>`` header, or an unknown or
            revoked token.
    """
    if credentials is None or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    info = request.app.state.tokens.verify(credentials.credentials)
    if info is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "unknown or revoked token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return info
