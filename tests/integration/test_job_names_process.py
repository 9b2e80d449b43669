"""Job names belong to their VC (issue 32 item 3), on a process-mode dev cluster with the
real API process and real redis-server: alice (VC a) and bob (VC b) both submit ``train``;
both run side by side as processes, each in its own job directory with its own log; bob's
answers never name alice's job; a second ``train`` in bob's own VC is a 409 that names
only his VC."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from scheduler.jobref import job_key
from tests.devcluster import two_tenants, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _redis():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")


# each task says who it is in its log and leaves a file in its job's directory, then
# waits until that file is gone (the test reads both while the two jobs run side by side)
COMMAND = (
    'echo "I am $WHO in $PASTURE_JOB_NAME"; echo "$WHO" > "$PASTURE_JOB_DIR/owner"; '
    'while [ -e "$PASTURE_JOB_DIR/owner" ]; do sleep 0.2; done'
)


def test_two_tenants_run_jobs_of_the_same_name_side_by_side(tmp_path):
    vcs = [
        {"name": "default", "guarantee": {"cpu": 1, "memory": "1Gi"}},
        {"name": "a", "guarantee": {"cpu": 1, "memory": "1Gi"}},
        {"name": "b", "guarantee": {"cpu": 1, "memory": "1Gi"}},
    ]
    with two_tenants(tmp_path / "dev", vcs, {"alice": "a", "bob": "b"}) as (cluster, api):

        def submit(who: str, vc: str) -> httpx.Response:
            role = {
                "command": COMMAND,
                "env": {"WHO": who},
                "resources": {"cpu": "100m", "memory": "64Mi"},
            }
            return api[who].post(
                "/api/v1/jobs", json={"name": "train", "vc": vc, "roles": {"w": role}}
            )

        r = submit("alice", "a")
        assert r.status_code == 201, r.text
        assert (r.json()["name"], r.json()["vc"]) == ("train", "a")
        r = submit("bob", "b")  # the name alice uses in VC a is free in VC b
        assert r.status_code == 201, r.text
        assert (r.json()["name"], r.json()["vc"]) == ("train", "b")

        share = Path(cluster.share_dir)
        dirs = {
            who: share / "jobs" / job_key(vc, "train") for who, vc in (("alice", "a"), ("bob", "b"))
        }

        def both_running() -> bool:
            states = [api[w].get("/api/v1/jobs/train").json()["state"] for w in api]
            return states == ["running", "running"] and all(
                (d / "owner").exists() for d in dirs.values()
            )

        wait_for("both train jobs running, each in its own directory", both_running)
        # side by side: two processes of the same name, each writing its own job directory
        assert {w: (d / "owner").read_text().strip() for w, d in dirs.items()} == {
            "alice": "alice",
            "bob": "bob",
        }
        assert not (share / "jobs" / "train").exists()
        store = cluster.store()
        running = {j.name: j.vc for j in store.active_jobs(with_spec=False)}
        assert running == {"train.a": "a", "train.b": "b"}

        def log_of(who: str) -> str:
            return api[who].get("/api/v1/jobs/train/logs", params={"role": "w", "index": 0}).text

        wait_for("both logs written", lambda: all("I am" in log_of(w) for w in api))
        assert "I am alice in train.a" in log_of("alice")
        assert "I am bob in train.b" in log_of("bob")

        # bob's answers: his own train, never alice's (her VC, key, uid, log)
        alice_uid = api["alice"].get("/api/v1/jobs/train").json()["uid"]
        bob_texts = [
            api["bob"].get("/api/v1/jobs/train").text,
            api["bob"].get("/api/v1/jobs/train/events").text,
            api["bob"].get("/api/v1/jobs").text,
            api["bob"].get("/api/v1/jobs/train/logs/files").text,
            log_of("bob"),
        ]
        for text in bob_texts:
            assert "train.a" not in text and alice_uid not in text and "alice" not in text, text
        job = api["bob"].get("/api/v1/jobs/train").json()
        assert (job["name"], job["vc"], job["key"]) == ("train", "b", "train.b")
        # asking for alice's job by her VC or her key finds nothing for bob
        for path in (
            "/api/v1/jobs/train?vc=a",
            "/api/v1/jobs/train.a",
            "/api/v1/jobs/train.a/logs",
        ):
            r = api["bob"].get(path)
            assert r.status_code == 404 and "alice" not in r.text, (path, r.text)

        # the same name again in bob's own VC: 409 naming his VC only
        r = submit("bob", "b")
        assert r.status_code == 409, r.text
        assert r.json()["detail"] == "a job named 'train' already exists in VC 'b'"

        for d in dirs.values():  # both tasks end on their own
            (d / "owner").unlink()
        wait_for(
            "both train jobs succeeded",
            lambda: (
                [api[w].get("/api/v1/jobs/train").json()["state"] for w in api]
                == ["succeeded", "succeeded"]
            ),
        )
