"""Shared fixtures: a real redis-server on a free port in a temp dir."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (bind port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(data_dir: Path) -> tuple[subprocess.Popen, str]:
    """Start redis-server from PATH on a free port with its data in ``data_dir``.

    Returns (process, url). Raises RuntimeError when it does not answer within 10 s.
    """
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not on PATH (make test installs it)")
    port = free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            redis.Redis.from_url(url).ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real redis-server private to this test session (flushed per test: use
    ``redis_url``)."""
    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture()
def redis_url(redis_server: str) -> str:
    """The session's redis-server, flushed before the test."""
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    return redis_server
