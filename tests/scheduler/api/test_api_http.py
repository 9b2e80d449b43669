"""The REST API over real HTTP (uvicorn) against a real redis-server."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from live import job_yaml

from scheduler.jobref import job_key
from scheduler.logpaths import job_log_dir

pytestmark = pytest.mark.integration

# Every authenticated endpoint, with path parameters filled in.
ENDPOINTS = [
    ("POST", "/api/v1/jobs"),
    ("POST", "/api/v1/jobs:dry-run"),
    ("POST", "/api/v1/jobs:batch"),
    ("GET", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs/hello"),
    ("GET", "/api/v1/jobs/hello/events"),
    ("POST", "/api/v1/jobs/hello/stop"),
    ("GET", "/api/v1/jobs/hello/logs"),
    ("GET", "/api/v1/jobs/hello/logs/files"),
    ("GET", "/api/v1/jobs/hello/usage"),
    ("GET", "/api/v1/usage/gpu-hours"),
    ("POST", "/api/v1/jobs/hello/tasks/ps/0/exec"),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/nodes/node-1"),
    ("POST", "/api/v1/nodes/node-1/cordon"),
    ("POST", "/api/v1/nodes/node-1/uncordon"),
    ("POST", "/api/v1/nodes/node-1/drain"),
    ("GET", "/api/v1/nodes/node-1/events"),
    ("GET", "/api/v1/forgotten-nodes"),
    ("GET", "/api/v1/vcs"),
    ("GET", "/api/v1/status"),
    ("GET", "/api/v1/whoami"),
    ("GET", "/metrics"),
    ("GET", "/api/v1/admin/tokens"),
    ("DELETE", "/api/v1/admin/tokens/alice"),
    ("POST", "/api/v1/admin/tokens/alice/rotate"),
    ("GET", "/openapi.json"),
    ("POST", "/api/v1/schedules"),
    ("GET", "/api/v1/schedules"),
    ("GET", "/api/v1/schedules/hello"),
    ("DELETE", "/api/v1/schedules/hello"),
    ("POST", "/api/v1/schedules/hello/suspend"),
    ("POST", "/api/v1/schedules/hello/resume"),
]


def test_endpoint_list_covers_the_openapi_document(api, http):
    _, env = api
    paths = http(env.alice).get("/openapi.json").json()["paths"]
    templated = {
        p.replace("{name}", "x").replace("{action}", "cordon").replace("{role}/{index}", "ps/0")
        for p in paths
    }
    listed = {
        p.replace("hello", "x").replace("node-1", "x").replace("alice", "x") for _, p in ENDPOINTS
    }
    listed |= {"/api/v1/nodes/x/cordon"}
    public = {"/healthz", "/api/v1/node-credentials"}  # the latter: test_node_credentials.py
    assert templated - public <= listed | {"/api/v1/nodes/x/cordon"}


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_every_endpoint_needs_a_token(http, method, path):
    r = http(None).request(method, path)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    r = http("not-a-token").request(method, path)
    assert r.status_code == 401


def test_healthz_needs_no_token(http):
    r = http(None).get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_submit_show_events_stop(api, http):
    _, env = api
    c = http(env.alice)
    r = c.post(
        "/api/v1/jobs", content=job_yaml("hello"), headers={"content-type": "application/yaml"}
    )
    assert r.status_code == 201, r.text
    job = r.json()
    assert (job["name"], job["vc"], job["user"], job["state"]) == (
        "hello",
        "default",
        "alice",
        "submitted",
    )
    assert c.get("/api/v1/jobs/hello").json()["name"] == "hello"
    events = c.get("/api/v1/jobs/hello/events").json()
    assert events["events"][0]["state"] == "submitted"
    assert "alice" in events["events"][0]["reason"]
    listed = c.get("/api/v1/jobs").json()
    assert [j["name"] for j in listed["items"]] == ["hello"]
    r = c.post("/api/v1/jobs/hello/stop")
    assert r.status_code == 200
    assert r.json()["stop_requested"] == "stopped by alice"
    assert env.store.get_job("hello").stop_requested == "stopped by alice"


def test_submit_json_body(api, http):
    _, env = api
    doc = {
        "name": "js",
        "vc": "default",
        "roles": {
            "w": {"replicas": 1, "resources": {"cpu": 1, "memory": "1Gi"}, "command": "true"}
        },
    }
    r = http(env.admin).post("/api/v1/jobs", json=doc)
    assert r.status_code == 201, r.text
    assert env.store.get_job("js").user == "root"


def test_duplicate_job_is_409(api, http):
    _, env = api
    c = http(env.admin)
    assert c.post("/api/v1/jobs", content=job_yaml("dup")).status_code == 201
    r = c.post("/api/v1/jobs", content=job_yaml("dup"))
    assert r.status_code == 409
    assert "dup" in r.json()["detail"]


def test_user_token_is_confined_to_its_vcs(api, http):
    _, env = api
    alice, bob = http(env.alice), http(env.bob)
    r = alice.post("/api/v1/jobs", content=job_yaml("x", vc="research"))
    assert r.status_code == 403
    assert "research" in r.json()["detail"]
    assert env.store.get_job("x") is None
    assert bob.post("/api/v1/jobs", content=job_yaml("bobs", vc="research")).status_code == 201
    # another VC's job answers like an unknown one (names of other tenants do not leak)
    for path in ("/api/v1/jobs/bobs", "/api/v1/jobs/bobs/events", "/api/v1/jobs/bobs/logs"):
        assert alice.get(path).status_code == 404, path
    assert alice.post("/api/v1/jobs/bobs/stop").status_code == 404
    assert env.store.get_job(job_key("research", "bobs")).stop_requested == ""
    assert alice.get("/api/v1/jobs").json()["items"] == []
    assert alice.get("/api/v1/jobs", params={"vc": "research"}).json()["items"] == []
    assert [j["name"] for j in http(env.admin).get("/api/v1/jobs").json()["items"]] == ["bobs"]


def test_agent_token_only_reaches_node_endpoints(api, http):
    _, env = api
    agent = http(env.agent)
    assert agent.post("/api/v1/jobs", content=job_yaml("a")).status_code == 403
    assert agent.get("/api/v1/jobs").status_code == 403
    assert agent.get("/api/v1/vcs").status_code == 403
    assert agent.get("/api/v1/status").status_code == 403
    assert agent.get("/api/v1/nodes").status_code == 200
    r = agent.post("/api/v1/nodes/node-1/drain")
    assert r.status_code == 200
    assert r.json()["state"] == "draining"


def test_unknown_job_is_404(api, http):
    _, env = api
    c = http(env.admin)
    for method, path in [
        ("GET", "/api/v1/jobs/nope"),
        ("GET", "/api/v1/jobs/nope/events"),
        ("POST", "/api/v1/jobs/nope/stop"),
        ("GET", "/api/v1/jobs/nope/logs"),
    ]:
        r = c.request(method, path)
        assert r.status_code == 404, (path, r.text)
        assert "nope" in r.json()["detail"]


def test_bad_spec_is_422_with_field_path(api, http):
    _, env = api
    c = http(env.admin)
    bad = job_yaml("bad").replace("cpu: 500m", "cpu: -3")
    r = c.post("/api/v1/jobs", content=bad)
    assert r.status_code == 422, r.text
    locs = [e["loc"] for e in r.json()["detail"]]
    assert ["roles", "worker", "resources", "cpu"] in locs
    r = c.post("/api/v1/jobs", content=job_yaml("bad") + "colour: blue\n")
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["detail"]] == [["colour"]]
    assert r.json()["detail"][0]["msg"] == "unknown field"
    assert env.store.get_job("bad") is None


def test_gang_that_can_never_fit_is_rejected_at_submit(api, http):
    _, env = api
    huge = job_yaml("huge").replace("cpu: 500m", "cpu: 64")
    r = http(env.admin).post("/api/v1/jobs", content=huge)
    assert r.status_code == 422
    assert "worker" in r.json()["message"] and "node-" in r.json()["message"]
    assert env.store.get_job("huge") is None


@pytest.mark.parametrize(
    ("body", "ctype", "status"),
    [
        (b"name: [unclosed", "application/yaml", 400),
        (b'{"name": ', "application/json", 400),
        (b"\xff\xfe\x00garbage", "application/yaml", 400),
        (b"", "application/yaml", 400),
        (b"- a\n- list\n", "application/yaml", 422),
        (b"just a string", "application/yaml", 422),
        (b"42", "application/json", 422),
        (b"name: x\nroles: 7\n", "application/yaml", 422),
    ],
)
def test_malformed_bodies_are_4xx(api, http, body, ctype, status):
    _, env = api
    r = http(env.admin).post("/api/v1/jobs", content=body, headers={"content-type": ctype})
    assert r.status_code == status, r.text
    assert r.json()["detail"]


def test_huge_body_is_413(api, http):
    _, env = api
    c = http(env.admin)
    body = b"name: x\n# " + b"a" * (10 * 1024 * 1024) + b"\n"
    r = c.post("/api/v1/jobs", content=body)
    assert r.status_code == 413
    assert "limit" in r.json()["detail"]

    def chunks():  # no Content-Length: the limit is enforced while streaming
        for _ in range(20):
            yield b"#" * (512 * 1024) + b"\n"

    r = c.post("/api/v1/jobs", content=chunks())
    assert r.status_code == 413


def test_nodes_cordon_uncordon_and_user_forbidden(api, http):
    _, env = api
    admin, alice = http(env.admin), http(env.alice)
    nodes = alice.get("/api/v1/nodes").json()
    assert [n["name"] for n in nodes] == ["node-1", "node-2"]
    assert alice.post("/api/v1/nodes/node-1/cordon").status_code == 403
    assert admin.post("/api/v1/nodes/node-1/cordon").json()["state"] == "cordoned"
    assert env.store.get_node("node-1").state == "cordoned"
    assert admin.post("/api/v1/nodes/node-1/uncordon").json()["state"] == "ready"
    assert admin.post("/api/v1/nodes/ghost/drain").status_code == 404
    # one path per action: no such action is no such path, and another method on a
    # node's events is not an action
    assert admin.post("/api/v1/nodes/node-1/reboot").status_code == 404
    assert admin.post("/api/v1/nodes/node-1/events").status_code == 405
    assert admin.get("/api/v1/nodes/ghost").status_code == 404


def test_vcs_and_status(api, http):
    _, env = api
    c = http(env.alice)
    vcs = {v["name"]: v for v in c.get("/api/v1/vcs").json()}
    assert set(vcs) == {"default", "research"}
    assert vcs["default"]["guarantee"] == {"cpu_m": 4000, "memory": 8 << 30, "gpu": 0}
    assert vcs["default"]["used"] == {"cpu_m": 0, "memory": 0, "gpu": 0}
    assert "borrowed" in vcs["default"]
    c.post("/api/v1/jobs", content=job_yaml("s1"))
    status = c.get("/api/v1/status").json()
    assert status["cluster"] == "test"
    assert status["nodes"] == {"ready": 2}
    assert status["jobs"] == {"submitted": 1}
    assert status["capacity"]["cpu_m"] == 16000


def test_whoami(api, http):
    _, env = api
    assert http(env.bob).get("/api/v1/whoami").json() == {
        "name": "bob",
        "role": "user",
        "vcs": ["research"],
        "operates": [],
    }


def test_revoked_token_is_401(api, http):
    """Revoked outside the API process (as ``pasture admin token revoke`` does): 401 once
    the token's cache entry is older than ``api.token_cache_s`` (1 s), not later."""
    _, env = api
    bound = env.settings.api.token_cache_s
    assert http(env.bob).get("/api/v1/whoami").status_code == 200
    env.tokens.revoke("bob")
    revoked = time.monotonic()
    codes = []
    while time.monotonic() - revoked < bound + 1.0:
        codes.append(http(env.bob).get("/api/v1/whoami").status_code)
        if codes[-1] == 401:
            break
        time.sleep(0.05)
    assert codes[-1] == 401, codes
    assert time.monotonic() - revoked < bound + 1.0
    assert set(codes) <= {200, 401}, codes


