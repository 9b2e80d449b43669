"""POST /api/v1/jobs:batch against a real API and redis-server: per-document results,
one bad document never refuses the others, bounds."""

from __future__ import annotations


def _doc(name: str, vc: str = "default", cpu: float = 1) -> dict:
    return {
        "name": name,
        "vc": vc,
        "roles": {
            "w": {"replicas": 2, "resources": {"cpu": cpu, "memory": "1Gi"}, "command": "true"}
        },
    }


def test_batch_stores_valid_documents_and_reports_each_refusal(api, http):
    _, env = api
    c = http(env.alice)
    assert c.post("/api/v1/jobs", json=_doc("taken")).status_code == 201
    docs = [
        _doc("b1"),
        {"name": "bad", "roles": {"w": {"replicas": "many", "command": "x"}}},
        _doc("b2", vc="research"),  # alice may not use research
        _doc("taken"),
        _doc("b1"),  # twice in one batch
        _doc("huge", cpu=10_000),  # never fits
        _doc("b3"),
    ]
    r = c.post("/api/v1/jobs:batch", json={"jobs": docs})
    assert r.status_code == 200, r.text
    out = r.json()
    assert [i["status"] for i in out["items"]] == [201, 422, 403, 409, 409, 422, 201]
    assert (out["created"], out["failed"]) == (2, 5)
    assert out["items"][0]["names"] == ["b1"] and out["items"][0]["state"] == "submitted"
    assert out["items"][1]["detail"][0]["loc"][-1] == "replicas"
    for name in ("b1", "b3"):
        job = env.store.get_job(name)
        assert (job.state, job.user) == ("submitted", "alice")
        assert [e["state"] for e in env.store.events(name)] == ["submitted"]
    assert env.store.get_job("b2") is None and env.store.get_job("huge") is None
    assert "b1" in env.store.active_job_names()


def test_batch_bounds_and_shape(api, http):
    _, env = api
    c = http(env.admin)
    assert c.post("/api/v1/jobs:batch", json={"jobs": []}).status_code == 422
    assert c.post("/api/v1/jobs:batch", json={"job": [_doc("x")]}).status_code == 422
    too_many = {"jobs": [_doc(f"j{i}") for i in range(501)]}
    r = c.post("/api/v1/jobs:batch", json=too_many)
    assert r.status_code == 422 and "501" in r.text
    assert env.store.get_job("j0") is None
    r = c.post(
        "/api/v1/jobs:batch",
        content=b"jobs:\n  - name: y1\n    roles: {w: {command: 'true'}}\n",
        headers={"content-type": "application/yaml"},
    )
    assert r.status_code == 200 and r.json()["created"] == 1, r.text
    assert (
        c.post(
            "/api/v1/jobs:batch", content=b"{", headers={"content-type": "application/json"}
        ).status_code
        == 400
    )
