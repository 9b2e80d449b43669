"""One task's failing start never blocks its node (issue 25 item 5, the agent half): an
exception other than a store error fails that task as ``launch_error`` and the node's
other tasks start and run (real redis-server, real process executor and processes); a
task stopped before it started is reported stopped, so ``job stop`` ends its job."""

from __future__ import annotations

import pytest
import redis

from scheduler.agent.process import ProcessExecutor
from scheduler.store import Store
from scheduler.store.records import TaskState
from tests.scheduler.agent.test_agent import make_agent, place, until


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


class RefusesOneJob(ProcessExecutor):
    """The real process executor, but a start of job ``bad`` raises what ``execve`` raises
    for an argument with a NUL byte (a ValueError, not an ExecutorError)."""

    def start(self, launch):  # type: ignore[no-untyped-def]
        if launch.job == "bad":
            raise ValueError("embedded null byte")
        return super().start(launch)


def test_a_start_that_raises_fails_that_task_only(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.executor = RefusesOneJob(limits="none")
    agent.register()
    place(store, "bad", "sleep 5")
    place(store, "good", "sleep 0.2")
    agent.reconcile()  # used to raise here on every pass, starting nothing
    bad = until(lambda: [t for t in store.tasks("bad") if t.done], timeout=5)
    assert bad[0].state == TaskState.FAILED
    assert "could not start (launch_error): ValueError: embedded null byte" in bad[0].message
    assert bad[0].diagnosis["kind"] == "start_failed"

    def good_done():
        agent.reconcile()
        return [t for t in store.tasks("good") if t.done]

    (good,) = until(good_done, timeout=15)
    assert good.state == TaskState.SUCCEEDED


def test_a_task_stopped_before_it_started_is_reported_stopped(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place(store, "never", "sleep 30")
    (t,) = store.tasks("never")
    t.desired = "stop"
    store.update_tasks("never", [t])
    agent.reconcile()
    (t,) = until(lambda: [x for x in store.tasks("never") if x.done], timeout=5)
    assert t.state == TaskState.STOPPED and t.message == "stopped before it started"
    assert not agent.local
