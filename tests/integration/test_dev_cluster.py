"""``scheduler.dev`` up/down as the CLI uses them: state file, refusal to start twice,
nothing left running after down (tasks included)."""

import json
import os
import time
from pathlib import Path

import psutil
import pytest

from scheduler import dev

pytestmark = [pytest.mark.integration]


def test_up_down_leaves_nothing_running(tmp_path):
    cluster = dev.up(nodes=1, api=False, directory=tmp_path, heartbeat_interval_s=0.5)
    try:
        state = dev.read_state(tmp_path)
        assert state is not None and state["redis_url"] == cluster.redis_url
        assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o600
        assert set(cluster.pids) == {"redis", "loop", "agent-0"}
        with pytest.raises(dev.DevError, match="already running|is running"):
            dev.up(nodes=1, api=False, directory=tmp_path)
        store = cluster.store()
        from scheduler.spec import parse_job_spec

        store.create_job(parse_job_spec({"name": "s", "roles": {"w": {"command": "sleep 300"}}}))
        deadline = time.monotonic() + 30
        while not store.tasks("s") or not store.tasks("s")[0].handle:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        task_pid = json.loads(store.tasks("s")[0].handle)["pid"]
        pids = list(cluster.pids.values()) + [task_pid]
    finally:
        assert dev.down(tmp_path)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert dev.read_state(tmp_path) is None
    assert not dev.down(tmp_path)  # nothing to stop


def test_dev_redis_needs_a_password_and_agents_have_node_credentials(tmp_path):
    import redis
    import yaml

    cluster = dev.up(nodes=2, api=False, directory=tmp_path, heartbeat_interval_s=0.5)
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(cluster.redis_url).set("pasture:token:x", "y")
        agent = yaml.safe_load(Path(cluster.agent_configs[0]).read_text())["redis"]
        for path in (cluster.redis_password_file, agent["password_file"]):
            assert os.stat(path).st_mode & 0o777 == 0o600, path
        assert agent["username"] == "node-dev-node-0"
        node = redis.Redis.from_url(
            cluster.redis_url,
            username=agent["username"],
            password=Path(agent["password_file"]).read_text().strip(),
            decode_responses=True,
        )
        assert node.hget("pasture:node:dev-node-0", "state") == "ready"
        for cmd in (
            ("SET", "pasture:token:x", "y"),
            ("HSET", "pasture:node:dev-node-1", "state", "lost"),
            ("HSET", "pasture:vcs", "x", "{}"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                node.execute_command(*cmd)
    finally:
        assert dev.down(tmp_path)