def test_revoked_through_the_api_is_401_at_once(api, http):
    """Revocation and rotation through this process's admin routes empty its token
    cache: the old secret answers 401 on the very next request."""
    _, env = api
    bob, admin = http(env.bob), http(env.admin)
    assert bob.get("/api/v1/whoami").status_code == 200  # cached now
    assert admin.delete("/api/v1/admin/tokens/bob").status_code == 204
    assert bob.get("/api/v1/whoami").status_code == 401
    alice = http(env.alice)
    assert alice.get("/api/v1/whoami").status_code == 200
    fresh = admin.post("/api/v1/admin/tokens/alice/rotate").json()["token"]
    assert alice.get("/api/v1/whoami").status_code == 401
    assert http(fresh).get("/api/v1/whoami").json()["name"] == "alice"


def test_metrics(api, http):
    _, env = api
    c = http(env.admin)
    c.post("/api/v1/jobs", content=job_yaml("m1"))
    c.get("/api/v1/jobs/nope")
    text = c.get("/metrics").text
    assert (
        'pasture_api_requests_total{method="GET",route="/api/v1/jobs/{name}",status="404"} 1.0'
        in text
    )
    assert 'pasture_jobs{state="submitted"} 1.0' in text
    assert 'pasture_nodes{state="ready"} 2.0' in text
    assert 'pasture_cluster_condition{kind="disruption"} 0.0' in text
    assert c.get("/api/v1/status").json()["condition"] is None
    # what the loop raises when most nodes go silent at once (scheduler/rules/health.py)
    env.store.set_condition(
        {"kind": "disruption", "since": 1.0, "message": "3 of 4", "nodes": ["a", "b", "c"]}
    )
    assert 'pasture_cluster_condition{kind="disruption"} 1.0' in c.get("/metrics").text
    assert c.get("/api/v1/status").json()["condition"]["nodes"] == ["a", "b", "c"]


