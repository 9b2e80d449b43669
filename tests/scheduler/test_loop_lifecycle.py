"""The loop applying scheduler.rules.lifecycle against a real redis-server and the real core;
agents are played by the test through ``store.report_task``."""

from __future__ import annotations

import pytest

from scheduler.spec import parse_job_spec
from scheduler.store import TaskState
from tests.factories import loop_on_two_nodes


@pytest.fixture()
def env(redis_url):
    return loop_on_two_nodes(redis_url, loop={"heartbeat_timeout_s": 60, "finished_job_ttl_s": 30})


def submit(store, name, roles, **extra):
    store.create_job(parse_job_spec({"name": name, "roles": roles, **extra}), user="ann")


def report(store, job, state, code=None, only=None):
    for t in store.tasks(job):
        if only is None or t.key in only:
            store.report_task(job, t.key, t.attempt, t.node, state, code)


def test_failed_task_restarts_in_place_without_a_new_attempt(env):
    store, loop = env
    submit(store, "r", {"w": {"replicas": 2, "command": "x", "max_task_retries": 1}})
    loop.cycle()
    report(store, "r", TaskState.RUNNING)
    loop.cycle()
    before = {t.key: t.node for t in store.tasks("r")}
    report(store, "r", TaskState.FAILED, 2, only={"w-1"})
    loop.cycle()
    job = store.get_job("r")
    t = store.task("r", "w-1")
    assert job.state == "running" and job.attempt == 1 and job.failures == 0
    assert (t.state, t.desired, t.restarts, t.exit_code) == ("scheduled", "run", 1, None)
    assert {x.key: x.node for x in store.tasks("r")} == before  # same node, same allocation
    assert any("w-1 restarted in place" in e["reason"] for e in store.events("r"))
    # the agent runs it again; a second failure is beyond max_task_retries: the job fails
    report(store, "r", TaskState.RUNNING, only={"w-1"})
    report(store, "r", TaskState.FAILED, 2, only={"w-1"})
    loop.cycle()
    loop.cycle()  # the other task is being stopped
    report(store, "r", TaskState.STOPPED, only={"w-0"})
    loop.cycle()
    job = store.get_job("r")
    assert job.state == "failed" and "exited with code 2" in job.reason


def test_min_failed_tolerates_failures_and_min_succeeded_ends_early(env):
    store, loop = env
    roles = {
        "master": {"replicas": 1, "command": "m", "completion": {"min_succeeded": 1}},
        "worker": {"replicas": 2, "command": "w", "completion": {"min_failed": 2}},
    }
    submit(store, "mw", roles)
    loop.cycle()
    report(store, "mw", TaskState.RUNNING)
    report(store, "mw", TaskState.FAILED, 1, only={"worker-0"})
    loop.cycle()
    assert store.get_job("mw").state == "running"  # one failure of two tolerated
    report(store, "mw", TaskState.SUCCEEDED, 0, only={"master-0"})
    loop.cycle()
    assert store.task("mw", "worker-1").desired == "stop"  # workers stopped
    report(store, "mw", TaskState.STOPPED, only={"worker-1"})
    loop.cycle()
    job = store.get_job("mw")
    assert job.state == "succeeded" and "role master succeeded" in job.reason


def test_depends_on_holds_tasks_until_their_dependencies_run(env):
    store, loop = env
    roles = {
        "ps": {"replicas": 1, "command": "p"},
        "worker": {"replicas": 2, "command": "w", "depends_on": ["ps"]},
    }
    submit(store, "dep", roles)
    loop.cycle()
    desired = {t.key: t.desired for t in store.tasks("dep")}
    assert desired == {"ps-0": "run", "worker-0": "wait", "worker-1": "wait"}
    loop.cycle()
    assert store.task("dep", "worker-0").desired == "wait"
    report(store, "dep", TaskState.RUNNING, only={"ps-0"})
    loop.cycle()
    assert {t.key: t.desired for t in store.tasks("dep")} == dict.fromkeys(desired, "run")


