"""Fixtures: a seeded store on a real redis-server and the API under a real uvicorn."""

from __future__ import annotations

import httpx
import pytest
from live import Env, make_env, serve


@pytest.fixture()
def env(redis_url: str, tmp_path) -> Env:
    return make_env(redis_url, tmp_path)


@pytest.fixture()
def api(env: Env):
    """``(base_url, env)`` of a running API."""
    with serve(env) as url:
        yield url, env


@pytest.fixture()
def http(api):
    """An httpx client factory: ``http(token)`` (None for no Authorization header)."""
    url, _ = api
    clients = []

    def make(token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.Client(base_url=url, headers=headers, timeout=30)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
