"""Job names belong to their VC (issue 32 item 3): the API resolves a name within the
caller's VCs, a submit's 409 names only the caller's VC, and a store written before
(job names global) is upgraded in place at start, backup first."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from live import job_yaml

from scheduler.api.server import started_app
from scheduler.jobref import job_key, parse_ref, qualified_name, short_name, split_key
from scheduler.loop import Loop
from scheduler.store.backup import read_backup
from scheduler.store.migrate import SCHEMA, migrate, schema
from scheduler.store.records import TaskState


def test_job_key_is_one_to_one_and_fits_every_place_it_is_used():
    assert job_key("default", "train") == "train"
    assert job_key("research", "train") == "train.research"
    assert job_key("a.b_c-1", "t-1") == "t-1.a.b_c-1"
    for vc, name in (("default", "x"), ("research", "train"), ("a.b", "t-1"), ("Z_9", "9")):
        key = job_key(vc, name)
        assert split_key(key) == (vc, name)
        assert short_name(key) == name
        assert parse_ref(qualified_name(key)) == (vc, name)
    assert parse_ref("train") == (None, "train")
    with pytest.raises(ValueError, match="job name"):
        job_key("research", "Train")
    with pytest.raises(ValueError, match="vc"):
        job_key("re/search", "train")
    with pytest.raises(ValueError, match="expected <name> or <name>.<vc>"):
        split_key("train.default")  # the default VC's key is the bare name: one key a job


def test_a_name_is_resolved_within_the_callers_vcs(api, http):
    _, env = api
    admin, alice, bob = http(env.admin), http(env.alice), http(env.bob)
    assert alice.post("/api/v1/jobs", content=job_yaml("train")).status_code == 201
    r = bob.post("/api/v1/jobs", content=job_yaml("train", vc="research"))
    assert r.status_code == 201, r.text  # alice's name is free in research
    assert (r.json()["name"], r.json()["vc"], r.json()["key"]) == (
        "train",
        "research",
        "train.research",
    )
    assert env.store.get_job("train").vc == "default"
    assert env.store.get_job("train.research").vc == "research"

    # each tenant sees its own train; nothing of the other's
    mine = bob.get("/api/v1/jobs/train").json()
    assert (mine["name"], mine["vc"]) == ("train", "research")
    alice_uid = alice.get("/api/v1/jobs/train").json()["uid"]
    for path in ("/api/v1/jobs/train", "/api/v1/jobs", "/api/v1/jobs/train/events"):
        text = bob.get(path).text
        assert alice_uid not in text and '"default"' not in text, (path, text)
    events = bob.get("/api/v1/jobs/train/events").json()
    assert (events["job"], events["vc"]) == ("train", "research")
    # another VC's job by ?vc= or by <name>.<vc>: 404 naming only what was asked
    for path in ("/api/v1/jobs/train?vc=default", "/api/v1/jobs/train.default"):
        r = bob.get(path)
        assert r.status_code == 404, (path, r.text)
        assert alice_uid not in r.text
    assert bob.post("/api/v1/jobs/train/stop?vc=default").status_code == 404
    assert env.store.get_job("train").stop_requested == ""

    # the admin sees both VCs: the bare name is ambiguous, ?vc= or <name>.<vc> select
    r = admin.get("/api/v1/jobs/train")
    assert r.status_code == 409, r.text
    assert "?vc=" in r.json()["detail"] and "research" in r.json()["detail"]
    assert admin.get("/api/v1/jobs/train?vc=research").json()["uid"] == mine["uid"]
    assert admin.get("/api/v1/jobs/train.research").json()["uid"] == mine["uid"]
    assert admin.get("/api/v1/jobs/train.default").json()["uid"] == alice_uid
    assert admin.get("/api/v1/jobs/nothing").status_code == 404

    # a submit of a taken name: 409 naming the caller's own VC only
    r = bob.post("/api/v1/jobs", content=job_yaml("train", vc="research"))
    assert r.status_code == 409
    assert r.json()["detail"] == "a job named 'train' already exists in VC 'research'"
    # the dry run (the dashboard's submit check) too; alice's name is free for bob
    r = bob.post("/api/v1/jobs:dry-run", content=job_yaml("train", vc="research"))
    assert r.status_code == 409
    assert r.json()["detail"] == "a job named 'train' already exists in VC 'research'"
    r = alice.post("/api/v1/jobs:dry-run", content=job_yaml("train"))
    assert r.json()["detail"] == "a job named 'train' already exists in VC 'default'"
    bob.post("/api/v1/jobs/train/stop")  # research's train stops: the name is still taken
    assert (
        bob.post("/api/v1/jobs:dry-run", content=job_yaml("train", vc="research")).status_code
        == 409
    )
    # the batch says the same, per document
    r = bob.post(
        "/api/v1/jobs:batch",
        json={"jobs": [{"name": "train", "vc": "research", "roles": {"w": {"command": "true"}}}]},
    )
    assert r.json()["items"][0]["detail"] == (
        "a job named 'train' already exists in VC 'research'"
    ), r.text

    # stop and delete act on the caller's own job
    assert bob.post("/api/v1/jobs/train/stop").status_code == 200
    assert env.store.get_job("train.research").stop_requested
    assert env.store.get_job("train").stop_requested == ""


def _old_layout(env):
    """A store as pasture wrote it before names were scoped per VC: ``train`` of VC
    research placed by a commit and keyed by its bare name everywhere (job hash, indexes,
    ledger, node bindings, launch record), its log on the share under ``jobs/train``;
    ``keep`` of VC default beside it. Written by today's commit for a default-VC job,
    then its VC set to research, which is what the old code stored for such a job."""
    from scheduler.spec import parse_job_spec

    store = env.store
    for name in ("train", "keep"):
        spec = {"name": name, "roles": {"w": {"replicas": 2, "command": "sleep 60"}}}
        store.create_job(parse_job_spec(spec), user="bob" if name == "train" else "alice")
    Loop(store, env.settings).cycle()
    spec = json.loads(store.r.hget("pasture:job:train", "spec"))
    spec["vc"] = "research"
    store.r.hset("pasture:job:train", mapping={"vc": "research", "spec": json.dumps(spec)})
    store.r.delete("pasture:schema")
    uid = store.get_job("train").uid
    logs = env.share / "jobs" / "train" / "logs" / uid
    logs.mkdir(parents=True)
    (logs / "w-0.log").write_text("=== attempt 1 on node-1 ===\nold train says hi\n")
    return uid


def test_an_old_store_is_upgraded_in_place_backup_first_then_read(env, tmp_path):
    uid = _old_layout(env)
    store = env.store
    assert store.get_job("train").state == "scheduled"
    before_ledger = store.ledger()
    assert sorted(before_ledger) == ["keep/w-0", "keep/w-1", "train/w-0", "train/w-1"]
    assert schema(store) == 1

    settings = env.settings.model_copy(update={"backup_dir": tmp_path / "backups"})
    app = started_app(settings)  # what `pasture serve api` serves: upgrades its store first
    assert schema(store) == SCHEMA

    # every job-keyed record moved to the key, the default VC's job stayed as it was
    assert store.get_job("train") is None
    job = store.get_job("train.research")
    assert (job.name, job.vc, job.uid, job.state) == (
        "train.research",
        "research",
        uid,
        "scheduled",
    )
    assert sorted(store.ledger()) == [
        "keep/w-0",
        "keep/w-1",
        "train.research/w-0",
        "train.research/w-1",
    ]
    assert all(
        a.job == "train.research" for k, a in store.ledger().items() if k.startswith("train")
    )
    assert [t.key for t in store.tasks("train.research")] == ["w-0", "w-1"]
    assert set(store.r.smembers("pasture:job:train.research:alloc")) == {
        "train.research/w-0",
        "train.research/w-1",
    }
    bound = set().union(
        *(store.r.smembers(f"pasture:node:{n}:tasks") for n in ("node-1", "node-2"))
    )
    assert bound == {"keep/w-0", "keep/w-1", "train.research/w-0", "train.research/w-1"}
    launches = sorted(store.r.keys("pasture:node:*:launch:*"))
    assert launches and all(
        k.endswith((":launch:keep", ":launch:train.research")) for k in launches
    )
    for k in launches:
        assert store.r.hget(k, "job") in ("keep", "train.research")
    assert set(store.r.zrange("pasture:jobs", 0, -1)) == {"keep", "train.research"}
    assert store.r.smembers("pasture:jobs:active") == {"keep", "train.research"}
    assert [e["state"] for e in store.events("train.research")][:2] == ["submitted", "queued"]
    assert store.get_job("keep").vc == "default"
    assert not (env.share / "jobs" / "train").exists()
    assert (env.share / "jobs" / "train.research" / "logs" / uid / "w-0.log").exists()

    # the backup was written before any change: it holds the old layout
    files = list((tmp_path / "backups").iterdir())
    assert len(files) == 1
    keys = {k["key"] for k in read_backup(files[0])["keys"]}
    assert {"pasture:job:train", "pasture:job:train:tasks"} <= keys
    assert "pasture:job:train.research" not in keys

    # the API reads it: bob's train, with its log
    with TestClient(app) as client:
        bob = {"Authorization": f"Bearer {env.bob}"}
        got = client.get("/api/v1/jobs/train", headers=bob).json()
        assert (got["name"], got["vc"], got["uid"]) == ("train", "research", uid)
        text = client.get("/api/v1/jobs/train/logs", params={"role": "w", "index": 0}, headers=bob)
        assert "old train says hi" in text.text
        alice = {"Authorization": f"Bearer {env.alice}"}
        assert client.get("/api/v1/jobs/train", headers=alice).status_code == 404
        assert client.get("/api/v1/jobs/keep", headers=alice).json()["state"] == "scheduled"

    # the loop reads it: the renamed job's tasks report, it runs, then succeeds
    loop = Loop(store, env.settings)
    for t in store.tasks("train.research"):
        store.report_task("train.research", t.key, t.attempt, t.node, TaskState.RUNNING)
    loop.cycle()
    assert store.get_job("train.research").state == "running"
    for t in store.tasks("train.research"):
        store.report_task("train.research", t.key, t.attempt, t.node, TaskState.SUCCEEDED, 0)
    loop.cycle()
    assert store.get_job("train.research").state == "succeeded"
    assert sorted(store.ledger()) == ["keep/w-0", "keep/w-1"]

    # once is enough: a second start changes nothing and writes no second backup
    again = migrate(store, share_dir=env.share, backup_dir=tmp_path / "backups")
    assert (again.before, again.after, again.renamed) == (SCHEMA, SCHEMA, {})
    assert len(list((tmp_path / "backups").iterdir())) == 1


def test_an_upgrade_with_jobs_to_rename_and_no_backup_directory_is_refused(env):
    _old_layout(env)
    with pytest.raises(RuntimeError, match="no backup directory"):
        migrate(env.store, share_dir=env.share, backup_dir=None)
    assert schema(env.store) == 1 and env.store.get_job("train") is not None


def test_the_runs_of_a_schedule_of_another_vc_are_kept_by_their_keys(env):
    """A scheduled job's runs are jobs of its VC: the loop records each by its key, so
    the next look finds it (a run recorded by its bare name read as gone and was
    forgotten, and its successors piled up)."""
    from scheduler.spec.schedule import ScheduleSpec
    from scheduler.store.schedules import ScheduleStore

    spec = ScheduleSpec.model_validate(
        {
            "name": "nightly",
            "schedule": "* * * * *",
            "concurrency_policy": "Forbid",
            "job": {"name": "nightly", "vc": "research", "roles": {"w": {"command": "true"}}},
        }
    )
    schedules = ScheduleStore(env.store)
    schedules.create(spec, user="bob")
    loop = Loop(env.store, env.settings)
    now = env.store.now() + 120
    loop._run_schedule(schedules.all()[0], now)
    (run,) = schedules.all()[0].runs
    assert run.endswith(".research"), run
    assert env.store.get_job(run).vc == "research"
    loop._run_schedule(schedules.all()[0], now + 60)  # Forbid: the first run still waits
    assert schedules.all()[0].runs == [run]


def test_an_upgrade_interrupted_after_a_directory_moved_finishes_on_the_next_start(env, tmp_path):
    uid = _old_layout(env)
    old, new = env.share / "jobs" / "train", env.share / "jobs" / "train.research"
    old.rename(new)  # as a start that died after moving the directory, before the records
    done = migrate(env.store, share_dir=env.share, backup_dir=tmp_path / "backups")
    assert done.renamed == {"train": "train.research"} and done.dirs == {}
    assert schema(env.store) == SCHEMA
    assert env.store.get_job("train.research").uid == uid
    assert (new / "logs" / uid / "w-0.log").read_text().endswith("old train says hi\n")
