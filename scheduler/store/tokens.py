"""API tokens in Redis: create, verify, list, revoke.

A token is ``secrets.token_urlsafe(32)`` (256 random bits). Only its SHA-256 digest is
stored. A plain, unsalted hash is enough here because the secret is high-entropy and
machine-generated: nobody can brute-force 2**256 inputs, and a salted slow hash (bcrypt,
argon2) exists to protect low-entropy, human-chosen passwords, which tokens are not. The
digest also makes verification one O(1) key lookup.

Keys (prefix ``pasture:`` by default)::

    pasture:token:<sha256 hex>   hash  {name, role, vcs (JSON list), created (epoch s)}
    pasture:token-names          hash  name -> sha256 hex   (names are unique)

Roles:
    admin  every endpoint, every VC.
    user   job endpoints for the VCs listed in ``vcs``; read-only cluster views.
    agent  node endpoints only (the agents themselves talk to Redis directly; agent tokens
           are for automation such as the on-prem Pulumi stack draining a node).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum

import redis

TOKEN_BYTES = 32


class TokenRole(StrEnum):
    """What a token may do (see the module docstring)."""

    ADMIN = "admin"
    USER = "user"
    AGENT = "agent"


class TokenExistsError(ValueError):
    """A token with this name already exists (names are unique)."""


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """What is known about a token, never the secret itself.

    Attributes:
        name: unique, human-chosen name ("alice", "ci", "pulumi-onprem").
        role: see :class:`TokenRole`.
        vcs: virtual clusters a ``user`` token may use; ignored for admin and agent.
        created: epoch seconds.
    """

    name: str
    role: TokenRole
    vcs: tuple[str, ...] = field(default_factory=tuple)
    created: float = 0.0

    def may_use_vc(self, vc: str) -> bool:
        """True when this token may submit to / read jobs of ``vc``."""
        return self.role is TokenRole.ADMIN or (self.role is TokenRole.USER and vc in self.vcs)


def hash_token(token: str) -> str:
    """SHA-256 hex digest of a token (64 characters)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenStore:
    """API tokens kept in Redis as hashes of their SHA-256 digest.

    Args:
        client: a redis-py client (``decode_responses`` may be either).
        prefix: key prefix, ``pasture:`` unless several clusters share one Redis.
    """

    def __init__(self, client: redis.Redis, prefix: str = "pasture:") -> None:
        self._r = client
        self._prefix = prefix
        self._names_key = f"{prefix}token-names"

    def _token_key(self, digest: str) -> str:
        return f"{self._prefix}token:{digest}"

    def create(
        self,
        name: str,
        role: TokenRole | str,
        vcs: list[str] | tuple[str, ...] = (),
        *,
        if_missing: bool = False,
    ) -> str | None:
        """Create a token and return its secret (shown once, never stored).

        Args:
            name: unique token name, 1..64 characters.
            role: ``admin``, ``user`` or ``agent``.
            vcs: VCs a user token may use (at least one for role ``user``).
            if_missing: when a token of that name exists, do nothing and return None
                (idempotent playbooks).

        Raises:
            ValueError: bad name, unknown role, or a user token without VCs.
            TokenExistsError: the name is taken and ``if_missing`` is False.
        """
        if not name or len(name) > 64 or not name.isprintable() or name.strip() != name:
            raise ValueError(f"token name: expected 1..64 printable characters, got {name!r}")
        try:
            role = TokenRole(role)
        except ValueError:
            choices = ", ".join(r.value for r in TokenRole)
            raise ValueError(f"token role: expected one of {choices}, got {role!r}") from None
        vcs = tuple(dict.fromkeys(vcs))
        if role is TokenRole.USER and not vcs:
            raise ValueError("token vcs: a user token needs at least one VC (--vc NAME)")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        digest = hash_token(token)
        # HSETNX on the name index makes "create unless the name exists" atomic.
        if not self._r.hsetnx(self._names_key, name, digest):
            if if_missing:
                return None
            raise TokenExistsError(f"token name {name!r} exists; revoke it first")
        self._r.hset(
            self._token_key(digest),
            mapping={
                "name": name,
                "role": role.value,
                "vcs": json.dumps(list(vcs)),
                "created": repr(time.time()),
            },
        )
        return token

    def ping(self) -> bool:
        """True when Redis answers (raises redis.ConnectionError otherwise)."""
        return bool(self._r.ping())

    def verify(self, token: str) -> TokenInfo | None:
        """The token's info, or None when the token is unknown or revoked."""
        if not token:
            return None
        raw = self._r.hgetall(self._token_key(hash_token(token)))
        if not raw:
            return None
        return _info(raw)

    def get(self, name: str) -> TokenInfo | None:
        """Info of the token called ``name``, None when there is none."""
        digest = self._r.hget(self._names_key, name)
        if digest is None:
            return None
        raw = self._r.hgetall(self._token_key(_s(digest)))
        return _info(raw) if raw else None

    def list(self) -> list[TokenInfo]:
        """Every token's info, sorted by name."""
        out = []
        for _, digest in sorted(self._r.hgetall(self._names_key).items()):
            raw = self._r.hgetall(self._token_key(_s(digest)))
            if raw:
                out.append(_info(raw))
        return sorted(out, key=lambda t: t.name)

    def revoke(self, name: str) -> bool:
        """Delete the token called ``name``; False when there was none."""
        digest = self._r.hget(self._names_key, name)
        if digest is None:
            return False
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(self._token_key(_s(digest)))
        pipe.hdel(self._names_key, name)
        pipe.execute()
        return True


def _s(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _info(raw: dict) -> TokenInfo:
    d = {_s(k): _s(v) for k, v in raw.items()}
    return TokenInfo(
        name=d["name"],
        role=TokenRole(d["role"]),
        vcs=tuple(json.loads(d.get("vcs") or "[]")),
        created=float(d.get("created") or 0.0),
    )
