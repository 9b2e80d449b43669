"""The agent works as the restricted Redis ACL user the redis role creates
(``~pasture:* &pasture:* +@all -@admin -@dangerous``, roles/redis/defaults/main.yml)."""

import time

import redis

from scheduler.agent.agent import Agent
from scheduler.core.model import Bind, Decision, TaskPlacement
from scheduler.settings import AgentSettings
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from scheduler.store.snapshot import commit_payload, take_snapshot


def test_agent_runs_a_task_as_the_acl_user(redis_url, tmp_path):
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    admin.execute_command(
        "ACL",
        "SETUSER",
        "pasture-agent",
        "reset",
        "on",
        ">agent-pw",
        "~pasture:*",
        "&pasture:*",
        "+@all",
        "-@admin",
        "-@dangerous",
    )
    admin.script_flush()  # the agent must be able to load its scripts itself
    settings = AgentSettings.model_validate(
        {
            "node_name": "acl-node",
            "redis": {"url": redis_url, "username": "pasture-agent", "password": "agent-pw"},
            "share_dir": str(tmp_path / "share"),
            "executor": "process",
            "work_dir": str(tmp_path / "work"),
            "resources": {"cpu": 2, "memory": "2Gi"},
        }
    )
    agent = Agent(settings)
    agent.register()
    agent.heartbeat()
    server = Store(admin)  # the loop's side, as the default user
    server.create_job(parse_job_spec({"name": "acl", "roles": {"w": {"command": "exit 0"}}}))
    server.transition("acl", "queued", "queued")
    snap, ctx = take_snapshot(server)
    role = snap.pending[0].roles[0]
    bind = Bind("acl", (TaskPlacement("w", 0, "acl-node", role.resources),))
    assert server.commit(ctx.version, commit_payload(Decision(binds=(bind,)), ctx))[0]
    deadline = time.monotonic() + 15
    while server.task("acl", "w-0").state != "succeeded":
        assert time.monotonic() < deadline, server.task("acl", "w-0")
        agent.reconcile()
        time.sleep(0.1)
    # channel permission: the agent user may subscribe to its node channel
    ps = agent.store.r.pubsub()
    ps.subscribe(agent.store.node_channel("acl-node"))
    msg = ps.get_message(timeout=2)
    assert msg is not None and msg["type"] == "subscribe"
    ps.close()
