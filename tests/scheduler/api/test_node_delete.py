"""``DELETE /api/v1/nodes/{name}`` (``pasture node delete``) over real HTTP (uvicorn)
against a real redis-server."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_delete_needs_an_admin_and_a_silent_node(api, http):
    _, env = api
    admin, alice = http(env.admin), http(env.alice)
    assert http(None).delete("/api/v1/nodes/node-1").status_code == 401
    assert alice.delete("/api/v1/nodes/node-1").status_code == 403
    assert admin.delete("/api/v1/nodes/ghost").status_code == 404
    r = admin.delete("/api/v1/nodes/node-1")  # it just registered: it may run tasks
    assert r.status_code == 409, r.text
    assert "heartbeated" in r.json()["detail"] and "force" in r.json()["detail"]
    assert env.store.get_node("node-1").state == "ready"
    # silent long enough (its heartbeat set back by hand): deleted, with the reason
    env.store.r.hset(env.store.k("node", "node-1"), "heartbeat", env.store.now() - 120)
    r = admin.delete("/api/v1/nodes/node-1")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "lost" and body["deleted"] is True
    assert body["state_reason"] == "deleted by root"
    assert any(e["reason"] == "deleted by root" for e in body["events"])
    # force: the operator knows the machine is gone
    r = admin.delete("/api/v1/nodes/node-2", params={"force": "true"})
    assert r.status_code == 200 and r.json()["state"] == "lost"
