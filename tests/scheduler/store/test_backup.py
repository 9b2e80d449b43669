"""Backup and restore (issue 13 item 6): back up a live process-mode cluster's store with
``pasture admin backup``, restore it into a fresh redis-server with ``pasture admin
restore``, and the cluster carries on there."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest
import redis
import yaml
from typer.testing import CliRunner

from scheduler import dev
from scheduler.agent.agent import Agent
from scheduler.cli import app
from scheduler.cli.output import REJECTED
from scheduler.loop import Loop
from scheduler.settings import AgentSettings, SchedulerSettings
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from scheduler.store.agent_store import NodeStore
from scheduler.store.backup import BackupError, backup, restore
from scheduler.store.tokens import TokenStore

pytestmark = [pytest.mark.integration]


def _wait(what: str, check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _job(name: str) -> object:
    return parse_job_spec(
        {"name": name, "roles": {"w": {"command": "exit 0", "resources": {"cpu": "100m"}}}}
    )


def test_backup_of_a_live_cluster_restores_into_a_fresh_redis_and_carries_on(tmp_path):
    cli = CliRunner()
    file = tmp_path / "store.backup"
    cluster = dev.up(nodes=1, api=False, directory=tmp_path / "state", heartbeat_interval_s=0.5)
    try:
        store = cluster.store()
        store.create_job(_job("done"))
        _wait("job done", lambda: (j := store.get_job("done")) and j.state == "succeeded")
        before = (store.get_job("done"), store.events("done"), store.tasks("done"))
        token = TokenStore(store.r).create("ops", "admin", [])
        store.r.set("pasture:dashboard:session:x", "1", ex=3600)
        cluster.kill("loop")  # the next job stays submitted: the backup holds a queued job
        store.create_job(_job("later"))
        r = cli.invoke(app, ["admin", "backup", str(file), "--config", cluster.scheduler_config])
        assert r.exit_code == 0, r.output
        assert "backed up" in r.output
    finally:
        dev.down(tmp_path / "state")
    assert os.stat(file).st_mode & 0o777 == 0o600
    with gzip.open(file) as f:
        keys = {k["key"] for k in json.loads(f.read())["keys"]}
    assert {"pasture:job:done", "pasture:job:later", "pasture:ledger"} - keys <= {
        "pasture:ledger"  # empty after the job finished: Redis drops empty hashes
    }

    with dev.redis_server(tmp_path / "fresh") as url:
        config = tmp_path / "fresh.yaml"
        config.write_text(yaml.safe_dump({"redis": {"url": url}}))
        r = cli.invoke(app, ["admin", "restore", str(file), "--config", str(config)])
        assert r.exit_code == 0, r.output
        again = cli.invoke(app, ["admin", "restore", str(file), "--config", str(config)])
        assert again.exit_code == REJECTED and "--force" in again.output, again.output
        forced = cli.invoke(app, ["admin", "restore", str(file), "--force", "-c", str(config)])
        assert forced.exit_code == 0, forced.output

        fresh = Store(redis.Redis.from_url(url, decode_responses=True))
        after = (fresh.get_job("done"), fresh.events("done"), fresh.tasks("done"))
        assert after == before
        assert TokenStore(fresh.r).verify(token).name == "ops"
        assert 0 < fresh.r.ttl("pasture:dashboard:session:x") <= 3600
        assert fresh.get_job("later").state == "submitted"

        # the cluster carries on: a loop and the node's agent on the restored store
        agent = Agent(
            AgentSettings.model_validate(
                {
                    "node_name": cluster.nodes[0],
                    "redis": {"url": url},
                    "share_dir": str(tmp_path / "share2"),
                    "executor": "process",
                    "work_dir": str(tmp_path / "work2"),
                    "resources": {"cpu": 2, "memory": "2Gi"},
                }
            ),
            store=NodeStore(redis.Redis.from_url(url, decode_responses=True), cluster.nodes[0]),
        )
        agent.register()
        loop = Loop(fresh, SchedulerSettings.model_validate({"redis": {"url": url}}))
        deadline = time.monotonic() + 30
        while (job := fresh.get_job("later")).state != "succeeded":
            assert time.monotonic() < deadline, (job, fresh.tasks("later"))
            loop.cycle()
            agent.heartbeat()
            agent.reconcile()
            time.sleep(0.05)
        assert fresh.get_job("done") == before[0]


def test_restore_refuses_a_file_that_is_not_a_backup(redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    bad = tmp_path / "bad"
    bad.write_text("not gzip")
    with pytest.raises(BackupError, match="not a pasture backup"):
        restore(client, bad)
    other = tmp_path / "other"
    with gzip.open(other, "wb") as f:
        f.write(json.dumps({"format": "something-else/9"}).encode())
    with pytest.raises(BackupError, match="expected format 'pasture-backup/1'"):
        restore(client, other)


def test_force_replaces_the_store_and_drops_keys_not_in_the_backup(redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    client.set("pasture:a", "1")
    client.hset("pasture:job:h", mapping={"state": "succeeded", "created": "1"})
    client.set("other:key", "kept")  # not pasture's: neither backed up nor touched
    info = backup(client, tmp_path / "b")
    assert info.keys == 2
    client.set("pasture:a", "changed")
    client.set("pasture:new", "1")
    with pytest.raises(BackupError, match="holds 1 job"):
        restore(client, Path(tmp_path / "b"))
    restore(client, tmp_path / "b", force=True)
    assert client.get("pasture:a") == b"1"
    assert client.hgetall("pasture:job:h") == {b"state": b"succeeded", b"created": b"1"}
    assert client.exists("pasture:new") == 0
    assert client.get("other:key") == b"kept"


def test_force_keeps_what_happened_after_the_backup_and_lists_what_is_lost(redis_url, tmp_path):
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    for name in ("asked", "ended", "gone"):
        store.create_job(_job(name))
    tokens = TokenStore(store.r)
    old = tokens.create("old", "user", ["default"])
    file = tmp_path / "b"
    backup(redis.Redis.from_url(redis_url), file)

    store.request_stop("asked", "stopped by user")  # still to be stopped by the loop
    store.transition("ended", "stopped", "stopped by user")
    store.transition("gone", "stopped", "stopped by user")
    store.delete_job("gone")
    store.create_job(_job("late"))  # submitted after the backup
    tokens.revoke("old")
    new = tokens.create("new", "user", ["default"])

    info = restore(redis.Redis.from_url(redis_url), file, force=True)
    assert "job ended: stopped after the backup; kept stopped" in info.kept
    assert any(k.startswith("job asked: stop requested again") for k in info.kept)
    assert "job gone: deleted after the backup; deleted again" in info.kept
    assert info.lost == ("job late: submitted after the backup; submit it again",)
    assert store.get_job("asked").stop_requested.startswith("stopped by user")
    assert store.get_job("ended").state == "stopped"
    assert "ended" not in store.r.smembers("pasture:jobs:active")
    assert store.get_job("gone") is None and store.get_job("late") is None
    assert tokens.verify(old) is None  # revoked after the backup: stays revoked
    assert tokens.verify(new).name == "new"
