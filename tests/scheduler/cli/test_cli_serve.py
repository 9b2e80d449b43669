"""The server-side commands as the Ansible roles run them: `pasture admin token create`,
`pasture serve api`, `pasture serve loop` and `pasture agent run` as real processes, then a
job submitted with the client CLI runs to success."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from scheduler.dev import free_port
from tests.devcluster import agent_yaml, scheduler_yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASTURE = str(Path(sys.executable).with_name("pasture"))

JOB = """\
name: served
roles:
  main:
    replicas: 1
    resources: {cpu: 100m, memory: 64Mi}
    command: python3 -c "print('served ok')"
"""


@pytest.fixture()
def processes():
    started: list[subprocess.Popen] = []

    def start(*args: str, log: Path) -> subprocess.Popen:
        f = log.open("wb")
        p = subprocess.Popen(
            [PASTURE, *args], stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        f.close()
        started.append(p)
        return p

    yield start
    for p in reversed(started):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in started:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_master_and_node_commands_run_a_job(redis_url, tmp_path, processes, cli, monkeypatch):
    share = tmp_path / "share"
    share.mkdir()
    port = free_port()
    scheduler_cfg = scheduler_yaml(
        tmp_path / "scheduler.yaml", "served", redis_url, share, port, loop={"interval_s": 0.5}
    )
    agent_cfg = agent_yaml(tmp_path / "agent.yaml", "node-a", redis_url, share, tmp_path / "work")
    token_file = tmp_path / "admin.token"
    r = cli(
        "admin",
        "token",
        "create",
        "--config",
        str(scheduler_cfg),
        "--name",
        "admin",
        "--role",
        "admin",
        "--output",
        str(token_file),
    )
    assert r.exit_code == 0, r.output
    api = processes("serve", "api", "--config", str(scheduler_cfg), log=tmp_path / "api.log")
    processes("serve", "loop", "--config", str(scheduler_cfg), log=tmp_path / "loop.log")
    processes("agent", "run", "--config", str(agent_cfg), log=tmp_path / "agent.log")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert api.poll() is None, (tmp_path / "api.log").read_text()
        assert time.monotonic() < deadline, (tmp_path / "api.log").read_text()
        time.sleep(0.2)

    monkeypatch.setenv("PASTURE_ENDPOINT", url)
    monkeypatch.setenv("PASTURE_TOKEN", token_file.read_text().strip())
    while "node-a" not in cli("node", "list").output:
        assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
        time.sleep(0.2)
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    r = cli("job", "submit", str(spec), "--wait", "--timeout", "120")
    logs = {n: (tmp_path / f"{n}.log").read_text() for n in ("api", "loop", "agent")}
    assert r.exit_code == 0, (r.output, logs)
    r = cli("job", "logs", "served")
    assert "served ok" in r.output
