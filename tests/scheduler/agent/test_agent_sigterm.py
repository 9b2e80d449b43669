"""SIGTERM ends the agent, never its tasks (a rolling update of the agent DaemonSet on AKS,
a systemd restart on VMs): the real agent process over a real redis-server runs a real
task, is sent SIGTERM, exits within seconds, and the task is still running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import redis
import yaml

from scheduler.store import Store
from tests.ports import task_ports
from tests.scheduler.agent.test_agent import place, until


def test_sigterm_ends_the_agent_and_leaves_its_tasks_running(redis_url, tmp_path):
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    pid_file = tmp_path / "task.pid"
    config = tmp_path / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "node_name": "n1",
                "address": "127.0.0.1",
                "redis": {"url": redis_url},
                "share_dir": str(tmp_path / "share"),
                "executor": "process",
                "work_dir": str(tmp_path / "work"),
                "port_range": task_ports(32100, 32199),
                "resources": {"cpu": 4, "memory": "8Gi", "gpu": 2, "gpu_model": "fake"},
                "heartbeat_interval_s": 0.5,
            }
        )
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "scheduler.agent", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    task_pid = None
    try:
        until(lambda: store.get_node("n1") is not None, timeout=30)
        place(store, "long", f"echo $$ > {pid_file}; exec sleep 60")
        until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30)
        task_pid = int(pid_file.read_text())
        agent.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        agent.wait(timeout=10)
        assert time.monotonic() - t0 < 5, "the agent took long to exit on SIGTERM"
        os.kill(task_pid, 0)  # raises ProcessLookupError if SIGTERM had killed the task
        (t,) = store.tasks("long")
        assert t.state in ("scheduled", "running") and not t.done
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        if task_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(task_pid), signal.SIGKILL)
