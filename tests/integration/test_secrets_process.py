"""Job secrets end to end in process mode (real redis-server, API, loop, agent, CLI and task
processes): the values reach the tasks, and nothing else holds them in clear.

- an OpenPAI v2 document whose ``secrets`` the commands reference (``<% $secrets.x %>`` in
  a role command and a deployment preCommand), POSTed as YAML text;
- a pasture spec declaring ``secrets: [TOKEN]``, submitted by ``pasture job submit
  --secret TOKEN=...``, then ``pasture job resubmit`` without it (refused by name) and with
  ``--secrets-file``.

Each task writes the sha256 of the value it received to its log, which proves the value
arrived unchanged. Then every Redis key and value (the admin connection: SCAN + TYPE +
the type's read), every API response the test got, and every file of the dev cluster's
directory (API, loop and agent logs, task logs, Redis's append-only file, agent state) is
searched for each value: none may hold one.

Last, the agent is restarted with another secrets key: a job with secrets then fails with
the reason named in the task's record, and the agent keeps running.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from scheduler import dev
from scheduler.logpaths import job_log_dir
from scheduler.sealed import write_key

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PASTURE = str(Path(sys.executable).parent / "pasture")
# shell metacharacters and quotes: the value must arrive as is, never run as shell code
TOKEN = "tok-" + secrets.token_hex(12) + " $(touch pwned) `id` 'q' \"dq\" ;|& *"
GITHUB = "gh-" + secrets.token_hex(12)
DOCKER = "dk-" + secrets.token_hex(12)
VALUES = (TOKEN, GITHUB, DOCKER)

V2 = f"""
protocolVersion: 2
name: v2_secrets
type: job
prerequisites:
  - name: img
    type: dockerimage
    uri: localhost/pasture-base:bookworm
    auth: {{username: u, password: "<% $secrets.docker_password %>", registryuri: r.io}}
secrets: {{docker_password: {DOCKER}, github_token: {GITHUB}}}
taskRoles:
  worker:
    instances: 1
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands:
      - printf %s "<% $secrets.github_token %>" | sha256sum | sed 's/^/cmd-sha /'
deployments:
  - name: d
    taskRoles:
      worker:
        preCommands: ['printf %s "<% $secrets.github_token %>" | sha256sum | sed "s/^/pre-sha /"']
