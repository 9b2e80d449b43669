"""Foreign job formats and hostile bodies through the real HTTP API."""

from __future__ import annotations

import time

import httpx
import yaml
from live import make_env, serve

from scheduler.sealed import write_key

OPENPAI_V2 = {
    "protocolVersion": 2,
    "name": "hello_pai",
    "type": "job",
    "contributor": "someone",
    "prerequisites": [{"type": "dockerimage", "name": "img", "uri": "debian:12"}],
    "taskRoles": {
        "main": {
            "instances": 1,
            "dockerImage": "img",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0},
            "commands": ["echo hi"],
        }
    },
}


def test_openpai_job_is_stored_translated_with_its_warnings(api, http):
    _, env = api
    r = http(env.admin).post("/api/v1/jobs", json=OPENPAI_V2)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["name"] == "hello-pai"
    assert any("contributor" in w for w in body["warnings"])
    assert body["spec"]["roles"]["main"]["command"] == "echo hi"


def test_unknown_format_and_refused_fields_are_422_naming_them(api, http):
    _, env = api
    c = http(env.admin)
    r = c.post("/api/v1/jobs", json={"hello": "world"})
    assert r.status_code == 422
    assert "not a pasture, OpenPAI v1/v2, MARO or Volcano job" in r.text
    secret = {**OPENPAI_V2, "secrets": {"token": "hunter2-value"}}
    r = c.post("/api/v1/jobs", json=secret)  # this API has no secrets key
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["secrets"]
    assert "no secrets key" in r.text and "hunter2-value" not in r.text


def test_secrets_are_sealed_and_never_answered(redis_url, tmp_path):
    env = make_env(redis_url, tmp_path)
    key = write_key(tmp_path / "secrets.key")
    env.settings = env.settings.model_copy(update={"secrets_key_file": key})
    doc = {**OPENPAI_V2, "name": "sealed", "secrets": {"token": "hunter2-value"}}
    doc["taskRoles"] = {"main": {**OPENPAI_V2["taskRoles"]["main"]}}
    doc["taskRoles"]["main"]["commands"] = ["echo <% $secrets.token %>"]
    with serve(env) as url, httpx.Client(base_url=url, timeout=30) as c:
        c.headers["Authorization"] = f"Bearer {env.admin}"
        r = c.post("/api/v1/jobs", json=doc)
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["roles"]["main"]["command"] == "echo ${PASTURE_SECRET_token}"
        answers = [r.text, c.get("/api/v1/jobs/sealed").text, c.get("/api/v1/jobs").text]
        answers.append(c.get("/api/v1/jobs/sealed/events").text)
        undeclared = {**doc, "name": "undeclared", "secrets": {"other": "hunter2-value"}}
        r = c.post("/api/v1/jobs", json=undeclared)
        assert r.status_code == 422 and "'token', not declared" in r.text
        answers.append(r.text)
    assert not any("hunter2-value" in a for a in answers)
    assert "hunter2-value" not in repr(env.store.r.hgetall("pasture:job:sealed"))


def test_maro_schedule_submits_every_job(api, http):
    _, env = api
    schedule = {
        "mode": "process",
        "name": "sched",
        "job_names": ["s-one", "s-two"],
        "components": {"actor": {"num": 1, "command": "true", "resources": {"memory": 256}}},
    }
    r = http(env.admin).post(
        "/api/v1/jobs",
        content=yaml.safe_dump(schedule),
        headers={"content-type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["jobs"] == ["s-one", "s-two"]
    assert http(env.admin).get("/api/v1/jobs/s-two").status_code == 200


def test_alias_bomb_and_deep_nesting_are_400_in_well_under_a_second(api, http):
    _, env = api
    c = http(env.admin)
    bomb = (
        "a0: &a0 ["
        + ", ".join(["lol"] * 9)
        + "]\n"
        + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9))
    )
    start = time.perf_counter()
    r = c.post("/api/v1/jobs", content=bomb, headers={"content-type": "application/yaml"})
    assert r.status_code == 400 and "aliases" in r.text
    r = c.post(
        "/api/v1/jobs",
        content="[" * 50_000 + "]" * 50_000,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    r = c.post("/api/v1/jobs", content="a:\n" + "".join("  " * i + "b:\n" for i in range(1, 60)))
    assert r.status_code == 400
    assert time.perf_counter() - start < 1.0
    assert c.get("/healthz").status_code == 200


def test_huge_numbers_and_bad_names_are_422(api, http):
    _, env = api
    c = http(env.admin)
    doc = {"name": "num", "roles": {"w": {"command": "t", "resources": {"cpu": 1e308}}}}
    assert c.post("/api/v1/jobs", json=doc).status_code == 422
    doc = {"name": "nl", "roles": {"w\n": {"command": "t"}}}
    assert c.post("/api/v1/jobs", json=doc).status_code == 422
    doc = {"name": "vc", "vc": "nowhere", "roles": {"w": {"command": "t"}}}
    r = c.post("/api/v1/jobs", json=doc)
    assert r.status_code == 422 and "nowhere" in r.text
