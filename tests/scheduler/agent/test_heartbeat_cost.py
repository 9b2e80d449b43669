"""A heartbeat's cost must not grow into the lease it renews. The corpus run (80 tasks on
a node, 1.5 s leases) fenced its own tasks: the per-task usage sample scanned the whole
process table once per task (0.7 s of CPU for 80 tasks) and the renewed lease was
counted from before the sample. Real redis-server, processes and psutil."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

import psutil
import pytest

from scheduler.agent.taskusage import TaskUsageSampler
from tests.scheduler.agent.test_agent import make_agent, place, store  # noqa: F401


@dataclass
class _Task:
    job: str
    uid: str
    key: str
    attempt: int
    handle: str
    gpus: list[int] = field(default_factory=list)


@pytest.fixture()
def trees():
    """Ten task-like trees: a shell (the task's root) with a sleeping child each."""
    procs = [
        subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)
        for _ in range(10)
    ]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(len(psutil.Process(p.pid).children()) == 2 for p in procs):
            break
        time.sleep(0.05)
    yield procs
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)  # the shell and its sleeps
        p.wait()


def test_one_scan_of_the_process_table_serves_every_task_of_a_sample(trees, monkeypatch):
    scans = []
    real = psutil._psplatform.pids

    def counted():
        scans.append(1)
        return real()

    monkeypatch.setattr(psutil._psplatform, "pids", counted)
    tasks = [_Task("j", "u", f"w-{i}", 1, json.dumps({"pid": p.pid})) for i, p in enumerate(trees)]
    out = TaskUsageSampler().sample(tasks, [])
    assert len(scans) == 1, f"{len(scans)} scans of /proc for {len(tasks)} tasks"
    for entry, p in zip(out, trees, strict=True):
        # the whole tree is counted: the shell and both sleeps
        members = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        assert len(members) == 3
        assert entry["memory_rss"] >= sum(m.memory_info().rss for m in members) * 0.5
        assert entry["memory_rss"] > psutil.Process(p.pid).memory_info().rss


def test_a_slow_usage_sample_never_costs_the_node_its_lease(store, tmp_path, redis_url):  # noqa: F811
    import threading

    agent = make_agent(
        store, tmp_path, redis_url, name="slow-1", heartbeat_interval_s=0.2, lease_s=1.0
    )
    sampler = agent.task_usage

    class Slow:
        """Measuring takes longer than the lease (a loaded node with many tasks)."""

        def sample(self, tasks, gpus):
            time.sleep(1.2)
            return sampler.sample(tasks, gpus)

        def final(self, t):
            return sampler.final(t)

    agent.task_usage = Slow()
    stop = threading.Event()
    runner = threading.Thread(target=agent.run_forever, args=(stop,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 15  # registered (its own thread) before placing
        while store.get_node("slow-1") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        place(store, "j", "sleep 60", node="slow-1")
        while store.task("j", "w-0").state != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.task("j", "w-0").state == "running"
        time.sleep(4)  # three samples of 1.2 s, each longer than the 1 s lease
        assert agent.lease_held()
        assert not any(t.fenced for t in agent.local.values())
        t = store.task("j", "w-0")
        assert t.state == "running", (t.state, t.cause, t.message)
        # and the heartbeats still carry the task's figures
        deadline = time.monotonic() + 5
        while agent._task_figures in (None, []) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent._task_figures and agent._task_figures[0]["task"] == "w-0"
    finally:
        stop.set()
        runner.join(10)
        assert not runner.is_alive()
        agent.fence(expired=True)
