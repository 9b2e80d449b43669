"""The API's cache of verified tokens (``scheduler.api.auth.TokenCache``): bounded in
time and size, never trusts an expired token, keeps no secret."""

from __future__ import annotations

import pytest

from scheduler.api.auth import TokenCache
from scheduler.store.tokens import TokenInfo, TokenRole

ALICE = TokenInfo("alice", TokenRole.USER, ("default",), created=0.0, expires=1000.0)


def make(ttl_s: float = 1.0, max_entries: int = 4):
    now = [0.0]
    return TokenCache(ttl_s, max_entries, clock=lambda: now[0]), now


def test_entry_is_trusted_for_ttl_s_then_dropped():
    cache, mono = make(ttl_s=1.0)
    assert cache.get("secret-a", now=10.0) is None
    cache.put("secret-a", ALICE)
    assert cache.get("secret-a", now=10.0) is ALICE
    mono[0] = 0.99
    assert cache.get("secret-a", now=10.0) is ALICE
    mono[0] = 1.0
    assert cache.get("secret-a", now=10.0) is None
    assert len(cache) == 0
    assert cache.get("secret-b", now=10.0) is None


def test_expired_token_is_never_served_from_the_cache():
    cache, _ = make(ttl_s=30.0)
    cache.put("secret-a", ALICE)
    assert cache.get("secret-a", now=999.9) is ALICE
    assert cache.get("secret-a", now=1000.0) is None  # expires at 1000 (store's clock)
    assert len(cache) == 0


def test_size_bound_drops_the_oldest_and_keys_are_digests():
    cache, mono = make(max_entries=3)
    for i in range(5):
        mono[0] = i * 0.01
        cache.put(f"secret-{i}", ALICE)
    assert len(cache) == 3
    assert [cache.get(f"secret-{i}", now=0.0) for i in range(5)][:2] == [None, None]
    assert all(cache.get(f"secret-{i}", now=0.0) is ALICE for i in (2, 3, 4))
    assert not any("secret" in key for key in cache._entries)  # SHA-256 digests only
    cache.clear()
    assert len(cache) == 0


def test_zero_ttl_disables_and_bad_bounds_are_refused():
    cache, _ = make(ttl_s=0.0)
    cache.put("secret-a", ALICE)
    assert cache.get("secret-a", now=0.0) is None and len(cache) == 0
    with pytest.raises(ValueError, match="ttl_s >= 0"):
        TokenCache(-1.0)
    with pytest.raises(ValueError, match="max_entries >= 1"):
        TokenCache(1.0, 0)
    long = "x" * 257  # never verifies, so never looked up (nor hashed)
    assert cache.get(long, now=0.0) is None
