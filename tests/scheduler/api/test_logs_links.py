"""The log routes read nothing outside the job's own directory (issue 25 item 1): links a
task planted in its log directory (symbolic, hard, to another tenant's log or to a key
outside the share), a FIFO, a linked log directory and '..' names answer 4xx and carry
none of the target's bytes (real uvicorn, real redis-server, real files)."""

from __future__ import annotations

import os

import pytest
from live import job_yaml

from scheduler.jobref import job_key
from scheduler.services.logs import LogService

pytestmark = pytest.mark.integration


@pytest.fixture()
def planted(api, http, tmp_path):
    _, env = api
    alice, bob = http(env.alice), http(env.bob)
    assert alice.post("/api/v1/jobs", content=job_yaml("mine")).status_code == 201
    assert alice.post("/api/v1/jobs", content=job_yaml("swapped")).status_code == 201
    assert bob.post("/api/v1/jobs", content=job_yaml("theirs", "research")).status_code == 201
    logs = LogService(env.share)
    mine, swapped, theirs = (
        logs.log_dir(k, env.store.get_job(k).uid)
        for k in ("mine", "swapped", job_key("research", "theirs"))
    )
    for d in (mine, swapped, theirs):
        d.mkdir(parents=True)
    (mine / "ps-0.log").write_text("my own log\n")
    (theirs / "ps-0.log").write_text("BOB-SECRET\n")
    key = tmp_path / "secrets.key"
    key.write_text("CLUSTER-KEY\n")
    os.symlink(theirs / "ps-0.log", mine / "sym-0.log")
    os.symlink(key, mine / "key-0.log")
    os.link(theirs / "ps-0.log", mine / "hard-0.log")
    os.link(key, mine / "hkey-0.log")
    os.mkfifo(mine / "fifo-0.log")
    os.rmdir(swapped)
    os.symlink(theirs, swapped)  # the whole log directory replaced by a link
    return alice, ("BOB-SECRET", "CLUSTER-KEY")


@pytest.mark.parametrize("role", ["sym", "key", "hard", "hkey", "fifo"])
@pytest.mark.parametrize("params", [{}, {"tail": 3}, {"follow": True}])
def test_a_planted_link_answers_403_and_serves_nothing(planted, role, params):
    alice, secrets = planted
    r = alice.get("/api/v1/jobs/mine/logs", params={"role": role, "index": 0, **params})
    assert r.status_code == 403, r.text
    assert "refused" in r.json()["detail"]
    assert not any(s in r.text for s in secrets)


def test_own_log_is_served_and_the_listing_leaves_links_out(planted):
    alice, _ = planted
    assert alice.get("/api/v1/jobs/mine/logs", params={"role": "ps"}).text == "my own log\n"
    files = alice.get("/api/v1/jobs/mine/logs/files").json()
    assert [(f["role"], f["index"]) for f in files] == [("ps", 0)]


def test_a_linked_log_directory_and_dot_dot_paths_serve_nothing(planted):
    alice, secrets = planted
    answers = [
        alice.get("/api/v1/jobs/swapped/logs", params={"role": "ps", "index": 0}),
        alice.get("/api/v1/jobs/swapped/logs"),
        alice.get("/api/v1/jobs/swapped/logs/files"),
        alice.get("/api/v1/jobs/mine/logs", params={"role": "../../theirs.research/logs/ps"}),
        alice.get("/api/v1/jobs/mine/logs", params={"role": ".."}),
        alice.get("/api/v1/jobs/..%2Ftheirs.research/logs", params={"role": "ps"}),
        alice.get("/api/v1/jobs/theirs/logs", params={"role": "ps"}),  # another VC's job
    ]
    for r in answers:
        assert 400 <= r.status_code < 500, (r.request.url, r.status_code, r.text)
        assert not any(s in r.text for s in secrets), r.text
