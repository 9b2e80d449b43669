"""The liveness probes of the aks containers (scheduler/agent/k8s_probe.py), run as the
kubelet runs them (a process; exit status), against real files and a real redis-server."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import redis
import yaml

from scheduler.agent.k8s_probe import cycles_alive, lease_alive
from scheduler.store import Store


def probe(*args: str) -> int:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.agent.k8s_probe", *args], capture_output=True
    ).returncode


def test_the_agent_is_alive_while_its_lease_file_is_fresh(tmp_path):
    lease = tmp_path / "lease"
    assert probe("lease", str(lease), "300") == 1  # never renewed
    lease.write_text("123.4\n")
    assert probe("lease", str(lease), "300") == 0
    old = time.time() - 301
    os.utime(lease, (old, old))
    assert probe("lease", str(lease), "300") == 1
    assert lease_alive(lease, 300, now=old + 10)[0] is True


def test_the_loop_is_alive_while_its_cycles_move(tmp_path):
    state = tmp_path / "cycles.json"
    assert cycles_alive(5, state, 120, now=0)[0]
    assert cycles_alive(5, state, 120, now=100)[0]  # unchanged, within the limit
    ok, why = cycles_alive(5, state, 120, now=121)
    assert not ok and "no scheduling cycle for 121 s" in why
    assert cycles_alive(6, state, 120, now=122)[0]  # moved again
    assert cycles_alive(None, state, 120, now=1000)[0]  # store down: not the loop's fault


def test_the_loop_probe_reads_the_store(redis_url, tmp_path):
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump({"redis": {"url": redis_url}}))
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.record_cycle(0.01)
    state = tmp_path / "state.json"
    assert probe("cycles", str(config), str(state), "120") == 0
    assert '"count": 1' in state.read_text()
    assert probe("nonsense") == 2
