"""API tokens in Redis: create, verify, list, revoke, rotate; every token expires.

A token is ``secrets.token_urlsafe(32)`` (256 random bits). Only its SHA-256 digest is
stored. A plain, unsalted hash is enough here because the secret is high-entropy and
machine-generated: nobody can brute-force 2**256 inputs, and a salted slow hash (bcrypt,
argon2) exists to protect low-entropy, human-chosen passwords, which tokens are not. The
digest also makes verification one O(1) key lookup.

Every token has an expiry (``expires``, epoch seconds): ``default_ttl_s`` after creation
unless asked otherwise, never more than ``max_ttl_s`` (settings ``api.token_ttl_days`` and
``api.token_max_ttl_days``). An expired token verifies as None (the API answers 401) and
is listed as expired until it is revoked or rotated. A token stored before expiries
existed (no ``expires`` field) expires ``max_ttl_s`` after its creation.

Keys (prefix ``pasture:`` by default)::

    pasture:token:<sha256 hex>   hash  {name, role, vcs (JSON list), operates (JSON list),
                                        created, expires (epoch s)}
    pasture:token-names          hash  name -> sha256 hex   (names are unique)

Roles:
    admin  every endpoint, every VC.
    user   job endpoints for the VCs listed in ``vcs``; read-only cluster views. A user
           stops and deletes only the jobs it submitted, except in the VCs listed in
           ``operates`` (a subset of ``vcs``): there it is the VC's operator and may stop
           and delete every job (as ``scancel`` lets only the owner or an operator).
    agent  node endpoints only (the agents themselves talk to Redis directly; agent tokens
           are for automation such as the on-prem Pulumi stack draining a node).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis

TOKEN_BYTES = 32
DAY_S = 86400.0
DEFAULT_TTL_S = 90 * DAY_S
MAX_TTL_S = 365 * DAY_S


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
        created: epoch seconds (reset by a rotation).
        expires: epoch seconds after which the token no longer verifies.
        operates: VCs (of ``vcs``) whose every job a ``user`` token may stop and delete,
            not only its own: the VC's operator role.
    """

    name: str
    role: TokenRole
    vcs: tuple[str, ...] = field(default_factory=tuple)
    created: float = 0.0
    expires: float = float("inf")
    operates: tuple[str, ...] = field(default_factory=tuple)

    def may_control(self, vc: str, owner: str) -> bool:
        """True when this token may stop or delete a job of ``vc`` submitted by token
        ``owner``: an admin, the job's owner (in a VC it may use), or the VC's operator."""
        if self.role is TokenRole.ADMIN:
            return True
        return self.may_use_vc(vc) and (owner == self.name or vc in self.operates)

    def may_use_vc(self, vc: str) -> bool:
        """True when this token may submit to / read jobs of ``vc``."""
        return self.role is TokenRole.ADMIN or (self.role is TokenRole.USER and vc in self.vcs)

    def expired(self, now: float) -> bool:
        """True when ``now`` (epoch s) is past the expiry."""
        return now >= self.expires


def hash_token(token: str) -> str:
    """SHA-256 hex digest of a token (64 characters)."""
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


