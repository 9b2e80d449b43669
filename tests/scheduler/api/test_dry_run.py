"""``POST /api/v1/jobs:dry-run`` against a real redis-server, store and uvicorn: the
checks of a submit, where the core would place the job now or why not, nothing stored."""

from __future__ import annotations

from pathlib import Path

from live import job_yaml

from scheduler.loop import Loop

YAML = {"content-type": "application/yaml"}
CORPUS = Path(__file__).resolve().parents[2] / "compat" / "corpus" / "maro"

BIG = """\
name: {name}
roles:
  main:
    replicas: {replicas}
    resources: {{cpu: 6, memory: 1Gi}}
    command: sleep 60
"""


def _keys(env) -> dict[str, str]:
    """Every Redis key with its type: what a dry run must leave as it was."""
    return {k: env.store.r.type(k) for k in env.store.r.keys("*")}


def test_dry_run_of_a_job_that_fits_shows_its_placement_and_stores_nothing(http, api):
    _, env = api
    before = _keys(env)
    version = env.store.version()
    r = http(env.alice).post("/api/v1/jobs:dry-run", content=job_yaml("fits"), headers=YAML)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["format"] == "pasture"
    (job,) = body["jobs"]
    assert (job["name"], job["vc"], job["placed"], job["pending_reason"]) == (
        "fits",
        "default",
        True,
        None,
    )
    tasks = {(p["role"], p["index"]): p["node"] for p in job["placements"]}
    assert set(tasks) == {("ps", 0), ("worker", 0), ("worker", 1)}
    assert set(tasks.values()) <= {"node-1", "node-2"}
    assert job["nodes"] == 2
    # read-only: no job, no event, no new or changed key, the ledger version unchanged
    assert env.store.get_job("fits") is None
    assert _keys(env) == before
    assert env.store.version() == version
    assert http(env.alice).get("/api/v1/jobs/fits").status_code == 404


def test_dry_run_of_a_job_that_cannot_fit_now_gives_the_reason(http, api):
    _, env = api
    r = http(env.alice).post(
        "/api/v1/jobs", content=BIG.format(name="hog", replicas=2), headers=YAML
    )
    assert r.status_code == 201, r.text
    Loop(env.store, env.settings).cycle()  # hog takes 6 of the 8 cores of both nodes
    assert env.store.get_job("hog").state == "scheduled"
    r = http(env.alice).post(
        "/api/v1/jobs:dry-run", content=BIG.format(name="later", replicas=1), headers=YAML
    )
    assert r.status_code == 200, r.text
    (job,) = r.json()["jobs"]
    assert job["placed"] is False
    assert job["placements"] == []
    assert job["pending_reason"]["kind"] == "insufficient-resources"
    assert "cpu" in job["pending_reason"]["message"]
    # both nodes rejected by a resource filter, as explain() counts them
    assert sum(job["rejected"]["main"].values()) == 2
    assert env.store.get_job("later") is None


def test_dry_run_refuses_what_a_submit_refuses(http, api):
    _, env = api
    never = BIG.format(name="never", replicas=1).replace("memory: 1Gi", "memory: 1Gi, gpu: 1")
    r = http(env.alice).post("/api/v1/jobs:dry-run", content=never, headers=YAML)
    assert r.status_code == 422, r.text
    assert "can never be placed" in r.text
    assert env.store.get_job("never") is None
    # the same 403 / 409 / 400 / 422 as a submit
    other_vc = http(env.bob).post("/api/v1/jobs:dry-run", content=job_yaml("x"), headers=YAML)
    assert other_vc.status_code == 403
    assert http(env.alice).post("/api/v1/jobs", content=job_yaml("taken"), headers=YAML).is_success
    taken = http(env.alice).post("/api/v1/jobs:dry-run", content=job_yaml("taken"), headers=YAML)
    assert taken.status_code == 409
    bad = http(env.alice).post("/api/v1/jobs:dry-run", content=b"a: [", headers=YAML)
    assert bad.status_code == 400
    invalid = job_yaml("bad").replace("replicas: 2", "replicas: -1")
    r = http(env.alice).post("/api/v1/jobs:dry-run", content=invalid, headers=YAML)
    assert r.status_code == 422
    assert any(e["loc"][-1] == "replicas" for e in r.json()["detail"])


def test_dry_run_is_in_the_openapi_document(http, api):
    _, env = api
    doc = http(env.admin).get("/openapi.json").json()
    op = doc["paths"]["/api/v1/jobs:dry-run"]["post"]
    assert {"200", "400", "403", "409", "413", "422"} <= set(op["responses"])
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/DryRunOut")


def test_dry_run_of_a_maro_schedule_places_its_jobs_in_queue_order(http, api):
    """A real MARO schedule (microsoft/maro, tests/compat/corpus/maro): four jobs of 14
    cores each on 2 x 8 cores: one would start now, the others wait behind it."""
    _, env = api
    schedule = (CORPUS / "grass_local_start_schedule.yml").read_bytes()
    r = http(env.alice).post("/api/v1/jobs:dry-run", content=schedule, headers=YAML)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["format"] == "maro"
    names = [j["name"] for j in body["jobs"]]
    assert len(names) == 4
    placed = [j for j in body["jobs"] if j["placed"]]
    assert len(placed) == 1 and len(placed[0]["placements"]) == 6  # 5 actors + 1 learner
    assert all(j["pending_reason"]["kind"] for j in body["jobs"] if not j["placed"])
    assert all(env.store.get_job(n) is None for n in names)
