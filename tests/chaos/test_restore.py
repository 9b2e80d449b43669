"""Backup and restore with the agents running (issue 25 item 8), on a process-mode dev
cluster (real redis-server, loop, agent, task processes):

- over a store that still holds jobs, ``pasture admin restore FILE`` is refused and
  ``--force`` restores the backup while the agent runs, keeping a stop issued after the
  backup: the stopped job stays stopped and its task never runs again;
- over a lost store (wiped while the agent runs; the agent registers again within a
  heartbeat), ``restore FILE`` works without ``--force``, keeps the agent's live
  registration, and says what is lost.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler import dev
from scheduler.bench import chaos_task
from scheduler.bench.chaos import read_runs
from scheduler.cli import app
from scheduler.cli.output import REJECTED
from scheduler.spec import parse_job_spec
from tests.devcluster import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]


def _wait(what: str, check, timeout: float = 60.0) -> None:
    wait_for(what, check, timeout, every=0.1)


@pytest.fixture()
def cluster(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")
    c = dev.up(
        nodes=1,
        api=False,
        directory=tmp_path / "state",
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=3.0,
        loop_interval_s=0.3,
        stop_grace_s=1,
    )
    try:
        yield c
    finally:
        dev.down(tmp_path / "state")


def _spec(name: str, command: str):
    return parse_job_spec(
        {"name": name, "roles": {"w": {"command": command, "resources": {"cpu": "100m"}}}}
    )


def test_restore_force_while_the_agent_runs_keeps_a_stop_issued_after_the_backup(cluster, tmp_path):
    cli = CliRunner()
    store = cluster.store()
    marks = Path(cluster.share_dir) / "marks"
    marks.mkdir(mode=0o1777)  # the task runs as its VC's user: a measuring point it may write
    marks.chmod(0o1777)
    store.create_job(_spec("long", f"python3 -S {chaos_task.__file__} {marks} 40 100"))
    _wait("long running", lambda: len(read_runs(marks, ["long"])) == 1)
    file = tmp_path / "store.backup"
    r = cli.invoke(app, ["admin", "backup", str(file), "-c", cluster.scheduler_config])
    assert r.exit_code == 0, r.output

    store.request_stop("long", "stopped by user")  # after the backup
    _wait("long stopped", lambda: store.get_job("long").state == "stopped")
    stopped_at = time.time()

    cluster.kill("loop")  # the procedure: loop (and API) stopped, agents running
    refused = cli.invoke(app, ["admin", "restore", str(file), "-c", cluster.scheduler_config])
    assert refused.exit_code == REJECTED and "--force" in refused.output, refused.output
    r = cli.invoke(app, ["admin", "restore", str(file), "--force", "-c", cluster.scheduler_config])
    assert r.exit_code == 0, r.output
    assert "kept: job long: stopped after the backup; kept stopped" in r.output, r.output
    assert store.get_job("long").state == "stopped"  # its end, over the backup's record
    assert not store.r.smembers(f"pasture:node:{cluster.nodes[0]}:tasks")  # nothing bound
    cluster.start_loop()

    _wait(
        f"long stopped again ({store.get_job('long')}, {store.tasks('long')})",
        lambda: store.get_job("long").state == "stopped",
    )
    time.sleep(3.0)  # several agent passes and loop cycles: a rerun would have started
    runs = read_runs(marks, ["long"])
    assert len(runs) == 1, runs  # the task never ran again
    assert runs[0]["ticks"][-1] <= stopped_at + 0.5
    assert store.get_job("long").state == "stopped"
    assert [e["state"] for e in store.events("long")][-1] == "stopped"


def test_restore_into_a_lost_store_needs_no_force_while_the_agent_runs(cluster, tmp_path):
    cli = CliRunner()
    store = cluster.store()
    store.create_job(_spec("done", "exit 0"))
    _wait("done", lambda: (j := store.get_job("done")) is not None and j.state == "succeeded")
    before = store.get_job("done")
    node = cluster.nodes[0]
    store.set_node_state(node, "cordoned", "disk check")
    file = tmp_path / "store.backup"
    r = cli.invoke(app, ["admin", "backup", str(file), "-c", cluster.scheduler_config])
    assert r.exit_code == 0, r.output

    cluster.kill("loop")
    store.r.delete(*store.r.keys("pasture:*"))  # the store is lost; the agent carries on
    _wait("the agent registers again", lambda: store.r.hget(f"pasture:node:{node}", "state"))
    live_heartbeat = float(store.r.hget(f"pasture:node:{node}", "heartbeat"))

    r = cli.invoke(app, ["admin", "restore", str(file), "-c", cluster.scheduler_config])
    assert r.exit_code == 0, r.output
    assert "lost: everything written after the backup" in r.output, r.output
    assert f"kept: node {node} is cordoned again" in r.output, r.output
    assert store.get_job("done") == before
    assert float(store.r.hget(f"pasture:node:{node}", "heartbeat")) >= live_heartbeat
    assert store.r.hget(f"pasture:node:{node}", "state") == "cordoned"
    assert node in store.r.smembers("pasture:nodes")