def test_stopping_a_job_with_waiting_tasks_ends_them_at_once(env):
    store, loop = env
    roles = {
        "ps": {"replicas": 1, "command": "p"},
        "worker": {"replicas": 1, "command": "w", "depends_on": ["ps"]},
    }
    submit(store, "st", roles)
    loop.cycle()
    store.request_stop("st")
    loop.cycle()
    assert store.task("st", "worker-0").state == "stopped"
    report(store, "st", TaskState.STOPPED, only={"ps-0"})
    loop.cycle()
    assert store.get_job("st").state == "stopped"


def test_finished_jobs_are_deleted_after_their_ttl(env, monkeypatch):
    store, loop = env
    submit(store, "keep", {"a": {"command": "x"}})  # cluster default: 30 s
    submit(store, "soon", {"a": {"command": "x"}}, ttl_after_finished=0)
    loop.cycle()
    report(store, "keep", TaskState.SUCCEEDED, 0)
    report(store, "soon", TaskState.SUCCEEDED, 0)
    loop.cycle()
    assert store.get_job("soon").state == "succeeded"
    loop.cycle()
    assert store.get_job("soon") is None and store.events("soon") == []
    assert store.get_job("keep").state == "succeeded"
    now = store.now()
    monkeypatch.setattr(store, "now", lambda: now + 31)
    loop.cycle()
    assert store.get_job("keep") is None
    assert store.list_jobs()[1] == 0


def test_min_available_gang_starts_the_rest_as_room_comes_free_and_succeeds_with_all(env):
    """replicas 6, min_available 3 on room for 4: 4 start; the other 2 start when two
    finished tasks give their room back; success needs all 6 (it used to report success
    after 4)."""
    store, loop = env
    role = {"replicas": 6, "min_available": 3, "command": "x", "resources": {"cpu": 2}}
    submit(store, "ma", {"w": role})
    loop.cycle()
    assert sorted(t.index for t in store.tasks("ma")) == [0, 1, 2, 3]
    report(store, "ma", TaskState.RUNNING)
    report(store, "ma", TaskState.SUCCEEDED, 0)
    loop.cycle()
    job = store.get_job("ma")
    assert job.state == "running", job.reason
    loop.cycle()  # the freed room is used by the next cycle's core
    tasks = {t.key: t for t in store.tasks("ma")}
    assert sorted(tasks) == [f"w-{i}" for i in range(6)]
    assert tasks["w-4"].state == "scheduled" and tasks["w-4"].ports["main"] >= 31000
    assert any("2 more task(s) placed" in e["reason"] for e in store.events("ma"))
    held = [a for a in store.ledger().values() if a.cpu_m]
    assert sorted(a.index for a in held) == [4, 5]
    report(store, "ma", TaskState.RUNNING, only={"w-4", "w-5"})
    report(store, "ma", TaskState.SUCCEEDED, 0, only={"w-4", "w-5"})
    loop.cycle()
    job = store.get_job("ma")
    assert job.state == "succeeded" and job.reason == "all tasks succeeded"
    assert store.ledger() == {}


