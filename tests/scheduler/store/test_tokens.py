"""TokenStore against a real redis-server: only hashes are stored; roles, VCs, revoke."""

from __future__ import annotations

import hashlib

import pytest
import redis

from scheduler.store.tokens import TokenExistsError, TokenRole, TokenStore, hash_token


@pytest.fixture()
def tokens(redis_url) -> TokenStore:
    return TokenStore(redis.Redis.from_url(redis_url, decode_responses=True))


def test_secret_is_never_stored(tokens, redis_url):
    token = tokens.create("alice", "user", ["default", "default", "research"])
    assert len(token) >= 43  # 32 random bytes, base64url
    raw = redis.Redis.from_url(redis_url)
    stored = []
    for key in raw.keys("*"):
        assert raw.type(key) == b"hash"
        stored.append(key)
        for field, value in raw.hgetall(key).items():
            stored += [field, value]
    assert len(stored) > 4
    assert not any(token.encode() in item for item in stored)
    assert hashlib.sha256(token.encode()).hexdigest() == hash_token(token)
    assert raw.exists(f"pasture:token:{hash_token(token)}")
    info = tokens.verify(token)
    assert (info.name, info.role, info.vcs) == ("alice", TokenRole.USER, ("default", "research"))
    assert info.may_use_vc("research") and not info.may_use_vc("other")


def test_verify_rejects_unknown_and_revoked(tokens):
    token = tokens.create("ci", "admin")
    assert tokens.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert tokens.verify("") is None
    assert tokens.revoke("ci") is True
    assert tokens.verify(token) is None
    assert tokens.revoke("ci") is False


def test_names_are_unique_and_if_missing_is_a_no_op(tokens):
    first = tokens.create("agent", "agent")
    with pytest.raises(TokenExistsError):
        tokens.create("agent", "agent")
    assert tokens.create("agent", "admin", if_missing=True) is None
    assert tokens.verify(first).role is TokenRole.AGENT
    assert [t.name for t in tokens.list()] == ["agent"]


@pytest.mark.parametrize(
    ("name", "role", "vcs", "needle"),
    [
        ("", "admin", (), "token name"),
        (" x", "admin", (), "token name"),
        ("x" * 65, "admin", (), "token name"),
        ("bob", "root", (), "admin, user, agent"),
        ("bob", "user", (), "at least one VC"),
    ],
)
def test_bad_input_names_the_field(tokens, name, role, vcs, needle):
    with pytest.raises(ValueError, match=needle):
        tokens.create(name, role, vcs)
    assert tokens.list() == []


def test_admin_may_use_every_vc_and_agent_none(tokens):
    admin = tokens.verify(tokens.create("root", "admin"))
    agent = tokens.verify(tokens.create("node", "agent"))
    assert admin.may_use_vc("anything")
    assert not agent.may_use_vc("default")


def _clocked(redis_url, now):
    return TokenStore(
        redis.Redis.from_url(redis_url, decode_responses=True),
        default_ttl_s=10.0,
        max_ttl_s=100.0,
        clock=lambda: now[0],
    )


def test_tokens_expire_after_their_lifetime(redis_url):
    now = [1000.0]
    tokens = _clocked(redis_url, now)
    default = tokens.create("a", "admin")
    longer = tokens.create("b", "admin", ttl_s=100.0)
    assert tokens.get("a").expires == 1010.0
    now[0] = 1009.9
    assert tokens.verify(default).name == "a"
    now[0] = 1010.0
    assert tokens.verify(default) is None
    assert tokens.get("a") is None
    assert tokens.get("a", include_expired=True).expired(now[0])
    assert tokens.verify(longer).name == "b"
    assert [t.name for t in tokens.list()] == ["a", "b"]  # listed until revoked
    with pytest.raises(ValueError, match="at most"):
        tokens.create("c", "admin", ttl_s=101.0)
    with pytest.raises(ValueError, match="more than 0"):
        tokens.create("c", "admin", ttl_s=0)
    with pytest.raises(ValueError, match="default"):
        TokenStore(tokens._r, default_ttl_s=200.0, max_ttl_s=100.0)


def test_if_missing_replaces_an_expired_token_only(redis_url):
    now = [1000.0]
    tokens = _clocked(redis_url, now)
    first = tokens.create("agent", "agent")
    assert tokens.create("agent", "agent", if_missing=True) is None
    now[0] += 11
    second = tokens.create("agent", "agent", if_missing=True)
    assert second is not None and second != first
    assert tokens.verify(second).expires == now[0] + 10
    assert tokens.verify(first) is None


def test_rotate_keeps_name_role_vcs_and_kills_the_old_secret(redis_url):
    now = [1000.0]
    tokens = _clocked(redis_url, now)
    old = tokens.create("alice", "user", ["default", "research"])
    now[0] += 5
    new = tokens.rotate("alice", ttl_s=50.0)
    assert new and new != old
    assert tokens.verify(old) is None
    info = tokens.verify(new)
    assert (info.name, info.role, info.vcs) == ("alice", TokenRole.USER, ("default", "research"))
    assert (info.created, info.expires) == (1005.0, 1055.0)
    assert tokens.rotate("ghost") is None
    with pytest.raises(ValueError):
        tokens.rotate("alice", ttl_s=1000.0)
    assert tokens.verify(new) is not None  # a refused rotation changes nothing
    assert len(tokens.list()) == 1


def test_a_token_stored_before_expiries_expires_max_ttl_after_creation(redis_url):
    now = [1000.0]
    tokens = _clocked(redis_url, now)
    token = tokens.create("old", "admin")
    raw = redis.Redis.from_url(redis_url)
    raw.hdel(f"pasture:token:{hash_token(token)}", "expires")
    assert tokens.verify(token).expires == 1100.0
    now[0] = 1100.0
    assert tokens.verify(token) is None
