"""``pasture node events`` and ``GET /api/v1/nodes/{name}/events`` / ``/forgotten-nodes``
against the real API (uvicorn) over a real redis-server (issue 35: the event recording a
forgotten node, e.g. an AKS node scaled down or Spot-evicted, was kept in the store but no
API or CLI showed it)."""

from __future__ import annotations

import json

import httpx
import pytest

from scheduler.cli.output import NOT_FOUND

pytestmark = pytest.mark.integration


def forget(store, name: str, reason: str) -> None:
    """What the loop's node health does to a node gone for good (rules/health.py
    ``_forget_deleted``), once its tasks are requeued."""
    store.record_forgotten(name, reason)
    store.forget_node(name)


def test_forgotten_nodes_and_their_events_are_shown(logged_in, cli):
    url, env = logged_in
    assert cli("node", "cordon", "node-1", "--reason", "disk check").exit_code == 0
    # text from nodes is data: a reason with markup is printed as it is
    forget(env.store, "node-2", "lost: Node object deleted [red]gone[/red]")
    assert env.store.get_node("node-2") is None

    r = cli("node", "events")
    assert r.exit_code == 0, r.output
    assert "node-2" in r.output and "[red]gone[/red]" in r.output
    r = cli("node", "events", "node-2")
    assert r.exit_code == 0, r.output
    assert "forgotten" in r.output and "has no record now" in r.output
    r = cli("node", "events", "node-1", "-o", "json")
    view = json.loads(r.output)
    assert view["known"] is True and view["forgotten"] == []
    assert [e["action"] for e in view["events"]] == ["cordon"]
    assert cli("node", "events", "ghost").exit_code == NOT_FOUND

    # any token may read them, as the node list (a user token here)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {env.alice}"}) as api:
        (gone,) = api.get("/api/v1/forgotten-nodes").json()
        assert gone["node"] == "node-2" and gone["reason"].startswith("lost: Node object")
        view = api.get("/api/v1/nodes/node-2/events").json()
        assert view["known"] is False and view["events"] == []
        assert [f["node"] for f in view["forgotten"]] == ["node-2"]
        assert api.get("/api/v1/nodes/ghost/events").status_code == 404
