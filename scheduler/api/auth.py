"""Bearer-token authentication: every route but /healthz depends on :func:`principal`.

A request without a token answers 401; one whose token is unknown, revoked or expired
answers 401 and counts as a failure against its client address and that token; the same
token from the same address over the failure limit answers 429 with ``Retry-After``, other
tokens from that address are not affected unless the address as a whole failed
``api.auth_failures_per_address`` times (then only tokens not verified recently answer
429). A verified token over its request limit answers 429 too (see :mod:`scheduler.api.ratelimit`).

Verified tokens are kept in this process for at most ``api.token_cache_s`` seconds
(:class:`TokenCache`, default 1 s), so that a client sending many requests costs one
Redis read a second instead of one a request (and the request is served without a hop to
a worker thread). What that changes: a token revoked or rotated away *outside* this
process (``pasture admin token revoke`` on the master, another API process) still
verifies here for at most ``token_cache_s`` seconds after the change; one revoked or
rotated through this process's own admin routes stops at once (they empty the cache).
Expiry is checked against the store's clock on every request, cached or not. Failed
verifications are never cached: each goes to Redis and counts against the address.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from scheduler.api.refusals import ANY_ROUTE, RefusalHold, credentials, route_of
from scheduler.settings import DEFAULT_TOKEN_CACHE_S
from scheduler.store.tokens import TokenInfo, TokenStore, hash_token

_bearer = HTTPBearer(auto_error=False, description="an API token (pasture admin token create)")

TOKEN_CACHE_ENTRIES = 4096


class TokenCache:
    """Tokens that verified in this process, each kept for at most ``ttl_s`` seconds.

    Keyed by the token's SHA-256 digest (as Redis keys it; the secret itself is not kept).
    Bounded to ``max_entries`` entries: when full, the oldest entry is dropped.

    Args:
        ttl_s: seconds an entry is trusted after it was read from Redis (0: no caching).
        max_entries: the most tokens kept (> 0).
        clock: monotonic seconds (tests pass a fake one).

    Raises:
        ValueError: a negative ``ttl_s`` or ``max_entries`` < 1.
    """

    def __init__(
        self,
        ttl_s: float = DEFAULT_TOKEN_CACHE_S,
        max_entries: int = TOKEN_CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s < 0 or max_entries < 1:
            raise ValueError(
                f"token cache: expected ttl_s >= 0 and max_entries >= 1, "
                f"got {ttl_s} and {max_entries}"
            )
        self.ttl_s = float(ttl_s)
        self.max_entries = int(max_entries)
        self._clock = clock
        self._entries: dict[str, tuple[float, TokenInfo]] = {}

    def get(self, token: str, now: float) -> TokenInfo | None:
        """The cached info of ``token``; None when not cached, older than ``ttl_s``, or
        expired at ``now`` (the store's epoch seconds)."""
        if not self.ttl_s or len(token) > 256:  # longer ones never verify: not hashed
            return None
        digest = hash_token(token)
        entry = self._entries.get(digest)
        if entry is None:
            return None
        read_at, info = entry
        if self._clock() - read_at >= self.ttl_s or info.expired(now):
            self._entries.pop(digest, None)
            return None
        return info

    def put(self, token: str, info: TokenInfo) -> None:
        """Keep ``info`` (just read from Redis) for ``token``."""
        if not self.ttl_s:
            return
        digest = hash_token(token)
        self._entries.pop(digest, None)
        while len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)))
        self._entries[digest] = (self._clock(), info)

    def knows(self, token: str) -> bool:
        """Whether ``token`` verified within ``ttl_s`` (its expiry is not checked here:
        the request that follows is verified as usual)."""
        if not self.ttl_s or len(token) > 256:
            return False
        entry = self._entries.get(hash_token(token))
        return entry is not None and self._clock() - entry[0] < self.ttl_s

    def clear(self) -> None:
        """Forget every token (after a revocation or rotation through this process)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def client_address(request: Request) -> str:
    """The client's address as the server saw it ("unknown" when the server gives none)."""
    return request.client.host if request.client else "unknown"


def refuse(request: Request, wait: int, what: str, route: str | None = ANY_ROUTE) -> HTTPException:
    """The 429 of :func:`too_many`, after holding the request's credential
    (:mod:`scheduler.api.refusals`) for ``wait`` seconds at most: on every route, or with
    ``route=None`` on the request's own route only."""
    held: RefusalHold | None = getattr(request.app.state, "refusals", None)
    if held is not None:
        bearer, sid = credentials(request.scope.get("headers", ()))
        if route is None:
            route = route_of(request.scope["method"], request.scope["path"])
        held.hold_credential(bearer, sid, wait, what, route)
    return too_many(wait, what)


