"""An agent whose credentials the store refuses (a promoted replica or a restarted Redis
without the node's run-time ACL user) exits with status 3 after a few refusals, so that
its supervisor restarts it with fresh ones (on AKS the start exchanges its token again)."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from scheduler.agent.agent import AUTH_REFUSALS_BEFORE_EXIT, Agent
from scheduler.settings import AgentSettings


def agent(tmp_path, redis_url: str, password: str) -> Agent:
    settings = AgentSettings(
        node_name="n1",
        redis={"url": redis_url, "username": "node-n1", "password": password},
        share_dir=str(tmp_path / "share"),
        work_dir=str(tmp_path / "work"),
        executor="process",
        heartbeat_interval_s=0.1,
        lease_s=5.0,
        resources={"cpu": 1, "memory": "1Gi"},
    )
    return Agent(settings)


def run_until_exit(a: Agent, timeout: float = 20.0) -> int | None:
    """Run the agent in a thread; its exit status (None: still running at ``timeout``)."""
    out: list[int | None] = []

    def body() -> None:
        try:
            a.run_forever(stop)
        except SystemExit as exc:
            out.append(int(exc.code or 0))

    stop = threading.Event()
    th = threading.Thread(target=body, daemon=True)
    th.start()
    th.join(timeout)
    stop.set()
    th.join(10)
    return out[0] if out else None


@pytest.fixture()
def admin(redis_url):
    r = redis.Redis.from_url(redis_url)
    r.acl_setuser("node-n1", enabled=True, passwords=["+right"], keys=["*"], commands=["+@all"])
    yield r
    r.acl_deluser("node-n1")


def test_refused_at_registration_it_exits_with_3(tmp_path, redis_url, admin):
    started = time.monotonic()
    assert run_until_exit(agent(tmp_path, redis_url, "wrong")) == 3
    assert time.monotonic() - started < 15


def test_refused_after_its_user_vanished_it_exits_with_3(tmp_path, redis_url, admin):
    a = agent(tmp_path, redis_url, "right")

    def drop_user_once_registered() -> None:
        deadline = time.monotonic() + 10
        while not admin.exists("pasture:node:n1") and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # a few accepted heartbeats first
        admin.acl_deluser("node-n1")  # as a failover to a replica without it would

    threading.Thread(target=drop_user_once_registered, daemon=True).start()
    assert run_until_exit(a) == 3
    assert a._auth_failures >= AUTH_REFUSALS_BEFORE_EXIT
