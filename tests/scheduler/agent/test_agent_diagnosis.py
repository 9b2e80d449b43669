"""The agent attaches a diagnosis to a failed task's report (real redis-server, real
processes and, where podman and the base image exist, a real container OOM-killed by its
memory limit)."""

import dataclasses
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from scheduler.agent.container import ContainerExecutor
from scheduler.rules.diagnosis import diagnose_report
from scheduler.store import Store
from tests.scheduler.agent.test_agent import make_agent, place, until
from tests.scheduler.agent.test_container_executor import IMAGE, launch


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def run_to_end(agent, store, job):
    def finished():
        agent.reconcile()
        return all(t.done for t in store.tasks(job))

    until(finished, timeout=30)
    return store.tasks(job)


def test_failed_task_record_carries_the_diagnosis(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place(store, "missing", "echo preparing; definitely-not-installed-tool --train")
    (t,) = run_to_end(agent, store, "missing")
    assert (t.state, t.exit_code) == ("failed", 127)
    assert t.diagnosis["kind"] == "command_not_found" and t.diagnosis["retry"] is False
    assert "definitely-not-installed-tool" in t.diagnosis["summary"]


@pytest.mark.skipif(
    shutil.which("podman") is None
    or subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0,
    reason=f"podman or {IMAGE} missing",
)
@pytest.mark.xdist_group("podman")
def test_real_container_oom_kill_is_diagnosed(tmp_path):
    """A container over its --memory limit is killed by the cgroup OOM killer: exit 137
    and inspect's OOMKilled; the diagnosis uses that evidence."""
    ex = ContainerExecutor("podman")
    stray = Path.cwd() / "oom"  # conmon's OOM mark goes to the task's state dir, not here
    was_there = stray.exists()
    la = launch(tmp_path, "echo allocating; python3 -c \"x = b'x' * (1024 ** 3)\"")
    la = dataclasses.replace(la, task_id=f"alerts-oom-{uuid.uuid4().hex[:8]}", memory=64 * 2**20)
    handle = ex.start(la)
    try:
        deadline = time.monotonic() + 90
        code = None
        while code is None and time.monotonic() < deadline:
            code = ex.poll(handle)
            time.sleep(0.3)
        evidence = ex.evidence(handle)
        assert code == 137
        assert evidence == {"oom_killed": True}
        assert was_there or not stray.exists()
        d = diagnose_report(la.log_path, code, "exited with code 137", evidence)
        assert d["kind"] == "oom_killed" and d["retry"] is False
    finally:
        ex.cleanup(handle)
    assert ex.evidence(handle) == {}  # gone: nothing to tell