def _log(env, job, role, index):
    d = job_log_dir(env.share, job, env.store.get_job(job).uid)
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{role}-{index}.log"


def test_logs_read_and_files(api, http):
    _, env = api
    c = http(env.alice)
    c.post("/api/v1/jobs", content=job_yaml("lg"))
    assert c.get("/api/v1/jobs/lg/logs").status_code == 404  # nothing written yet
    _log(env, "lg", "ps", 0).write_text("=== attempt 1 on node-1 ===\nps says hi\n")
    _log(env, "lg", "worker", 1).write_text("worker one\n")
    assert c.get("/api/v1/jobs/lg/logs").text.endswith("ps says hi\n")
    assert (
        c.get("/api/v1/jobs/lg/logs", params={"role": "worker", "index": 1}).text == "worker one\n"
    )
    assert c.get("/api/v1/jobs/lg/logs", params={"role": "worker", "index": 0}).status_code == 404
    assert (
        c.get("/api/v1/jobs/lg/logs", params={"role": "../../etc", "index": 0}).status_code == 404
    )
    assert (
        c.get("/api/v1/jobs/lg/logs", params={"role": "worker", "index": 1, "offset": 7}).text
        == "one\n"
    )
    past_end = c.get("/api/v1/jobs/lg/logs", params={"role": "ps", "offset": 2**62})
    assert (past_end.status_code, past_end.text) == (200, "")
    files = c.get("/api/v1/jobs/lg/logs/files").json()
    assert files == [
        {"role": "ps", "index": 0, "size": len("=== attempt 1 on node-1 ===\nps says hi\n")},
        {"role": "worker", "index": 1, "size": 11},
    ]


