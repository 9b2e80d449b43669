"""Browser tests: Playwright driving Debian's Chromium against a real process-mode cluster
(``scheduler.dev``: redis-server, API, loop and two agents as local processes).

Chromium is ``/usr/bin/chromium`` (never ``playwright install``); each test session uses a
new empty user-data dir. Screenshots go to ``artifacts/screenshots/`` (gitignored).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from scheduler import dev
from scheduler.store.tokens import TokenStore

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

TICKER = """\
name: {name}
vc: {vc}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: >-
      python3 -u -c "import time; [print('tick', i, flush=True) or time.sleep(0.4)
      for i in range(1500)]"
"""


class Cluster:
    """The dev cluster plus tokens: admin, alice (vc default), bob (vc research)."""

    def __init__(self, c: dev.DevCluster) -> None:

        self.dev = c
        self.endpoint = c.endpoint
        self.admin = c.token
        tokens = TokenStore(c.store().r)
        self.alice = tokens.create("alice", "user", ["default"])
        self.bob = tokens.create("bob", "user", ["research"])

    def submit(self, token: str, name: str, vc: str = "default") -> None:
        r = httpx.post(
            f"{self.endpoint}/api/v1/jobs",
            content=TICKER.format(name=name, vc=vc),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
            timeout=30,
        )
        assert r.status_code == 201, r.text

    def job(self, name: str) -> dict:
        r = httpx.get(
            f"{self.endpoint}/api/v1/jobs/{name}",
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=30,
        )
        r.raise_for_status()
        return r.json()

    def wait_state(self, name: str, state: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(name)
            if job["state"] == state:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {name} is {job['state']}, not {state}")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")
    directory = tmp_path_factory.mktemp("dev")
    c = dev.up(
        nodes=2,
        cpu_per_node=2,
        memory_per_node="4Gi",
        heartbeat_interval_s=0.5,
        loop_interval_s=0.3,
        stop_grace_s=2,
        virtual_clusters=[
            {"name": "default", "guarantee": {"cpu": 2, "memory": "4Gi"}},
            {"name": "research", "guarantee": {"cpu": 2, "memory": "4Gi"}},
        ],
        directory=directory,
    )
    try:
        yield Cluster(c)
    finally:
        dev.down(directory)


@pytest.fixture(scope="module")
def chromium():
    """Chromium launched by Playwright: Playwright gives it a new, empty temporary profile
    (user-data dir) per launch and removes it on close; each test gets its own context."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def page(chromium):
    """A fresh browser context (no cookies) and page."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15000)
    pg = context.new_page()
    yield pg
    context.close()
