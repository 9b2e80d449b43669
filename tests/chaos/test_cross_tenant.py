"""One tenant never reads another's data (issue 25 item 1), against a process-mode dev
cluster with the real API process:

- tasks of one tenant plant symbolic links, hard links, a FIFO, a ``..`` link and a log
  directory replaced by a link (to another tenant's log, the Redis password, the cluster's
  secrets key); that tenant's token asks the API for every one of them and through ``..``
  paths: every answer is 4xx, none carries another tenant's data
  (:func:`scheduler.bench.chaos_tenants.cross_tenant_reads`, which ``python -m
  scheduler.bench chaos`` prints too); and as a task, alice's task tries every path of
  bob's it is told, ``/proc`` and ssh into bob's sshd, and reads none of bob's secrets;
- a VC-reclaim preemption across two VCs: each side reads its job, its events and the
  job list through the API, and no reason or event names the other tenant's job.
"""

from __future__ import annotations

import shutil

import pytest

from scheduler.bench.chaos_tenants import cross_tenant_reads
from tests.devcluster import two_tenants, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]


@pytest.fixture(autouse=True)
def _redis():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")


def test_planted_links_serve_nothing_outside_the_job(tmp_path):
    out = cross_tenant_reads(tmp_path / "dev")
    assert out["cross_tenant_attempts"] >= 30, out
    # the attack reached the API's read paths: links to the victim's log (symbolic and
    # hard), the Redis password and key, a '..' link, a FIFO, and a linked log directory
    assert out["cross_tenant_planted"] >= 8, out
    assert out["cross_tenant_reads"] == 0, out
    assert out["cross_tenant_5xx"] == 0, out
    # as a task (issue 32): alice's task tried bob's files, log, node-side ssh key, every
    # /proc environ and cmdline, and ssh into bob's sshd, and read none of his secrets
    assert out["cross_tenant_task_tries"] >= 20, out
    assert out["cross_tenant_task_reads"] == 0, out


def test_a_reclaim_names_no_job_of_the_other_tenant(tmp_path):
    vcs = [
        {"name": "default", "guarantee": {"cpu": 1, "memory": "1Gi", "gpu": 1}},
        {"name": "research", "guarantee": {"cpu": 1, "memory": "1Gi", "gpu": 1}},
    ]
    tenants = {"alice": "default", "bob": "research"}
    with two_tenants(tmp_path / "dev", vcs, tenants, gpus_per_node=2) as (_, api):

        def submit(who: str, name: str, vc: str, gpu: int) -> None:
            role = {"command": "sleep 120", "resources": {"cpu": "100m", "gpu": gpu}}
            doc = {"name": name, "vc": vc, "roles": {"w": role}}
            r = api[who].post("/api/v1/jobs", json=doc)
            assert r.status_code == 201, r.text

        def state(who: str, name: str) -> str:
            return api[who].get(f"/api/v1/jobs/{name}").json()["state"]

        submit("bob", "bob-borrow", "research", 2)  # one GPU over research's guarantee
        wait_for("bob-borrow running", lambda: state("bob", "bob-borrow") == "running")
        submit("alice", "alice-reclaim", "default", 1)  # default takes its guarantee back
        pending = []  # alice's pending reasons while she waits for the reclaim

        def reclaimed() -> bool:
            pending.append(api["alice"].get("/api/v1/jobs/alice-reclaim").text)
            events = api["bob"].get("/api/v1/jobs/bob-borrow/events").json()["events"]
            return any(e["state"] == "preempted" for e in events)

        wait_for("the reclaim", reclaimed)
        # the victim's preemption and alice's reason are one commit; she waits for its release
        pending.append(api["alice"].get("/api/v1/jobs/alice-reclaim").text)
        wait_for("alice-reclaim running", lambda: state("alice", "alice-reclaim") == "running")
        assert all("bob-borrow" not in t for t in pending), pending
        assert any("preempting a job of VC research" in t for t in pending), pending

        seen = {}
        for who, own, other in (
            ("bob", "bob-borrow", "alice-reclaim"),
            ("alice", "alice-reclaim", "bob-borrow"),
        ):
            texts = [
                api[who].get(f"/api/v1/jobs/{own}").text,
                api[who].get(f"/api/v1/jobs/{own}/events").text,
                api[who].get("/api/v1/jobs").text,
            ]
            assert all(other not in t for t in texts), (who, texts)
            seen[who] = texts
        # what each side is told instead
        assert "preempted for a job of VC default" in seen["bob"][1], seen["bob"][1]