def test_logs_follow_streams_until_the_job_ends(api, http):
    url, env = api
    c = http(env.alice)
    c.post("/api/v1/jobs", content=job_yaml("fl"))
    path = _log(env, "fl", "ps", 0)
    path.write_text("line 1\n")

    def writer():
        time.sleep(0.6)
        with path.open("a") as f:
            f.write("line 2\n")
        time.sleep(0.6)
        with path.open("a") as f:
            f.write("line 3\n")
        env.store.transition("fl", "stopped", "test ends it")

    t = threading.Thread(target=writer)
    t.start()
    received = []
    start = time.monotonic()
    with c.stream("GET", "/api/v1/jobs/fl/logs", params={"follow": "true"}) as r:
        assert r.status_code == 200
        for chunk in r.iter_text():
            received.append((time.monotonic() - start, chunk))
    t.join()
    assert "".join(ch for _, ch in received) == "line 1\nline 2\nline 3\n"
    assert received[0][0] < 0.5  # the first line came before the later ones were written


def test_fuzzed_bodies_never_500(api, http):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    _, env = api
    c = http(env.admin)
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False),
        st.text(max_size=20),
    )
    values = st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=20,
    )
    spec_like = st.fixed_dictionaries(
        {"name": st.one_of(st.text(max_size=70), st.integers()), "roles": values},
        optional={
            "vc": values,
            "priority": values,
            "retry": values,
            "env": values,
            "taskRoles": values,
            "components": values,
        },
    )
    statuses = []

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.one_of(spec_like, values), st.binary(max_size=200))
    def check(doc, raw):
        r = c.post(
            "/api/v1/jobs", content=json.dumps(doc), headers={"content-type": "application/json"}
        )
        statuses.append(r.status_code)
        assert r.status_code < 500, (doc, r.text)
        r = c.post("/api/v1/jobs", content=raw, headers={"content-type": "application/yaml"})
        assert r.status_code < 500, (raw, r.text)

    check()
    assert any(s in (400, 422) for s in statuses)


