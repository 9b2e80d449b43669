"""Admin routes: API tokens (list, revoke, rotate). Admin tokens only (403 otherwise)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request, Response

from scheduler.api.auth import principal
from scheduler.api.responses import BAD_JSON, FORBIDDEN, INVALID, NOT_FOUND, TOO_LARGE, errors
from scheduler.api.schemas import RotateIn, TokenOut, TokenSecretOut
from scheduler.services.tokens import TokenService
from scheduler.store.tokens import TokenInfo

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])


@router.get("/tokens", response_model=list[TokenOut], responses=errors(FORBIDDEN))
def list_tokens(request: Request, who: TokenInfo = Depends(principal)) -> list[dict[str, Any]]:
    """Every token's name, role, VCs, creation and expiry (epoch s); never a secret."""
    tokens: TokenService = request.app.state.token_service
    return tokens.list(who)


@router.delete(
    "/tokens/{name}",
    status_code=204,
    response_class=Response,
    responses=errors(FORBIDDEN, NOT_FOUND),
)
def revoke_token(name: str, request: Request, who: TokenInfo = Depends(principal)) -> Response:
    """Revoke the token ``name`` (204); its dashboard sessions end with it."""
    request.app.state.token_service.revoke(who, name)
    request.app.state.token_cache.clear()  # the revoked secret stops at once here
    return Response(status_code=204)


@router.post(
    "/tokens/{name}/rotate",
    response_model=TokenSecretOut,
    responses=errors(BAD_JSON, FORBIDDEN, NOT_FOUND, TOO_LARGE, INVALID),
)
def rotate_token(
    name: str,
    request: Request,
    options: RotateIn | None = Body(None),
    who: TokenInfo = Depends(principal),
) -> dict[str, Any]:
    """A new secret for ``name`` (returned this once), with the same role and VCs; the old
    secret stops working at once. ``ttl_days`` defaults to ``api.token_ttl_days``; a longer
    one than ``api.token_max_ttl_days`` is cut to it (``expires`` says what was granted)."""
    ttl = options.ttl_days if options is not None else None
    tokens: TokenService = request.app.state.token_service
    rotated = tokens.rotate(who, name, ttl)
    request.app.state.token_cache.clear()  # the old secret stops at once here
    return rotated
