"""The dashboard reads the cluster only through the services (issue 15, item 5).

Two checks: the source of ``pages.py`` and ``actions.py`` names neither the store nor
Redis (AST), and every page and form still answers when ``app.state.store`` is a tripwire
that fails on any use (real uvicorn, real redis-server, a job placed by real loop
cycles), so a read that bypasses the services cannot hide behind a code path the AST
check does not see.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest
from live import job_yaml, serve

from scheduler.api import dashboard as dashboard_package
from scheduler.loop import Loop

DASHBOARD = Path(dashboard_package.__file__).parent


@pytest.mark.parametrize("module", ["pages.py", "actions.py"])
def test_pages_and_actions_name_no_store(module):
    tree = ast.parse((DASHBOARD / module).read_text(), module)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("store", "r", "ledger"):
            problems.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "store":
            problems.append(f"line {node.lineno}: name store")
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.startswith(("scheduler.store", "redis")):
                    problems.append(f"line {node.lineno}: imports {name}")
    assert problems == [], f"{module} reaches past the services: {problems}"


class Tripwire:
    """Stands in for ``app.state.store``: every use is recorded and fails the request."""

    def __init__(self) -> None:
        self.used: list[str] = []

    def __getattr__(self, name: str):
        self.used.append(name)
        raise AssertionError(f"the dashboard used app.state.store.{name}")


@pytest.fixture()
def tripwire() -> Tripwire:
    return Tripwire()


@pytest.fixture()
def base(env, tripwire):
    """The API under uvicorn with ``app.state.store`` replaced by the tripwire (the
    services keep the real store)."""

    def prepare(app) -> None:
        app.state.store = tripwire

    with serve(env, prepare) as url:
        yield url


def test_every_page_and_form_works_without_the_store(browser, base, env, tripwire):
    r = httpx.post(
        f"{base}/api/v1/jobs",
        content=job_yaml("svc-only", "default"),
        headers={"Authorization": f"Bearer {env.alice}"},
    )
    assert r.status_code == 201, r.text
    loop = Loop(env.store, env.settings)
    for _ in range(3):
        loop.cycle()
    node = next(a.node for a in env.store.ledger().values() if a.job == "svc-only")
    env.store.heartbeat(node, {"cpu_percent": 30.0, "memory_used": 1, "memory_total": 4})
    admin, alice = browser(), browser()
    assert admin.login(env.admin).status_code == 303
    assert alice.login(env.alice).status_code == 303
    pages = [
        "/dashboard/",
        "/dashboard/usage",
        f"/dashboard/usage?node={node}",
        "/dashboard/nodes",
        "/dashboard/nodes/node-1",
        "/dashboard/nodes/node-2",
        "/dashboard/jobs",
        "/dashboard/jobs?vc=default&state=scheduled",
        "/dashboard/jobs/svc-only",
        "/dashboard/jobs/svc-only/log",
        "/dashboard/vcs",
    ]
    for b in (admin, alice):
        for page in pages:
            r = b.get(page)
            assert r.status_code == 200, (page, r.status_code, r.text[:300])
    assert tripwire.used == []
    # what the services read still shows: the placement, the node's sums, the sample
    row = re.search(r"<tr[^>]*>.*?svc-only.*?</tr>", alice.get("/dashboard/jobs").text, re.S)
    assert row and node in row.group(0)
    nodes = admin.get("/dashboard/nodes").text
    assert re.search(rf"{node}.*?<td>3</td>", nodes, re.S)  # its 3 tasks, summed
    assert alice.get(f"/dashboard/usage?node={node}").json()["cpu"] == [30.0]
    assert alice.get("/dashboard/usage?node=nope").status_code == 404
    # the forms: a refusal, a confirmation page, then the changes themselves
    csrf = admin.csrf("/dashboard/nodes")
    r = admin.post("/dashboard/nodes/node-2/cordon", {"csrf_token": csrf})
    assert r.status_code == 200 and "No new task will be placed on it" in r.text
    r = admin.post("/dashboard/nodes/node-2/cordon", {"csrf_token": csrf, "confirmed": "yes"})
    assert r.status_code == 303
    csrf = alice.csrf("/dashboard/jobs")
    assert alice.post("/dashboard/nodes/node-2/uncordon", {"csrf_token": csrf}).status_code == 403
    r = alice.post("/dashboard/jobs/svc-only/resubmit", {"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/jobs/svc-only-r2.default"
    r = alice.post("/dashboard/jobs/svc-only/stop", {"csrf_token": csrf, "confirmed": "yes"})
    assert r.status_code == 303
    assert tripwire.used == []
    assert env.store.get_node("node-2").state == "cordoned"
    assert env.store.get_job("svc-only").stop_requested