def test_openapi_needs_a_token_and_docs_are_not_served(api, http):
    _, env = api
    assert http(None).get("/openapi.json").status_code == 401
    assert http(None).get("/docs").status_code == 404
    assert http(env.admin).get("/docs").status_code == 404
    r = http(env.agent).get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert "/api/v1/jobs/{name}/logs" in doc["paths"]
    assert doc["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"].keys() >= {
        "application/yaml"
    }


def test_openapi_check_with_httpx_without_server_errors(api, http):
    """Every documented GET answers < 500 with an admin token (a cheap schema walk)."""
    _, env = api
    c = http(env.admin)
    for path, ops in c.get("/openapi.json").json()["paths"].items():
        if path.startswith("/api/v1/admin/tokens/"):
            continue
        if "get" in ops:
            r = c.get(path.replace("{name}", "zz-unknown"))
            assert r.status_code < 500, (path, r.text)


def test_http_errors_use_httpx_types():
    assert issubclass(httpx.HTTPStatusError, httpx.HTTPError)


def test_bad_query_parameters_are_422(api, http):
    _, env = api
    c = http(env.admin)
    r = c.get("/api/v1/jobs", params={"state": "sleeping"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "state"]
    assert c.get("/api/v1/jobs", params={"limit": 0}).status_code == 422
    assert c.get("/api/v1/jobs", params={"state": "queued"}).json()["items"] == []


def test_redis_down_is_503_not_500(env):
    import dataclasses
    import socket

    import redis
    from live import serve

    from scheduler.store import Store
    from scheduler.store.tokens import TokenStore

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = redis.Redis(port=port, socket_connect_timeout=0.5, decode_responses=True)
    with serve(dataclasses.replace(env, store=Store(down), tokens=TokenStore(down))) as url:
        assert httpx.get(url + "/healthz", timeout=30).status_code == 503
        r = httpx.get(
            url + "/api/v1/jobs", headers={"Authorization": f"Bearer {env.admin}"}, timeout=30
        )
        assert r.status_code == 503
        assert r.headers["retry-after"] == "5"
        assert "Redis" in r.json()["detail"]