def check_name(name: str) -> str:
    """Return ``name`` when it is a valid token name (1..64 printable characters, no
    surrounding blanks); raise ValueError naming the field otherwise."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > 64
        or not name.isprintable()
        or name.strip() != name
    ):
        raise ValueError(f"token name: expected 1..64 printable characters, got {name!r}")
    return name


class TokenStore:
    """API tokens kept in Redis as hashes of their SHA-256 digest.

    Args:
        client: a redis-py client (``decode_responses`` may be either).
        prefix: key prefix, ``pasture:`` unless several clusters share one Redis.
        default_ttl_s: lifetime (seconds) of a token created without one.
        max_ttl_s: the longest lifetime (seconds) a token may be given.
        clock: epoch seconds now (tests pass a fake one).

    Raises:
        ValueError: a lifetime that is not positive, or a default over the maximum.
    """

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "pasture:",
        *,
        default_ttl_s: float = DEFAULT_TTL_S,
        max_ttl_s: float = MAX_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < default_ttl_s <= max_ttl_s:
            raise ValueError(
                f"token lifetime: expected 0 < default ({default_ttl_s} s) <= max ({max_ttl_s} s)"
            )
        self._r = client
        self._prefix = prefix
        self._names_key = f"{prefix}token-names"
        self.default_ttl_s = float(default_ttl_s)
        self.max_ttl_s = float(max_ttl_s)
        self._clock = clock

    @classmethod
    def from_settings(cls, client: redis.Redis, api_settings: object | None) -> TokenStore:
        """A store with the lifetimes of ``api_settings`` (``token_ttl_days``,
        ``token_max_ttl_days``; the defaults when missing)."""
        ttl = getattr(api_settings, "token_ttl_days", None)
        most = getattr(api_settings, "token_max_ttl_days", None)
        return cls(
            client,
            default_ttl_s=float(ttl) * DAY_S if ttl else DEFAULT_TTL_S,
            max_ttl_s=float(most) * DAY_S if most else MAX_TTL_S,
        )

    def _token_key(self, digest: str) -> str:
        return f"{self._prefix}token:{digest}"

    def _expiry(self, now: float, ttl_s: float | None) -> float:
        ttl = self.default_ttl_s if ttl_s is None else float(ttl_s)
        if not 0 < ttl <= self.max_ttl_s:
            raise ValueError(
                f"token lifetime: expected more than 0 and at most {self.max_ttl_s / DAY_S:g} "
                f"days, got {ttl / DAY_S:g} days"
            )
        return now + ttl

    def create(
        self,
        name: str,
        role: TokenRole | str,
        vcs: list[str] | tuple[str, ...] = (),
        *,
        if_missing: bool = False,
        ttl_s: float | None = None,
        operates: list[str] | tuple[str, ...] = (),
    ) -> str | None:
        """Create a token and return its secret (shown once, never stored).

        Args:
            name: unique token name, 1..64 characters.
            role: ``admin``, ``user`` or ``agent``.
            vcs: VCs a user token may use (at least one for role ``user``).
            if_missing: when a live token of that name exists, do nothing and return None
                (idempotent playbooks); an expired one is replaced by a new token.
            ttl_s: lifetime in seconds (``default_ttl_s`` when None, at most ``max_ttl_s``).
            operates: VCs (each one of ``vcs``) where a user token is the operator: it
                may stop and delete other users' jobs there.

        Raises:
            ValueError: bad name, unknown role, a user token without VCs, ``operates``
                naming a VC not in ``vcs`` or given to a role other than user, a bad
                lifetime.
            TokenExistsError: the name is taken and ``if_missing`` is False.
        """
        check_name(name)
        try:
            role = TokenRole(role)
        except ValueError:
            choices = ", ".join(r.value for r in TokenRole)
            raise ValueError(f"token role: expected one of {choices}, got {role!r}") from None
        vcs = tuple(dict.fromkeys(vcs))
        if role is TokenRole.USER and not vcs:
            raise ValueError("token vcs: a user token needs at least one VC (--vc NAME)")
        operates = tuple(dict.fromkeys(operates))
        if operates and role is not TokenRole.USER:
            raise ValueError(
                f"token operates: only a user token operates VCs (an {role.value} token"
                f" may already do what its role allows), got {list(operates)}"
            )
        if not set(operates) <= set(vcs):
            raise ValueError(
                f"token operates: expected VCs of the token's vcs {list(vcs)},"
                f" got {sorted(set(operates) - set(vcs))}"
            )
        now = self._clock()
        expires = self._expiry(now, ttl_s)
        if if_missing:
            old = self.get(name, include_expired=True)
            if old is not None and old.expired(now):
                self.revoke(name)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        digest = hash_token(token)
        # HSETNX on the name index makes "create unless the name exists" atomic.
        if not self._r.hsetnx(self._names_key, name, digest):
            if if_missing:
                return None
            raise TokenExistsError(f"token name {name!r} exists; revoke or rotate it")
        self._r.hset(
            self._token_key(digest),
            mapping={
                "name": name,
                "role": role.value,
                "vcs": json.dumps(list(vcs)),
                "operates": json.dumps(list(operates)),
                "created": repr(now),
                "expires": repr(expires),
            },
        )
        return token

    def now(self) -> float:
        """The store's clock: epoch seconds that expiries are compared with."""
        return self._clock()

    def ping(self) -> bool:
        """True when Redis answers (raises redis.ConnectionError otherwise)."""
        return bool(self._r.ping())

    def _lookup(self, token: str) -> TokenInfo | None:
        """The stored info of ``token`` (expired or not), or None when it is unknown or
        revoked (or not a token: empty, over 256 characters)."""
        if not token or len(token) > 256:
            return None
        raw = self._r.hgetall(self._token_key(hash_token(token)))
        return self._info(raw) if raw else None

    def verify(self, token: str) -> TokenInfo | None:
        """The token's info, or None when the token is unknown, revoked or expired."""
        info = self._lookup(token)
        return None if info is None or info.expired(self._clock()) else info

    def expired_at(self, token: str) -> float | None:
        """When ``token`` expired (epoch seconds), or None when it is unknown, revoked or
        still valid: lets a login say "expired on <date>" rather than "unknown"."""
        info = self._lookup(token)
        return info.expires if info is not None and info.expired(self._clock()) else None

    def get(self, name: str, *, include_expired: bool = False) -> TokenInfo | None:
        """Info of the token called ``name``; None when there is none (or it expired,
        unless ``include_expired``)."""
        digest = self._r.hget(self._names_key, name)
        if digest is None:
            return None
        raw = self._r.hgetall(self._token_key(_s(digest)))
        if not raw:
            return None
        info = self._info(raw)
        if info.expired(self._clock()) and not include_expired:
            return None
        return info

    def list(self) -> list[TokenInfo]:
        """Every token's info, expired ones included, sorted by name."""
        out = []
        for _, digest in sorted(self._r.hgetall(self._names_key).items()):
            raw = self._r.hgetall(self._token_key(_s(digest)))
            if raw:
                out.append(self._info(raw))
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

    def rotate(self, name: str, *, ttl_s: float | None = None) -> str | None:
        """Replace the secret of the token called ``name`` (expired or not) with a new one.

        The old secret stops verifying at once; name, role and VCs are kept; ``created``
        is now (dashboard sessions of the old secret end) and ``expires`` is ``ttl_s``
        (``default_ttl_s`` when None) from now.

        Returns:
            The new secret (shown once), or None when there is no token of that name.

        Raises:
            ValueError: a bad lifetime.
        """
        now = self._clock()
        expires = self._expiry(now, ttl_s)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        digest = hash_token(token)

        def tx(pipe: redis.client.Pipeline) -> bool:
            old = pipe.hget(self._names_key, name)
            if old is None:
                return False
            raw = pipe.hgetall(self._token_key(_s(old)))
            if not raw:
                return False
            info = self._info(raw)
            pipe.multi()
            pipe.delete(self._token_key(_s(old)))
            pipe.hset(self._names_key, name, digest)
            pipe.hset(
                self._token_key(digest),
                mapping={
                    "name": info.name,
                    "role": info.role.value,
                    "vcs": json.dumps(list(info.vcs)),
                    "operates": json.dumps(list(info.operates)),
                    "created": repr(now),
                    "expires": repr(expires),
                },
            )
            return True

        done = self._r.transaction(tx, self._names_key, value_from_callable=True)
        return token if done else None

    def _info(self, raw: dict[str, Any]) -> TokenInfo:
        d = {_s(k): _s(v) for k, v in raw.items()}
        created = float(d.get("created") or 0.0)
        expires = d.get("expires")
        return TokenInfo(
            name=d["name"],
            role=TokenRole(d["role"]),
            vcs=tuple(json.loads(d.get("vcs") or "[]")),
            created=created,
            expires=float(expires) if expires else created + self.max_ttl_s,
            operates=tuple(json.loads(d.get("operates") or "[]")),
        )


def _s(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
