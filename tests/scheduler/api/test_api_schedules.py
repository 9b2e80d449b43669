"""``/api/v1/schedules`` under a real uvicorn and redis-server (issue 37): a Volcano
CronJob is stored after a job submit's checks, another VC's tenant neither sees nor
touches it (404), suspend/resume/delete, and refusals name the file's field."""

from __future__ import annotations

from pathlib import Path

FILE = Path(__file__).resolve().parents[2] / "compat" / "corpus" / "volcano" / "cronjob.yaml"
YAML = {"content-type": "application/yaml"}


def test_schedules_are_a_tenants_own(api, http):
    _, env = api
    alice, bob = http(env.alice), http(env.bob)
    body = FILE.read_text().replace(
        "  jobTemplate:\n    spec:\n", "  jobTemplate:\n    spec:\n      queue: research\n", 1
    )
    assert alice.post("/api/v1/schedules", content=body.encode(), headers=YAML).status_code == 403
    r = bob.post("/api/v1/schedules", content=body.encode(), headers=YAML)
    assert r.status_code == 201, r.text
    assert r.json()["vc"] == "research" and r.json()["runs"] == []
    assert any("spec.jobTemplate.spec.schedulerName" in w for w in r.json()["warnings"])
    name = "volcano-cronjob-example"
    assert alice.get("/api/v1/schedules").json()["items"] == []
    for method, path in (
        ("GET", f"/api/v1/schedules/{name}"),
        ("POST", f"/api/v1/schedules/{name}/suspend"),
        ("DELETE", f"/api/v1/schedules/{name}"),
    ):
        assert alice.request(method, path).status_code == 404, (method, path)
    assert bob.post(f"/api/v1/schedules/{name}/suspend").json()["suspend"] is True
    assert bob.post(f"/api/v1/schedules/{name}/resume").json()["suspend"] is False
    assert [i["name"] for i in bob.get("/api/v1/schedules").json()["items"]] == [name]
    assert bob.delete(f"/api/v1/schedules/{name}").status_code == 200
    assert bob.get(f"/api/v1/schedules/{name}").status_code == 404


def test_a_bad_schedule_is_refused_naming_the_files_field(api, http):
    _, env = api
    admin = http(env.admin)
    bad = FILE.read_text().replace('"*/5 * * * *"', '"every five minutes"')
    r = admin.post("/api/v1/schedules", content=bad.encode(), headers=YAML)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["spec", "schedule"]
    assert r.json()["detail"][0]["msg"].startswith("Volcano field spec.schedule: ")
    bad = FILE.read_text().replace("concurrencyPolicy: Forbid", "concurrencyPolicy: Sometimes")
    r = admin.post("/api/v1/schedules", content=bad.encode(), headers=YAML)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["spec", "concurrencyPolicy"]
    r = admin.post("/api/v1/schedules", content=b"name: x\n", headers=YAML)
    assert r.status_code == 422 and "Volcano CronJob" in r.json()["detail"][0]["msg"]