defaults: {{deployment: d}}
"""

PASTURE_SPEC = {
    "name": "own-secrets",
    "secrets": ["TOKEN"],
    "roles": {
        "main": {
            "resources": {"cpu": 1, "memory": "256Mi"},
            "command": 'printf %s "$PASTURE_SECRET_TOKEN" | sha256sum | sed "s/^/own-sha /"',
        }
    },
}


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("secrets-dev")
    c = dev.up(
        nodes=1,
        cpu_per_node=2,
        memory_per_node="4Gi",
        api=True,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=10,
        loop_interval_s=0.3,
        stop_grace_s=2,
        directory=directory,
    )
    yield c
    dev.down(directory)


@pytest.fixture(scope="module")
def seen() -> list[str]:
    """Every API response body the tests got (searched for values at the end)."""
    return []


@pytest.fixture(scope="module")
def api(cluster, seen):
    def keep(response: httpx.Response) -> None:
        response.read()
        seen.append(response.text)

    with httpx.Client(
        base_url=cluster.endpoint,
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=30,
        event_hooks={"response": [keep]},
    ) as client:
        yield client


def pasture(cluster, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PASTURE_")},
        "HOME": str(home),
        "PASTURE_CONFIG_HOME": str(home / "pasture"),
        "PASTURE_ENDPOINT": cluster.endpoint,
        "PASTURE_TOKEN": cluster.token,
        "COLUMNS": "200",
    }
    return subprocess.run([PASTURE, *args], env=env, capture_output=True, text=True, timeout=60)


def wait_job(api, name: str, timeout: float = 40.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{name}").json()
        if job.get("state") in ("succeeded", "failed", "stopped"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"{name}: {api.get(f'/api/v1/jobs/{name}/events').json()}")


def log_of(cluster, job: str, task: str) -> str:
    uid = cluster.store().get_job(job).uid
    return (job_log_dir(cluster.share_dir, job, uid) / f"{task}.log").read_text()


def test_values_reach_the_tasks_and_nowhere_else(cluster, api, seen, tmp_path):
    r = api.post("/api/v1/jobs", content=V2.encode(), headers={"content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["secrets"] == ["docker_password", "github_token"]
    assert "${PASTURE_SECRET_github_token}" in r.json()["spec"]["roles"]["worker"]["command"]
    assert wait_job(api, "v2-secrets")["state"] == "succeeded"
    log = log_of(cluster, "v2-secrets", "worker-0")
    assert f"pre-sha {sha(GITHUB)}" in log and f"cmd-sha {sha(GITHUB)}" in log

    spec = tmp_path / "own.yaml"
    spec.write_text(yaml.safe_dump(PASTURE_SPEC))
    r = pasture(cluster, tmp_path, "job", "submit", str(spec), "--secret", f"TOKEN={TOKEN}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert wait_job(api, "own-secrets")["state"] == "succeeded"
    assert f"own-sha {sha(TOKEN)}" in log_of(cluster, "own-secrets", "main-0")
    assert not list(Path(cluster.share_dir).rglob("pwned"))

    # resubmit: the stored spec has names only; values must be given again
    r = pasture(cluster, tmp_path, "job", "resubmit", "own-secrets")
    assert r.returncode != 0
    assert "secrets.TOKEN" in r.stdout + r.stderr and "--secret" in r.stdout + r.stderr
    undeclared = pasture(cluster, tmp_path, "job", "submit", str(spec), "--secret", "NOPE=x")
    assert undeclared.returncode != 0 and "NOPE" in undeclared.stdout + undeclared.stderr
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# the token\nTOKEN={TOKEN}\n")
    r = pasture(
        cluster, tmp_path, "job", "resubmit", "own-secrets", "--secrets-file", str(env_file)
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert wait_job(api, "own-secrets-r2")["state"] == "succeeded"
    assert f"own-sha {sha(TOKEN)}" in log_of(cluster, "own-secrets-r2", "main-0")

    for name in ("v2-secrets", "own-secrets", "own-secrets-r2"):
        api.get(f"/api/v1/jobs/{name}")
        api.get(f"/api/v1/jobs/{name}/events")
    api.get("/api/v1/jobs")
    assert sha(TOKEN) in api.get("/api/v1/jobs/own-secrets/logs", params={"role": "main"}).text

    # every Redis key and value
    client = cluster.store().r
    dump: list[str] = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        dump.append(key)
        if kind == "string":
            dump.append(str(client.get(key)))
        elif kind == "hash":
            dump.append(repr(client.hgetall(key)))
        elif kind == "list":
            dump.append(repr(client.lrange(key, 0, -1)))
        elif kind == "set":
            dump.append(repr(client.smembers(key)))
        elif kind == "zset":
            dump.append(repr(client.zrange(key, 0, -1)))
        elif kind == "stream":
            dump.append(repr(client.xrange(key)))
    assert len(dump) > 20 and any("sealed_secrets" in d for d in dump)
    blob = "\n".join(dump)
    # every file of the cluster: API/loop/agent logs, task logs, Redis's AOF, agent state
    files = [p for p in Path(cluster.base_dir).rglob("*") if p.is_file()]
    files += [p for p in Path(cluster.share_dir).rglob("*") if p.is_file()]
    assert any(p.name == "agent-0.log" or p.name.startswith("agent") for p in files)
    for value in VALUES:
        assert value not in blob, f"a secret value is in Redis: {value}"
        for text in seen:
            assert value not in text, "a secret value is in an API response"
        for p in files:
            assert value.encode() not in p.read_bytes(), f"a secret value is in {p}"


def test_an_agent_with_another_key_fails_the_task_with_the_reason(cluster, api, tmp_path):
    config = Path(cluster.agent_configs[0])
    settings = yaml.safe_load(config.read_text())
    settings["secrets_key_file"] = str(write_key(tmp_path / "other.key"))
    config.write_text(yaml.safe_dump(settings))
    cluster.kill("agent-0")
    agent = cluster.start_agent(0)
    doc = {**PASTURE_SPEC, "name": "wrong-key", "secrets": {"TOKEN": TOKEN}}
    r = api.post("/api/v1/jobs", json=doc)
    assert r.status_code == 201, r.text
    job = wait_job(api, "wrong-key", timeout=60)
    assert job["state"] == "failed"
    text = str(job) + str(api.get("/api/v1/jobs/wrong-key/events").json())
    assert "do not open with this node's secrets key" in text
    assert TOKEN not in text
    assert agent.process() is not None and agent.process().is_running()
