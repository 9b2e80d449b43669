"""Helpers shared by the API and CLI tests: a seeded store, tokens and a real uvicorn server.

Imported by ``tests/scheduler/api/conftest.py`` and ``tests/scheduler/cli/conftest.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from scheduler.api import create_app
from scheduler.api.server import LOOP_IMPL, BoundedHttpToolsProtocol
from scheduler.dev import free_port
from scheduler.settings import SchedulerSettings
from scheduler.store import NodeRecord, Store
from scheduler.store.tokens import TokenStore


@dataclass
class Env:
    """A seeded cluster state: settings, store, tokens by role and two registered nodes."""

    settings: SchedulerSettings
    store: Store
    tokens: TokenStore
    admin: str
    alice: str  # user token of vc "default"
    bob: str  # user token of vc "research"
    agent: str
    share: Path


def make_env(redis_url: str, tmp_path: Path, max_body_bytes: int = 1 << 20) -> Env:
    share = tmp_path / "share"
    share.mkdir()
    settings = SchedulerSettings.model_validate(
        {
            "cluster_name": "test",
            "redis": {"url": redis_url},
            "share_dir": str(share),
            "api": {"host": "127.0.0.1", "port": 0, "max_body_bytes": max_body_bytes},
            "virtual_clusters": [
                {"name": "default", "guarantee": {"cpu": 4, "memory": "8Gi"}},
                {"name": "research", "guarantee": {"cpu": 4, "memory": "8Gi"}},
            ],
        }
    )
    store = Store(settings.redis.client())
    store.apply_vcs(settings.virtual_clusters)
    for i in (1, 2):
        store.register_node(
            NodeRecord(name=f"node-{i}", address=f"127.0.0.{i}", cpu_m=8000, memory=16 << 30)
        )
    tokens = TokenStore(store.r)
    return Env(
        settings=settings,
        store=store,
        tokens=tokens,
        admin=tokens.create("root", "admin"),
        alice=tokens.create("alice", "user", ["default"]),
        bob=tokens.create("bob", "user", ["research"]),
        agent=tokens.create("pulumi", "agent"),
        share=share,
    )


@contextlib.contextmanager
def serve(env: Env, prepare: Callable[[Any], None] | None = None) -> Iterator[str]:
    """Run the app under a real uvicorn server in a thread; yields its base URL.
    ``prepare(app)``, when given, runs on the app before it serves."""
    app = create_app(env.settings, store=env.store, tokens=env.tokens)
    if prepare is not None:
        prepare(app)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=5,
            http=BoundedHttpToolsProtocol,  # the protocol and loop `pasture serve api` uses
            loop=LOOP_IMPL,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


JOB = """\
name: {name}
vc: {vc}
roles:
  ps:
    replicas: 1
    resources: {{cpu: 1, memory: 1Gi, gpu: 0}}
    command: python3 -c 'print(1)'
  worker:
    replicas: 2
    resources: {{cpu: 500m, memory: 512Mi}}
    command: python3 -c 'print(2)'
"""


def job_yaml(name: str = "hello", vc: str = "default") -> str:
    """A valid 1 ps + 2 worker job spec as YAML."""
    return JOB.format(name=name, vc=vc)
