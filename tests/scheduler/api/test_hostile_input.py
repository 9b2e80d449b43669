"""Hostile request bodies against the real API (uvicorn + redis-server): every one is a
4xx, answered promptly, and the event loop keeps serving /healthz meanwhile."""

from __future__ import annotations

import contextlib
import json
import time

import psutil
import pytest
from live import job_yaml

pytestmark = pytest.mark.integration

# The 368-byte alias bomb shape: 9 aliases of 9, nine levels (9**9 leaves).
BOMB = (
    "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "name: *i\nroles: {w: {command: x, resources: {cpu: 1, memory: 1Gi}}}\n"
)


def test_alias_bomb_is_refused_fast_with_bounded_memory(api, http):
    _, env = api
    assert len(BOMB) < 600
    proc = psutil.Process()
    before = proc.memory_info().rss
    t = time.monotonic()
    r = http(env.alice).post("/api/v1/jobs", content=BOMB)
    took = time.monotonic() - t
    assert r.status_code in (400, 422), r.text  # the parser's alias limit or the API's bound
    assert took < 2.0  # ~0.1 s on an idle machine; 24.6 s before the bound
    assert proc.memory_info().rss - before < 64 << 20


def test_spec_parsing_runs_in_a_worker_thread_never_on_the_event_loop(api, http, monkeypatch):
    """A large or hostile spec costs parse time, never the API's event loop: /healthz and
    every other route keep answering meanwhile. Checked at the mechanism (which thread
    parses), not by timing /healthz, which a shared 2-core machine makes too noisy to tell
    the two apart."""
    import asyncio

    from scheduler.api.routers import jobs as jobs_router

    _, env = api
    seen = []
    real = jobs_router.parse_document

    def spy(*args, **kwargs):
        try:
            asyncio.get_running_loop()
            seen.append("event loop")
        except RuntimeError:
            seen.append("worker thread")
        return real(*args, **kwargs)

    monkeypatch.setattr(jobs_router, "parse_document", spy)
    assert http(env.alice).post("/api/v1/jobs", content=job_yaml("t")).status_code == 201
    assert http(env.alice).post("/api/v1/jobs", content=BOMB).status_code in (400, 422)
    assert seen == ["worker thread", "worker thread"]
    assert http(None).get("/healthz").status_code == 200


def test_oversized_request_head_is_400_and_bounded(api, http):
    """httptools buffers headers without a bound of its own: the API's protocol answers
    400 once a request's line and headers pass MAX_HEAD_BYTES, and keeps serving."""
    import socket
    from urllib.parse import urlsplit

    from scheduler.api.server import MAX_HEAD_BYTES

    url, env = api
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        with contextlib.suppress(OSError):  # the server closes the connection midway
            for _ in range(64 * MAX_HEAD_BYTES // 1009):  # 2 MiB of headers
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"too large" in answer
    assert http(None).get("/healthz").status_code == 200
    r = http(env.alice).get("/api/v1/whoami", headers={"X-Pad": "a" * 8000})
    assert r.status_code == 200  # a large but bounded header is fine


@pytest.mark.parametrize(
    ("body", "ctype"),
    [
        ("[" * 100_000 + "]" * 100_000, "application/json"),
        ('{"a":' * 50_000 + "1" + "}" * 50_000, "application/json"),
        ("a: " + "[" * 100_000, "application/yaml"),
        ("a:\n" + "".join(" " * i + "- \n" for i in range(1, 1200)), "application/yaml"),
        ("{a: " * 900 + "1" + "}" * 900, "application/yaml"),
        ('{"name": "x", "a": ' + "[" * 200 + "]" * 200 + "}", "application/json"),
    ],
    ids=["json-array", "json-object", "yaml-flow", "yaml-block", "yaml-900", "json-200"],
)
def test_deep_nesting_is_4xx(api, http, body, ctype):
    _, env = api
    c = http(env.alice)
    r = c.post("/api/v1/jobs", content=body, headers={"content-type": ctype})
    assert r.status_code in (400, 422), r.text
    assert r.json()["detail"]
    assert c.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "x", "roles": {"w": {"command": "x", "resources": {"cpu": 1e308, "memory": 1}}}},
        {"name": "x", "roles": {"w": {"command": "x", "resources": {"cpu": 1e400}}}},
        {"name": "x", "roles": {"w": {"command": "x", "resources": {"cpu": 1, "memory": 1e308}}}},
        {"name": "x", "roles": {"w": {"command": "x", "resources": {"cpu": 1, "gpu": 1e308}}}},
        {"name": "x", "priority": 1e308, "roles": {"w": {"command": "x"}}},
        {"name": "x", "roles": {"w": {"command": "x", "replicas": 1e308}}},
        {"name": "x", "roles": {"w": {"command": "x", "resources": {"cpu": -1e308}}}},
        {"name": "x", "estimated_duration_s": 1e400, "roles": {"w": {"command": "x"}}},
        {"name": "x", "estimated_duration_s": float("nan"), "roles": {"w": {"command": "x"}}},
    ],
)
def test_huge_numbers_are_4xx(api, http, doc):
    _, env = api
    c = http(env.alice)
    for body, ctype in (
        (json.dumps(doc), "application/json"),
        (
            json.dumps(doc)
            .replace("1e+308", "1.0e+308")
            .replace("-Infinity", "-.inf")
            .replace("Infinity", ".inf")
            .replace("NaN", ".nan"),
            "application/yaml",
        ),
    ):
        r = c.post("/api/v1/jobs", content=body, headers={"content-type": ctype})
        assert 400 <= r.status_code < 500, (body, r.text)


def test_vc_names_are_validated_at_the_api(api, http):
    _, env = api
    c = http(env.admin)
    for bad in ("a b", "../x", "x\n", "-x", "x" * 65, "ü"):
        r = c.get("/api/v1/jobs", params={"vc": bad})
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", "vc"]
    assert c.get("/api/v1/jobs", params={"vc": "research"}).status_code == 200


def test_a_non_finite_number_is_refused_with_its_path(api, http):
    _, env = api
    r = http(env.alice).post(
        "/api/v1/jobs", content=job_yaml("inf") + "estimated_duration_s: .inf\n"
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["estimated_duration_s"]
    assert http(env.admin).get("/api/v1/jobs/inf").status_code == 404  # nothing stored