def refuse_if_blocked(request: Request, token: str) -> None:
    """Raise 429 (with ``Retry-After``) when ``token`` failed too often from the client's
    address recently (other tokens from that address are not refused)."""
    wait = request.app.state.auth_limiter.retry_after(client_address(request), token)
    if wait is not None:
        what = "too many failed authentications with this token from this address"
        raise refuse(request, wait, what)


def refuse_if_address_blocked(request: Request) -> None:
    """Raise 429 (with ``Retry-After``) when the client's address is over its limit of
    failed authentications (any tokens): called before a token is looked up in Redis, never
    for a token this process verified recently (:class:`TokenCache`). The address is then
    held (:mod:`scheduler.api.refusals`) for credentials not seen valid recently."""
    address = client_address(request)
    wait = request.app.state.auth_limiter.address_retry_after(address)
    if wait is not None:
        what = "too many failed authentications from this address"
        held: RefusalHold | None = getattr(request.app.state, "refusals", None)
        if held is not None:
            held.hold_address(address, wait, what)
        raise too_many(wait, what)


def failed(request: Request, token: str) -> None:
    """Count a failed authentication of ``token`` from the client's address."""
    request.app.state.auth_limiter.failed(client_address(request), token)


def too_many(wait: int, what: str) -> HTTPException:
    """A 429 whose ``Retry-After`` is ``wait`` seconds."""
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"{what}; retry in {wait} s",
        headers={"Retry-After": str(wait)},
    )


def limit_request(request: Request, who: TokenInfo) -> None:
    """Count one request of the verified token ``who``; raise 429 over api.request_limit."""
    wait = request.app.state.token_limiter.request(who.name)
    if wait is not None:
        raise refuse(request, wait, f"token {who.name!r} is over its request limit")


def limit_submit(request: Request, who: TokenInfo) -> None:
    """Count one submit request of ``who``; raise 429 over api.submit_limit (its
    credential is then held on this route only: it may still read)."""
    wait = request.app.state.token_limiter.submit(who.name)
    if wait is not None:
        raise refuse(request, wait, f"token {who.name!r} is over its submit limit", route=None)


def verify_token(request: Request, token: str) -> TokenInfo | None:
    """The token's info read from Redis (no cache), None when it does not verify (the
    failure is counted). Blocking: call it from a worker thread.

    Raises:
        HTTPException 429: this token failed too often from the client's address, or the
            address did (any tokens).
    """
    refuse_if_blocked(request, token)
    refuse_if_address_blocked(request)
    tokens: TokenStore = request.app.state.tokens
    info = tokens.verify(token)
    if info is None:
        failed(request, token)
    return info


def _verify_or_expiry(request: Request, token: str) -> tuple[TokenInfo | None, float | None]:
    """:func:`verify_token`, and when it fails, when the token expired (None: unknown or
    revoked), in the same worker thread."""
    info = verify_token(request, token)
    if info is not None:
        return info, None
    return None, request.app.state.tokens.expired_at(token)


def _refusal(expired: float | None) -> str:
    """The 401 detail for a token that did not verify: "token expired on <UTC time>"
    when it is a real token past its expiry (only its holder can send it, so this tells
    no one else anything), else "unknown, revoked or expired token"."""
    if expired is None:
        return "unknown, revoked or expired token"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expired))
    return f"token expired on {when}"


async def principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> TokenInfo:
    """The verified token of the request: from this process's :class:`TokenCache` when it
    verified less than ``api.token_cache_s`` ago, else read from Redis in a worker thread.

    Raises:
        HTTPException 401: no ``Authorization: Bearer <token>`` header, or an unknown,
            revoked or expired token (an expired one says when it expired).
        HTTPException 429: this token failed too often from the client's address
            (checked before the cache), or the token is over its request limit.
    """
    if credentials is None or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    token = credentials.credentials
    state = request.app.state
    refuse_if_blocked(request, token)
    cache: TokenCache = state.token_cache
    info = cache.get(token, state.tokens.now())
    if info is None:
        info, expired = await anyio.to_thread.run_sync(_verify_or_expiry, request, token)
        if info is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                _refusal(expired),
                headers={"WWW-Authenticate": "Bearer"},
            )
        cache.put(token, info)
    limit_request(request, info)
    return info


async def submitter(request: Request, who: TokenInfo = Depends(principal)) -> TokenInfo:
    """:func:`principal` for the submit routes: also counts against api.submit_limit.

    Raises:
        HTTPException 429: the token is over its submit limit (nothing is submitted).
    """
    limit_submit(request, who)
    return who
