"""Job lifecycle end to end in process mode (real redis-server, loop, agents, API and task
processes): completion rules, Volcano event policies, min_available, per-task restart,
depends_on, job delete and clean-up after ``ttl_after_finished``.

Jobs are written in pasture's own spec with the lifecycle fields (scheduler/rules/lifecycle.py).
One cluster (2 nodes x 2 cores) serves the module; each test waits for its jobs to end.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from scheduler import dev
from scheduler.logpaths import job_log_dir
from tests.devcluster import gone, submit, task_pids, wait_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SMALL = {"cpu": 1, "memory": "256Mi"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lifecycle-dev")
    c = dev.up(
        nodes=2,
        cpu_per_node=2,
        memory_per_node="4Gi",
        api=True,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=5,
        loop_interval_s=0.3,
        stop_grace_s=2,
        directory=directory,
    )
    yield c
    dev.down(directory)


def wait_running(store, name, n, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(t.state == "running" for t in store.tasks(name)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name}: fewer than {n} tasks running: {store.tasks(name)}")


def test_openpai_master_worker_ends_when_the_master_succeeds(cluster):
    """OpenPAI v2 completion.minSucceededInstances 1 on the master: the workers run
    forever, the job still ends (and the workers are stopped)."""
    store = cluster.store()
    name = submit(
        store,
        {
            "name": "pai-mw",
            "roles": {
                "master": {
                    "command": "sleep 2; echo master done",
                    "resources": SMALL,
                    "completion": {"min_succeeded": 1},
                },
                "worker": {"replicas": 2, "command": "sleep 1000", "resources": SMALL},
            },
        },
    )
    wait_running(store, name, 3)
    workers = [
        p
        for t, p in zip(store.tasks(name), task_pids(store, name), strict=True)
        if t.role == "worker"
    ]
    job = wait_job(store, name, timeout=40)
    assert job.state == "succeeded", store.events(name)
    assert "1 of 1 task(s) of role master succeeded" in job.reason
    states = {t.key: t.state for t in store.tasks(name)}
    assert states == {"master-0": "succeeded", "worker-0": "stopped", "worker-1": "stopped"}
    assert all(gone(p) for p in workers)


def test_volcano_task_completed_complete_job_on_the_worker_role(cluster):
    """Volcano ``policies: [{event: TaskCompleted, action: CompleteJob}]`` on the worker
    task: the ps runs forever, the job completes when both workers succeeded."""
    store = cluster.store()
    name = submit(
        store,
        {
            "name": "vc-psw",
            "policies": {
                "on_events": [
                    {"event": "task_completed", "action": "complete_job", "role": "worker"}
                ]
            },
            "roles": {
                "ps": {"command": "sleep 1000", "resources": SMALL},
                "worker": {"replicas": 2, "command": "sleep 2", "resources": SMALL},
            },
        },
    )
    job = wait_job(store, name, timeout=40)
    assert job.state == "succeeded", store.events(name)
    assert "task_completed -> complete_job" in job.reason
    assert store.task(name, "ps-0").state == "stopped"


def test_min_available_starts_the_rest_when_they_fit_and_needs_every_replica(cluster):
    """replicas 6, min_available 3 on 4 cores: 4 start, the last 2 start as the first
    ones end; the job succeeds only after all 6 ran (each leaves a mark on the share)."""
    store = cluster.store()
    marks = Path(cluster.share_dir) / "ma-marks"
    marks.mkdir()
    name = submit(
        store,
        {
            "name": "ma",
            "roles": {
                "w": {
                    "replicas": 6,
                    "min_available": 3,
                    "resources": SMALL,
                    "command": f"sleep 2; touch {marks}/$PASTURE_TASK_INDEX",
                }
            },
        },
    )
    wait_job(store, name, states=("running",))
    assert len(store.tasks(name)) == 4
    job = wait_job(store, name, timeout=60)
    assert job.state == "succeeded" and job.reason == "all tasks succeeded", store.events(name)
    assert sorted(p.name for p in marks.iterdir()) == ["0", "1", "2", "3", "4", "5"]
    assert len(store.tasks(name)) == 6 and job.attempt == 1
    grown = [re.search(r"(\d+) more task\(s\) placed", e["reason"]) for e in store.events(name)]
    assert sum(int(m.group(1)) for m in grown if m) == 2  # in one grow or two, as room frees
    assert store.ledger() == {}


def test_a_failed_task_restarts_in_place_and_the_job_succeeds(cluster):
    store = cluster.store()
    flag = Path(cluster.share_dir) / "restart-flag"
    name = submit(
        store,
        {
            "name": "rt",
            "roles": {
                "w": {
                    "replicas": 2,
                    "max_task_retries": 1,
                    "resources": SMALL,
                    # task 1 fails on its first run only
                    "command": f"if [ $PASTURE_TASK_INDEX = 1 ] && [ ! -e {flag} ]; then "
                    f"touch {flag}; exit 7; fi; sleep 1",
                }
            },
        },
    )
    job = wait_job(store, name, timeout=40)
    assert job.state == "succeeded", store.events(name)
    assert job.attempt == 1 and job.failures == 0
    t = store.task(name, "w-1")
    assert t.restarts == 1 and t.state == "succeeded"
    assert store.task(name, "w-0").restarts == 0
    log = (job_log_dir(cluster.share_dir, "rt", job.uid) / "w-1.log").read_text()
    assert log.count("=== attempt 1") == 2
    assert any("exited with code 7" in e["reason"] for e in store.events(name))


def test_volcano_restart_task_restarts_the_whole_role_in_place(cluster):
    """Volcano ``PodFailed -> RestartTask`` on the worker task: worker-1 fails once; the
    running worker-0 is stopped and both restart in place (same attempt, not a job
    retry), the ps keeps running untouched, and the job then succeeds."""
    store = cluster.store()
    flag = Path(cluster.share_dir) / "restart-role-flag"
    worker = (
        f'if [ ! -e {flag} ]; then if [ "$VC_TASK_INDEX" = 1 ]; then sleep 1; touch {flag}; '
        "exit 7; fi; sleep 1000; fi; sleep 1"
    )
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": 1}}}
    name = submit(
        store,
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "vc-rt"},
            "spec": {
                "tasks": [
                    {
                        "name": "ps",
                        "template": {
                            "spec": {"containers": [{**container, "command": ["sleep", "8"]}]}
                        },
                    },
                    {
                        "name": "worker",
                        "replicas": 2,
                        "policies": [{"event": "PodFailed", "action": "RestartTask"}],
                        "template": {
                            "spec": {"containers": [{**container, "command": ["sh", "-c", worker]}]}
                        },
                    },
                ]
            },
        },
    )
    wait_running(store, name, 3)
    first = {t.key: p for t, p in zip(store.tasks(name), task_pids(store, name), strict=True)}
    job = wait_job(store, name, timeout=40)
    assert job.state == "succeeded", store.events(name)
    assert job.attempt == 1 and job.failures == 0
    tasks = {t.key: t for t in store.tasks(name)}
    assert {k: (t.state, t.restarts) for k, t in tasks.items()} == {
        "ps-0": ("succeeded", 0),
        "worker-0": ("succeeded", 1),
        "worker-1": ("succeeded", 1),
    }
    assert gone(first["worker-0"])  # the running replica was stopped, then started again
    logs = job_log_dir(cluster.share_dir, name, store.get_job(name).uid)
    assert (logs / "worker-0.log").read_text().count("=== attempt 1") == 2
    assert (logs / "ps-0.log").read_text().count("=== attempt 1") == 1
    assert any("restart_role (retry 1 of 3)" in e["reason"] for e in store.events(name))


def test_depends_on_starts_workers_after_the_ps_runs(cluster):
    store = cluster.store()
    name = submit(
        store,
        {
            "name": "dep",
            "roles": {
                "ps": {"command": "sleep 3", "resources": SMALL},
                "worker": {
                    "replicas": 2,
                    "depends_on": ["ps"],
                    "command": "sleep 1",
                    "resources": SMALL,
                },
            },
        },
    )
    job = wait_job(store, name, timeout=40)
    assert job.state == "succeeded", store.events(name)
    tasks = {t.key: t for t in store.tasks(name)}
    assert all(tasks[k].started > tasks["ps-0"].started for k in ("worker-0", "worker-1"))


def test_delete_and_ttl_after_finished(cluster):
    store = cluster.store()
    api = httpx.Client(
        base_url=cluster.endpoint, headers={"Authorization": f"Bearer {cluster.token}"}
    )
    with api:
        short = {"command": "true", "resources": SMALL}
        submit(store, {"name": "ttl", "ttl_after_finished": 1, "roles": {"w": short}})
        submit(store, {"name": "kept", "roles": {"w": short}})
        submit(store, {"name": "busy", "roles": {"w": {**short, "command": "sleep 1000"}}})
        assert wait_job(store, "kept").state == "succeeded"
        deadline = time.monotonic() + 20
        while store.get_job("ttl") is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert store.get_job("ttl") is None and store.events("ttl") == []
        assert api.get("/api/v1/jobs/ttl").status_code == 404
        assert store.get_job("kept") is not None  # no ttl, no cluster default: kept
        wait_running(store, "busy", 1)
        busy_pids = task_pids(store, "busy")
        assert api.delete("/api/v1/jobs/busy").status_code == 409
        r = api.delete("/api/v1/jobs/busy", params={"force": "true"})
        assert r.status_code == 200 and r.json()["deleted"] is False
        assert wait_job(store, "busy").state == "stopped"
        assert all(gone(p) for p in busy_pids)
        assert api.delete("/api/v1/jobs/busy").json()["deleted"] is True
        assert api.delete("/api/v1/jobs/kept").status_code == 200
        assert store.get_job("busy") is None and store.get_job("kept") is None
