"""``pasture node delete`` against the real API (uvicorn) over a real redis-server."""

from __future__ import annotations

import pytest

from scheduler.cli.output import NOT_FOUND, REJECTED

pytestmark = pytest.mark.integration


def test_node_delete_refuses_a_live_node_and_deletes_a_silent_one(logged_in, cli):
    _, env = logged_in
    r = cli("node", "delete", "node-1")  # it just registered: its tasks may still run
    assert r.exit_code == REJECTED and "heartbeated" in r.output
    # the hint names the CLI's flag (issue 34, item 8: it said "pass force")
    assert "or delete with --force when the machine is gone" in r.output
    assert env.store.get_node("node-1").state == "ready"
    env.store.r.hset(env.store.k("node", "node-1"), "heartbeat", env.store.now() - 120)
    r = cli("node", "delete", "node-1")
    assert r.exit_code == 0, r.output
    assert "deleted" in r.output
    node = env.store.get_node("node-1")
    assert node.state == "lost" and node.deleted
    assert cli("node", "delete", "node-2", "--force").exit_code == 0
    assert cli("node", "delete", "ghost").exit_code == NOT_FOUND
