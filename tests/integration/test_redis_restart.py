"""The loop and an agent keep working across a Redis restart (AOF on, same port)."""

import shutil
import subprocess
import threading
import time

import pytest
import redis

from scheduler.agent.agent import Agent
from scheduler.dev import free_port
from scheduler.loop import Loop
from scheduler.settings import AgentSettings, SchedulerSettings
from scheduler.spec import parse_job_spec
from scheduler.store import Store

pytestmark = [pytest.mark.integration]


def start(port, data):
    proc = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    raise AssertionError("redis-server did not start")


def wait_state(store, name, state, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            job = store.get_job(name)
            if job is not None and job.state == state:
                return
        except redis.ConnectionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{name} not {state}: {store.get_job(name)}")


def test_loop_and_agent_survive_a_redis_restart(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    proc = start(port, tmp_path)
    stop = threading.Event()
    threads = []
    try:
        settings = SchedulerSettings.model_validate(
            {"redis": {"url": url}, "loop": {"interval_s": 0.2, "heartbeat_timeout_s": 30}}
        )
        store = Store.from_settings(settings.redis)
        store.apply_vcs(settings.virtual_clusters)
        agent = Agent(
            AgentSettings.model_validate(
                {
                    "node_name": "n1",
                    "redis": {"url": url},
                    "share_dir": str(tmp_path / "share"),
                    "executor": "process",
                    "work_dir": str(tmp_path / "work"),
                    "heartbeat_interval_s": 0.5,
                    "resources": {"cpu": 2, "memory": "2Gi"},
                }
            )
        )
        loop = Loop(Store.from_settings(settings.redis), settings)
        threads = [
            threading.Thread(target=t.run_forever, args=(stop,), daemon=True) for t in (agent, loop)
        ]
        for t in threads:
            t.start()
        store.create_job(parse_job_spec({"name": "before", "roles": {"w": {"command": "true"}}}))
        wait_state(store, "before", "succeeded")
        proc.terminate()
        proc.wait(10)
        time.sleep(1.5)  # both see connection errors meanwhile
        proc = start(port, tmp_path)
        store.create_job(parse_job_spec({"name": "after", "roles": {"w": {"command": "true"}}}))
        wait_state(store, "after", "succeeded")
        assert store.get_job("before").state == "succeeded"  # kept by the AOF
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        proc.terminate()
        proc.wait(10)
