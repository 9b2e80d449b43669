"""Process mode end to end: a real redis-server, the loop and agents as real processes
(``scheduler.dev``), tasks as real processes. Heartbeat timeouts are short (3 s)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from scheduler import dev
from scheduler.jobref import job_key
from scheduler.logpaths import job_log_dir
from tests.devcluster import gone, submit, task_pids, wait_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def make_cluster(tmp_path):
    started: list[Path] = []

    def make(nodes: int = 2, **kwargs) -> dev.DevCluster:
        directory = tmp_path / f"dev-{len(started)}"
        started.append(directory)
        kwargs.setdefault("api", False)
        return dev.up(
            nodes=nodes,
            cpu_per_node=2,
            memory_per_node="4Gi",
            heartbeat_interval_s=0.5,
            heartbeat_timeout_s=3,
            loop_interval_s=0.3,
            stop_grace_s=2,
            directory=directory,
            **kwargs,
        )

    yield make
    for directory in started:
        dev.down(directory)


def test_hello_gang_ps_worker_job_succeeds_with_the_api(make_cluster):
    cluster = make_cluster(nodes=2, api=True)
    assert httpx.get(cluster.endpoint + "/healthz").status_code == 200
    state = dev.read_state(Path(cluster.base_dir).parent / "x") or {}
    assert state == {}  # read_state of another dir sees nothing
    store = cluster.store()
    name = submit(store, (REPO / "examples/jobs/hello-gang.yaml").read_text())
    job = wait_job(store, name)
    assert job.state == "succeeded", store.events(name)
    tasks = store.tasks(name)
    assert [t.key for t in tasks] == ["ps-0", "worker-0", "worker-1"]
    assert all(t.exit_code == 0 for t in tasks)
    logs = job_log_dir(cluster.share_dir, name, job.uid)
    # each task's log, and beside it the index of when its parts reached the share
    # (scheduler/logtimes.py): nothing else of the job lands in its log directory
    assert sorted(p.name for p in logs.iterdir()) == [
        "ps-0.log",
        "ps-0.log.times",
        "worker-0.log",
        "worker-0.log.times",
        "worker-1.log",
        "worker-1.log.times",
    ]
    assert "hello from worker-1" in (logs / "ps-0.log").read_text()
    assert [e["state"] for e in store.events(name)] == [
        "submitted",
        "queued",
        "scheduled",
        "running",
        "succeeded",
    ]
    # the API sees the same job with the admin token of the state file
    r = httpx.get(
        f"{cluster.endpoint}/jobs/{name}", headers={"Authorization": f"Bearer {cluster.token}"}
    )
    if r.status_code == 404:  # routes may be versioned
        r = httpx.get(
            f"{cluster.endpoint}/api/v1/jobs/{name}",
            headers={"Authorization": f"Bearer {cluster.token}"},
        )
    assert r.status_code == 200 and "succeeded" in r.text


def test_failing_task_is_retried_then_the_job_fails_with_its_reason(make_cluster):
    cluster = make_cluster(nodes=1)
    store = cluster.store()
    name = submit(
        store,
        {
            "name": "flaky",
            "retry": {"max_attempts": 3},
            "roles": {
                "w": {
                    "command": "echo try $PASTURE_ATTEMPT; exit 1",
                    "resources": {"cpu": 1, "memory": "256Mi"},
                }
            },
        },
    )
    job = wait_job(store, name)
    assert job.state == "failed"
    assert job.attempt == 3 and job.failures == 3
    assert "exited with code 1" in job.reason and "3 of 3 attempts failed" in job.reason
    log = (job_log_dir(cluster.share_dir, "flaky", job.uid) / "w-0.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("try")] == [
        "try 1",
        "try 2",
        "try 3",
    ]
    assert log.count("=== attempt") == 3


def test_stopping_a_job_stops_its_processes(make_cluster):
    """`job stop` through the loop: every process of each task goes, also a child that
    left the task's process group and session (setsid; the task's cgroup holds it)."""
    cluster = make_cluster(nodes=2)
    store = cluster.store()
    name = submit(
        store,
        {
            "name": "sleepy",
            "roles": {
                "w": {
                    "replicas": 2,
                    "command": (
                        "setsid sleep 300 </dev/null >/dev/null 2>&1 &"
                        ' echo $! > "$PASTURE_JOB_DIR/setsid-$PASTURE_TASK_INDEX"; sleep 300'
                    ),
                    "resources": {"cpu": 1, "memory": "256Mi"},
                }
            },
        },
    )
    wait_job(store, name, states=("running",))
    job_dir = Path(cluster.share_dir) / "jobs" / name
    marks = [job_dir / f"setsid-{i}" for i in range(2)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        len(task_pids(store, name)) < 2 or not all(m.exists() and m.read_text() for m in marks)
    ):
        time.sleep(0.1)
    pids = task_pids(store, name) + [int(m.read_text()) for m in marks]
    assert len(pids) == 4 and not any(gone(p) for p in pids)
    store.request_stop(name, "test stop")
    job = wait_job(store, name, timeout=30)
    assert job.state == "stopped" and job.reason == "test stop"
    assert all(gone(p) for p in pids)
    assert store.ledger() == {}


def test_killing_the_loop_loses_no_job_and_double_allocates_nothing(make_cluster, tmp_path):
    cluster = make_cluster(nodes=2)
    store = cluster.store()
    runs = tmp_path / "runs"
    runs.mkdir()
    names = []
    for i in range(6):
        names.append(
            submit(
                store,
                {
                    "name": f"job-{i}",
                    "roles": {
                        "w": {
                            "replicas": 2,
                            "command": f"echo $PASTURE_TASK_INDEX >> {runs}/job-{i}; sleep 1",
                            "resources": {"cpu": 1, "memory": "256Mi"},
                        }
                    },
                },
            )
        )
        if i == 2:
            wait_job(store, "job-0", states=("scheduled", "running", "succeeded"))
            cluster.kill("loop")  # SIGKILL mid-run
    # jobs submitted while the loop is dead wait in the store
    time.sleep(1)
    assert {store.get_job(n).state for n in names[3:]} == {"submitted"}
    cluster.start_loop()
    cluster.save(tmp_path / "dev-0")  # so that the fixture's dev.down stops the new loop
    for n in names:
        assert wait_job(store, n, timeout=90).state == "succeeded", store.events(n)
    for n in names:
        # every task ran exactly once: no job was allocated twice
        assert sorted((runs / n).read_text().split()) == ["0", "1"]
        assert store.get_job(n).attempt == 1
    assert store.ledger() == {}


def test_killing_an_agent_marks_its_node_lost_and_the_job_moves(make_cluster):
    cluster = make_cluster(nodes=2)
    store = cluster.store()
    name = submit(
        store,
        {
            "name": "mover",
            "retry": {"max_attempts": 2},
            "roles": {
                "w": {
                    "command": 'if [ "$PASTURE_ATTEMPT" = 1 ]; then sleep 300; fi; echo done',
                    "resources": {"cpu": 2, "memory": "256Mi"},
                }
            },
        },
    )
    wait_job(store, name, states=("running",))
    first = store.task(name, "w-0")
    index = cluster.nodes.index(first.node)
    cluster.kill(f"agent-{index}")
    t0 = time.monotonic()
    job = wait_job(store, name, timeout=60)
    assert job.state == "succeeded", store.events(name)
    assert store.get_node(first.node).state == "lost"
    assert time.monotonic() - t0 >= 2  # not before the heartbeat timeout
    again = store.task(name, "w-0")
    assert again.attempt == 2 and again.node != first.node
    assert any("lost" in e["reason"] for e in store.events(name))


def test_vc_over_its_guarantee_is_preempted_when_the_owner_submits(make_cluster):
    vcs = [
        {"name": "owner", "guarantee": {"cpu": 2}},
        {"name": "borrower", "guarantee": {"cpu": 2}},
    ]
    cluster = make_cluster(nodes=2, virtual_clusters=vcs)
    store = cluster.store()
    for i in range(2):  # the borrower fills both nodes (4 cores): 2 borrowed
        submit(
            store,
            {
                "name": f"borrow-{i}",
                "vc": "borrower",
                "roles": {
                    "w": {"command": "sleep 300", "resources": {"cpu": 2, "memory": "256Mi"}}
                },
            },
        )
    borrowed = [job_key("borrower", f"borrow-{i}") for i in range(2)]  # the jobs' keys
    for key in borrowed:
        wait_job(store, key, states=("running",))
    (usage,) = [v for v in store.vc_usage() if v.name == "borrower"]
    assert usage.borrowed["cpu_m"] == 2000
    submit(
        store,
        {
            "name": "mine",
            "vc": "owner",
            "roles": {"w": {"command": "echo mine", "resources": {"cpu": 2, "memory": "256Mi"}}},
        },
    )
    assert wait_job(store, job_key("owner", "mine"), timeout=60).state == "succeeded"
    victims = [n for n in borrowed if any(e["state"] == "preempted" for e in store.events(n))]
    assert len(victims) == 1
    victim = store.get_job(victims[0])
    assert victim.attempt == 2 and victim.failures == 0
    assert victim.state in ("queued", "scheduled", "running")
