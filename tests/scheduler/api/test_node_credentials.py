"""``POST /api/v1/node-credentials`` under a real uvicorn and redis-server: an agent pod's
token (the Kubernetes answers come from the documented TokenReview in
tests/scheduler/data, as no cluster exists here) gets its node's own Redis user; a refused
token answers 403 and counts as a failed authentication; off by default (404)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import httpx
import pytest
import redis
from live import make_env, serve

from scheduler.api.routers import nodecred as route
from scheduler.settings import NodeCredentialSettings
from tests.scheduler.test_nodecred import NODE, Recorded, pod, review


class Answers(Recorded):
    """The recorded answers, read at each call (a test may change them)."""

    def __init__(self, answers):
        super().__init__(None, None)
        self.answers = answers

    def review(self, token):
        return self.answers["review"]

    def pod(self, namespace, name):
        return self.answers["pod"]


@pytest.fixture()
def enabled(redis_url, tmp_path, monkeypatch):
    env = make_env(redis_url, tmp_path)
    secret = tmp_path / "node-secret"
    secret.write_text("s3cret\n")
    api = env.settings.api.model_copy(
        update={"node_credentials": NodeCredentialSettings(namespace="pasture", secret_file=secret)}
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    answers = {"review": review(), "pod": pod()}
    monkeypatch.setattr(route, "KubeReviewer", lambda: Answers(answers))
    with serve(env) as url:
        yield url, answers
    for user in env.store.r.execute_command("ACL", "USERS"):
        if str(user).startswith("node-"):
            env.store.r.execute_command("ACL", "DELUSER", user)


def test_an_agent_pods_token_gets_its_nodes_own_user(enabled, redis_url):
    url, _ = enabled
    got = httpx.post(f"{url}/api/v1/node-credentials", json={"token": "t"}, timeout=30)
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["node"], body["username"]) == (NODE, f"node-{NODE}")
    node = redis.Redis.from_url(redis_url, username=body["username"], password=body["password"])
    node.hset(f"pasture:node:{NODE}", "heartbeat", "1")
    with pytest.raises(redis.exceptions.NoPermissionError):
        node.hset("pasture:node:node-1", "heartbeat", "1")


def test_a_refused_token_is_403_with_the_reason_and_counts_as_a_failure(enabled):
    url, answers = enabled
    answers["pod"] = pod(nodeName="aks-other-1")
    got = httpx.post(f"{url}/api/v1/node-credentials", json={"token": "t"}, timeout=30)
    assert got.status_code == 403 and "runs on 'aks-other-1'" in got.json()["detail"]
    for _ in range(30):
        got = httpx.post(f"{url}/api/v1/node-credentials", json={"token": "t"}, timeout=30)
        if got.status_code == 429:
            break
    assert got.status_code == 429 and "Retry-After" in got.headers


def test_off_by_default_and_bodies_are_checked(api):
    url, _ = api
    got = httpx.post(f"{url}/api/v1/node-credentials", json={"token": "t"}, timeout=30)
    assert got.status_code == 404
    for bad in ({}, {"token": ""}, {"token": "t", "node": "n1"}, {"token": "x" * 20000}):
        assert httpx.post(f"{url}/api/v1/node-credentials", json=bad).status_code == 422


def test_the_agents_command_writes_its_password_and_prints_its_user(enabled, tmp_path):
    url, answers = enabled
    token = tmp_path / "token"
    token.write_text("t\n")
    out = tmp_path / "run" / "node-password"
    argv = [
        sys.executable,
        "-m",
        "scheduler.agent.credential",
        "--url",
        f"{url}/api/v1/node-credentials",
        "--token-file",
        str(token),
        "--password-file",
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"node-{NODE}"
    assert len(out.read_text().strip()) == 64 and out.stat().st_mode & 0o777 == 0o600
    answers["review"] = review(authenticated=False, error="token expired")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "403: token refused" in done.stderr
    assert "expired" in done.stderr
