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
