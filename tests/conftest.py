"""Shared fixtures: a real redis-server on a free port in a temp dir; a session-end check
that no process a test started (directly or through a dev cluster's agents) is left."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

from scheduler.dev import redis_server as redis_server_process

# Every process started during the session inherits this variable (the process executor
# drops only PASTURE_* and REDIS* from a task's environment), so leftovers can be found
# even after they were re-parented to init.
MARK = "PYTEST_PASTURE_SESSION"
LEFTOVER_GRACE_S = 20.0
"""Seconds a leftover may take to exit by itself at session end (a task's lease watchdog
kills it when its agent's lease, 3 heartbeats of the test's agent, runs out)."""


# Container runtime helpers that outlive the CLI call that started them by design (podman's
# pause process, per-container monitors, network helpers): not the tests' processes.
RUNTIME_HELPERS = frozenset(
    {"conmon", "catatonit", "podman", "aardvark-dns", "slirp4netns", "pasta", "rootlessport"}
)


def _marked(mark: str) -> list[psutil.Process]:
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["pid", "status", "name"]):
        if p.info["pid"] == me or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if p.info["name"] in RUNTIME_HELPERS:
            continue
        try:
            if p.environ().get(MARK) == mark:
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Fail the session when a process started by a test outlives the session (after
    :data:`LEFTOVER_GRACE_S`); the leftovers are killed and named in the error."""
    mark = os.environ.setdefault(MARK, uuid.uuid4().hex)
    yield
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = _marked(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _marked(mark)
    if not left:
        return
    names = []
    for p in left:
        try:
            names.append(f"{p.pid}: {' '.join(p.cmdline())[:160]}")
            p.kill()
        except psutil.Error:
            continue
    if names:
        pytest.fail("processes left running by the tests (killed now):\n" + "\n".join(names))


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
