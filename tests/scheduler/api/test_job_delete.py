"""DELETE /api/v1/jobs/{name} against a real API and redis."""

from __future__ import annotations

from live import job_yaml

from scheduler.jobref import job_key


def test_delete_refuses_an_unfinished_job_then_removes_a_finished_one(api, http):
    _, env = api
    c = http(env.alice)
    assert c.post("/api/v1/jobs", content=job_yaml("gone")).status_code == 201
    r = c.delete("/api/v1/jobs/gone")
    assert r.status_code == 409
    assert "submitted" in r.json()["detail"] and "force" in r.json()["detail"]
    assert env.store.get_job("gone") is not None
    env.store.transition("gone", "succeeded", "test ends it")
    r = c.delete("/api/v1/jobs/gone")
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "gone", "vc": "default", "deleted": True, "state": "succeeded"}
    assert c.get("/api/v1/jobs/gone").status_code == 404
    assert env.store.events("gone") == [] and env.store.tasks("gone") == []
    assert c.get("/api/v1/jobs").json()["items"] == []
    # the name is free again
    assert c.post("/api/v1/jobs", content=job_yaml("gone")).status_code == 201


def test_forced_delete_of_an_unfinished_job_asks_it_to_stop(api, http):
    _, env = api
    c = http(env.alice)
    assert c.post("/api/v1/jobs", content=job_yaml("busy")).status_code == 201
    r = c.delete("/api/v1/jobs/busy", params={"force": "true"})
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] is False
    assert env.store.get_job("busy").stop_requested == "deleted by alice"


def test_delete_of_another_tenants_job_is_404(api, http):
    _, env = api
    assert (
        http(env.bob).post("/api/v1/jobs", content=job_yaml("bobs", vc="research")).status_code
        == 201
    )
    env.store.transition(job_key("research", "bobs"), "failed", "test ends it")
    assert http(env.alice).delete("/api/v1/jobs/bobs").status_code == 404
    assert env.store.get_job(job_key("research", "bobs")) is not None
    assert http(env.alice).delete("/api/v1/jobs/nope").status_code == 404
