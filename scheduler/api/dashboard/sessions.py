"""Dashboard sessions: a server-side record in Redis per login, with its CSRF token.

A login exchanges an API token (the same tokens as the REST API) for a random session id
kept in a ``Secure; HttpOnly; SameSite=Strict`` cookie. Redis holds, under
``<prefix>dashboard:session:<sha256(session id)>`` (so a Redis dump does not reveal
usable cookies), the token's name and creation time and the session's CSRF token, with a
sliding TTL of ``ttl_s`` seconds. Each request re-reads the token by name: a revoked (or
re-issued) token ends its sessions at once. The CSRF token is a synchronizer token: every
state-changing form carries it in a hidden field and the server compares it in constant
time with the session's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from scheduler.store.tokens import TokenInfo, TokenStore

COOKIE = "pasture_session"
LOGIN_COOKIE = "pasture_login_csrf"  # double-submit token of the login form (no session yet)
DEFAULT_TTL_S = 8 * 3600


@dataclass(frozen=True)
class Session:
    """A live dashboard session: who (the token's info) and its CSRF token."""

    sid: str
    who: TokenInfo
    csrf: str


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class SessionStore:
    """Create, read and end dashboard sessions.

    Args:
        client: redis-py client (``decode_responses`` either way).
        tokens: the API token store (logins are checked against it).
        prefix: key prefix shared with the store (``pasture:``).
        ttl_s: idle seconds after which a session expires (refreshed on each request).
    """

    def __init__(
        self,
        client: Any,
        tokens: TokenStore,
        prefix: str = "pasture:",
        ttl_s: int = DEFAULT_TTL_S,
    ) -> None:
        self.r = client
        self.tokens = tokens
        self.prefix = prefix
        self.ttl_s = ttl_s

    def _key(self, sid: str) -> str:
        return f"{self.prefix}dashboard:session:{hashlib.sha256(sid.encode()).hexdigest()}"

    def login(self, token: str) -> Session | None:
        """A new session for a valid admin or user token; None for an unknown, revoked or
        agent token (agents have no business in the dashboard)."""
        info = self.tokens.verify(token.strip())
        if info is None or info.role.value == "agent":
            return None
        sid = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        key = self._key(sid)
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "token": info.name,
                "token_created": repr(info.created),
                "csrf": csrf,
                "created": repr(time.time()),
            },
        )
        pipe.expire(key, self.ttl_s)
        pipe.execute()
        return Session(sid, info, csrf)

    def expired_at(self, token: str) -> float | None:
        """When ``token`` expired (epoch seconds); None when it is unknown, revoked or
        valid (the login page says "expired on <date>" instead of "unknown")."""
        return self.tokens.expired_at(token.strip())

    def get(self, sid: str | None) -> Session | None:
        """The session of cookie value ``sid``; None when unknown, expired, or its token was
        revoked or re-issued since login. Refreshes the TTL."""
        if not sid or len(sid) > 100:
            return None
        key = self._key(sid)
        raw = {_s(k): _s(v) for k, v in self.r.hgetall(key).items()}
        if not raw.get("token"):
            return None
        info = self.tokens.get(raw["token"])
        if info is None or repr(info.created) != raw.get("token_created"):
            self.r.delete(key)
            return None
        self.r.expire(key, self.ttl_s)
        return Session(sid, info, raw["csrf"])

    def logout(self, sid: str) -> None:
        """End the session (idempotent)."""
        self.r.delete(self._key(sid))


def csrf_ok(expected: str | None, given: str | None) -> bool:
    """Constant-time comparison of a form's CSRF token with the expected one."""
    return bool(expected) and bool(given) and hmac.compare_digest(str(expected), str(given))
