"""Shared fixtures: a real redis-server on a free port in a temp dir."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.dev import redis_server as redis_server_process


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real redis-server private to this test session (flushed per test: use
    ``redis_url``)."""
    with redis_server_process(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture()
def redis_url(redis_server: str) -> str:
    """The session's redis-server, flushed before the test."""
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    return redis_server