def test_commit_drops_grows_of_jobs_that_moved_on_and_of_taken_keys(env):
    store, loop = env
    role = {"replicas": 4, "min_available": 1, "command": "x", "resources": {"cpu": 4}}
    submit(store, "g", {"w": role})
    loop.cycle()
    assert [t.key for t in store.tasks("g")] == ["w-0", "w-1"]
    job = store.get_job("g")

    def grow(key, attempt=job.attempt):
        alloc = {
            "job": "g",
            "role": "w",
            "index": int(key[-1]),
            "attempt": attempt,
            "node": "n1",
            "cpu_m": 0,
            "memory": 0,
            "gpu": 0,
            "gpus": [],
            "ports": [],
        }
        task = {
            "role": "w",
            "index": int(key[-1]),
            "attempt": attempt,
            "node": "n1",
            "state": "scheduled",
            "desired": "run",
        }
        return {
            "job": "g",
            "attempt": attempt,
            "nodes": "n1",
            "tasks": [{"key": key, "node": "n1", "alloc": alloc, "task": task}],
        }

    empty = {"binds": [], "preemptions": [], "pending": {}}
    # a key the job holds already, and another attempt: dropped, the commit goes through
    ok, _ = store.commit(store.version(), {**empty, "grows": [grow("w-0"), grow("w-2", 9)]})
    assert ok and sorted(t.key for t in store.tasks("g")) == ["w-0", "w-1"]
    ok, _ = store.commit(store.version(), {**empty, "grows": [grow("w-2")]})
    assert ok and sorted(t.key for t in store.tasks("g")) == ["w-0", "w-1", "w-2"]
    assert "g/w-2" in store.ledger()
    store.request_stop("g")
    ok, _ = store.commit(store.version(), {**empty, "grows": [grow("w-3")]})
    assert ok and "w-3" not in {t.key for t in store.tasks("g")}


def _ends_without_starting(store, loop, job):
    """The job is bound; its one task's pod never starts: the agent reports it ended by the
    platform (cause ``not_started``, as the Kubernetes executor does past its start limit)."""
    for _ in range(5):  # queued -> bound
        loop.cycle()
        tasks = store.tasks(job)
        if tasks:
            break
    (t,) = tasks
    store.report_task(
        job,
        t.key,
        t.attempt,
        t.node,
        TaskState.LOST,
        125,
        "pod not running after 900 s (ContainerCreating): ended by the platform",
        cause="not_started",
    )
    loop.cycle()


def test_free_requeues_are_capped_by_max_free_requeues(redis_url):
    """Issue 35's risk: a job whose pods can never start was requeued free forever. With
    the default ``loop.max_free_requeues`` (10) the eleventh attempt in a row that the
    infrastructure ends fails the job, and the reason names the repeated cause and the
    setting (on main: requeued again, forever)."""
    store, loop = loop_on_two_nodes(redis_url)
    submit(store, "stuck", {"w": {"replicas": 1, "command": "x"}})
    for attempt in range(1, 11):
        _ends_without_starting(store, loop, "stuck")
        job = store.get_job("stuck")
        assert job.state in ("queued", "scheduled") and job.attempt == attempt + 1, job.reason
        assert job.attempts[-1]["charged"] is False, job.attempts
    _ends_without_starting(store, loop, "stuck")
    job = store.get_job("stuck")
    assert job.state == "failed", job.reason
    assert "11 attempts in a row were ended by the infrastructure (not_started x11)" in job.reason
    assert "loop.max_free_requeues is 10" in job.reason
    assert [(a["cause"], a["charged"]) for a in job.attempts] == [("not_started", False)] * 10 + [
        ("not_started", True)
    ]


def test_an_attempt_the_job_itself_ends_starts_the_free_requeue_count_again(redis_url):
    """Only attempts in a row count: a charged failure between free requeues resets it."""
    store, loop = loop_on_two_nodes(redis_url, loop={"max_free_requeues": 1})
    submit(store, "r", {"w": {"replicas": 1, "command": "x"}}, retry={"max_attempts": 3})
    _ends_without_starting(store, loop, "r")
    loop.cycle()
    report(store, "r", TaskState.RUNNING)
    report(store, "r", TaskState.FAILED, 1)
    loop.cycle()
    job = store.get_job("r")  # its own failure: charged, retried
    assert job.attempt == 3 and job.attempts[-1]["charged"] is True, job.attempts
    _ends_without_starting(store, loop, "r")
    job = store.get_job("r")
    assert job.state in ("queued", "scheduled") and job.attempt == 4, job.reason
    _ends_without_starting(store, loop, "r")
    job = store.get_job("r")
    assert job.state == "failed" and "loop.max_free_requeues is 1" in job.reason
