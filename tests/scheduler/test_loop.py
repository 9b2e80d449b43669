"""The loop's lifecycle against a real redis-server and the real core; agents are played
by the test through ``store.report_task`` (the agent itself is tested in agent/)."""

import dataclasses
import time

import pytest

from scheduler.core.model import Decision, Resources, TaskPlacement
from scheduler.loop import Loop
from scheduler.spec import parse_job_spec
from scheduler.store import NodeRecord, TaskState
from scheduler.store.snapshot import take_snapshot
from tests.factories import Clock, loop_on_two_nodes


@pytest.fixture()
def env(redis_url):
    return loop_on_two_nodes(redis_url)


def submit(store, name, roles=None, **extra):
    roles = roles or {
        "ps": {"replicas": 1, "command": "ps"},
        "worker": {"replicas": 2, "command": "w"},
    }
    store.create_job(parse_job_spec({"name": name, "roles": roles, **extra}), user="ann")


def report_all(store, job, state, code=None, only=None):
    for t in store.tasks(job):
        if only is None or t.key in only:
            store.report_task(job, t.key, t.attempt, t.node, state, code)


def states(store, job):
    return [e["state"] for e in store.events(job)]


def test_job_runs_through_the_lifecycle(env):
    store, loop = env
    submit(store, "j")
    loop.cycle()
    job = store.get_job("j")
    assert job.state == "scheduled"
    tasks = store.tasks("j")
    assert [t.key for t in tasks] == ["ps-0", "worker-0", "worker-1"]
    assert all(t.ports["main"] >= 31000 for t in tasks)
    report_all(store, "j", TaskState.RUNNING)
    loop.cycle()
    assert store.get_job("j").state == "running"
    report_all(store, "j", TaskState.SUCCEEDED, 0)
    loop.cycle()
    job = store.get_job("j")
    assert job.state == "succeeded" and job.end_time is not None
    assert states(store, "j") == ["submitted", "queued", "scheduled", "running", "succeeded"]
    assert store.ledger() == {}


def test_failed_task_is_retried_until_max_attempts_then_fails(env):
    store, loop = env
    submit(store, "j", retry={"max_attempts": 2})
    for attempt in (1, 2):
        loop.cycle()
        assert store.get_job("j").state == "scheduled"
        assert {t.attempt for t in store.tasks("j")} == {attempt}
        report_all(store, "j", TaskState.RUNNING)
        report_all(store, "j", TaskState.FAILED, 1, only={"worker-1"})
        loop.cycle()
        # the rest of the gang is told to stop, the job waits for them
        assert {t.key for t in store.tasks("j") if t.desired == "stop"} >= {"ps-0", "worker-0"}
        report_all(store, "j", TaskState.STOPPED, 143, only={"ps-0", "worker-0"})
        loop.cycle()
    job = store.get_job("j")
    assert job.state == "failed"
    assert job.failures == 2 and job.attempt == 2 and job.exit_code == 1
    assert "task worker-1 exited with code 1" in job.reason
    assert "2 of 2 attempts failed" in job.reason
    assert states(store, "j").count("queued") == 2  # first queue + one retry
    assert store.ledger() == {}


def test_fail_on_exit_code_and_fail_job_policy_do_not_retry(env):
    store, loop = env
    submit(
        store,
        "a",
        roles={"w": {"command": "x"}},
        retry={"max_attempts": 5, "fail_on_exit_codes": [2]},
    )
    submit(
        store,
        "b",
        roles={"w": {"command": "x"}},
        retry={"max_attempts": 5},
        policies={"on_task_failure": "fail_job"},
    )
    loop.cycle()
    report_all(store, "a", TaskState.FAILED, 2)
    report_all(store, "b", TaskState.FAILED, 1)
    loop.cycle()
    a, b = store.get_job("a"), store.get_job("b")
    assert a.state == "failed" and "exit code 2 is not retried" in a.reason
    assert b.state == "failed" and "fail_job" in b.reason


def test_completion_any_stops_the_rest_and_succeeds(env):
    store, loop = env
    submit(store, "j", policies={"completion": {"role": "worker", "when": "any"}})
    loop.cycle()
    report_all(store, "j", TaskState.RUNNING)
    report_all(store, "j", TaskState.SUCCEEDED, 0, only={"worker-0"})
    loop.cycle()
    assert {t.key for t in store.tasks("j") if t.desired == "stop"} == {"ps-0", "worker-1"}
    assert store.get_job("j").state == "running"
    report_all(store, "j", TaskState.STOPPED, 143, only={"ps-0", "worker-1"})
    loop.cycle()
    job = store.get_job("j")
    assert job.state == "succeeded" and "role worker" in job.reason


def test_stop_of_queued_and_running_jobs(env):
    store, loop = env
    submit(store, "big", roles={"w": {"replicas": 3, "command": "x", "resources": {"cpu": 4}}})
    submit(store, "run", roles={"w": {"command": "x"}})
    loop.cycle()
    assert store.get_job("big").state == "queued"  # 12 cores on 2 x 4
    assert store.get_job("big").pending_reason["message"]
    store.request_stop("big")
    store.request_stop("run", "user pressed stop")
    loop.cycle()
    assert store.get_job("big").state == "stopped"
    assert store.task("run", "w-0").desired == "stop"
    report_all(store, "run", TaskState.STOPPED, 143)
    loop.cycle()
    job = store.get_job("run")
    assert job.state == "stopped" and job.reason == "user pressed stop"


def test_lost_node_requeues_its_job_elsewhere_without_charging_an_attempt(env):
    store, loop = env
    clock = Clock()
    loop = Loop(store, loop.settings, clock=clock)
    # default retry policy: max_attempts 1, so a charged attempt would fail the job
    submit(store, "j", roles={"w": {"command": "x", "resources": {"cpu": 3}}})
    loop.cycle()
    (task,) = store.tasks("j")
    report_all(store, "j", TaskState.RUNNING)
    other = "n2" if task.node == "n1" else "n1"
    for _ in range(3):  # 6 s observed silence > heartbeat_timeout_s 5
        store.heartbeat(other, {})  # only the other node keeps heartbeating
        clock.t += 2.0
        loop.cycle()
    assert store.get_node(task.node).state == "lost"
    loop.cycle()
    job = store.get_job("j")
    assert job.state == "scheduled" and job.attempt == 2 and job.failures == 0
    (again,) = store.tasks("j")
    assert again.node == other
    assert any("lost" in e["reason"] for e in store.events("j"))
    (first,) = job.attempts
    assert first["cause"] == "node_lost" and first["charged"] is False
    assert first["attempt"] == 1 and first["nodes"] == [task.node]
    # the core sees how long it ran and when it was requeued (STARVELIMIT's input)
    snap, _ = take_snapshot(store)
    (rj,) = snap.running
    assert rj.job.requeued_at == first["ended"]
    assert rj.job.executed_s == first["ended"] - first["started"] > 0


def test_silence_is_counted_only_while_the_loop_can_read_the_store(env):
    store, loop = env
    clock = Clock()
    loop = Loop(store, loop.settings, clock=clock)
    loop.cycle()
    clock.t += 4.0
    loop._health.blind()  # a cycle failed: the store did not answer
    clock.t += 2.0  # 6 s since the last heartbeat, 0 s observed since the store came back
    loop.cycle()
    assert {n.state for n in store.list_nodes()} == {"ready"}
    for _ in range(2):  # readings at most half the timeout apart: 5 s observed, not yet
        clock.t += 2.5
        loop.cycle()
    assert {n.state for n in store.list_nodes()} == {"ready"}
    clock.t += 0.4  # 5.4 s observed > 5 s
    loop.cycle()
    assert {n.state for n in store.list_nodes()} == {"lost"}


def test_a_gap_between_readings_longer_than_half_the_timeout_is_not_observed(env):
    store, loop = env
    clock = Clock()
    loop = Loop(store, loop.settings, clock=clock)
    loop.cycle()
    clock.t += 6.0  # the store hung (or the loop stalled) for longer than the timeout
    loop.cycle()
    assert {n.state for n in store.list_nodes()} == {"ready"}


def test_most_nodes_silent_at_once_raise_a_condition_instead_of_losing_them(env):
    store, loop = env
    clock = Clock()
    loop = Loop(store, loop.settings, clock=clock)
    for n in ("n3", "n4"):
        store.register_node(
            NodeRecord(name=n, address=n, cpu_m=4000, memory=2**30, port_range=(31000, 31099))
        )
    loop.cycle()
    store.heartbeat("n4", {})
    clock.t += 2.0
    loop.cycle()
    store.heartbeat("n4", {})
    clock.t += 2.0
    loop.cycle()
    store.heartbeat("n4", {})
    clock.t += 2.0  # n1..n3 silent 6 s (3 of 4 = 75 % >= 55 %): a disruption
    loop.cycle()
    assert {n.name: n.state for n in store.list_nodes()} == dict.fromkeys(
        ("n1", "n2", "n3", "n4"), "ready"
    )
    cond = store.cluster_status()["condition"]
    assert cond["kind"] == "disruption" and cond["nodes"] == ["n1", "n2", "n3"]
    # n1 and n2 come back: n3, still silent, stays held (issue 32 item 7: the guard holds
    # until every node it names returned or was silent past the disruption limit)
    for n in ("n1", "n2", "n4"):
        store.heartbeat(n, {})
    clock.t += 1.0
    loop.cycle()
    states = {n.name: n.state for n in store.list_nodes()}
    assert states == dict.fromkeys(("n1", "n2", "n3", "n4"), "ready")
    assert store.cluster_status()["condition"] is not None
    # past the disruption limit n3 is lost, and the condition is cleared
    hold = loop._health.disruption_lost_after_s
    while clock.t < 1000.0 + hold + 8.0:
        for n in ("n1", "n2", "n4"):
            store.heartbeat(n, {})
        clock.t += 1.0
        loop.cycle()
    states = {n.name: n.state for n in store.list_nodes()}
    assert states == {"n1": "ready", "n2": "ready", "n3": "lost", "n4": "ready"}
    assert store.cluster_status()["condition"] is None


def test_draining_node_requeues_without_counting_a_failure(env):
    store, loop = env
    submit(store, "j", roles={"w": {"command": "x", "resources": {"cpu": 3}}})
    loop.cycle()
    (task,) = store.tasks("j")
    report_all(store, "j", TaskState.RUNNING)
    store.set_node_state(task.node, "draining")
    loop.cycle()
    assert store.task("j", "w-0").desired == "stop"
    report_all(store, "j", TaskState.STOPPED, 143)
    loop.cycle()
    job = store.get_job("j")
    assert job.failures == 0 and job.attempt == 2
    (again,) = store.tasks("j")
    assert again.node != task.node and job.state == "scheduled"


def test_a_second_loop_from_a_stale_snapshot_commits_nothing(env):
    store, loop = env
    submit(store, "j")
    loop.cycle()  # queued + scheduled
    calls = []

    def stale_core(snapshot, policy, now):
        calls.append(snapshot.version)
        # pretend the snapshot was taken before the first loop committed
        from scheduler.core import schedule

        d = schedule(snapshot, policy, now)
        return Decision(
            binds=d.binds, preemptions=d.preemptions, pending=d.pending, version=snapshot.version
        )

    other = Loop(store, loop.settings, schedule=stale_core)
    store.create_job(parse_job_spec({"name": "k", "roles": {"w": {"command": "x"}}}))
    # take the snapshot, then let the first loop commit before the second commits
    from scheduler.store.snapshot import commit_payload, take_snapshot

    store.transition("k", "queued", "queued")
    snap, ctx = take_snapshot(store)
    loop.cycle()
    decision = stale_core(snap, other.policy, store.now())
    ok, why = store.commit(ctx.version, commit_payload(decision, ctx))
    assert not ok and "stale" in why
    ledger = store.ledger()
    assert len(ledger) == len({(a.job, a.role, a.index) for a in ledger.values()}) == 4


def test_between_full_passes_only_reported_jobs_are_read(env, monkeypatch):
    import scheduler.loop as loop_module

    store, loop = env
    submit(store, "j", roles={"w": {"command": "x"}})
    loop.cycle()  # first cycle is a full pass
    report_all(store, "j", TaskState.RUNNING)
    store.take_dirty_jobs()  # as if the mark were lost (loop crashed after taking it)
    loop.cycle()
    assert store.get_job("j").state == "scheduled"  # not looked at: nothing reported
    monkeypatch.setattr(loop_module, "FULL_PASS_S", 0.0)
    time.sleep(0.2)  # > loop.interval_s, the shortest full-pass period
    loop.cycle()  # the periodic full pass catches up
    assert store.get_job("j").state == "running"
    monkeypatch.setattr(loop_module, "FULL_PASS_S", 3600.0)
    report_all(store, "j", TaskState.SUCCEEDED, 0)  # marks the job dirty
    loop.cycle()
    assert store.get_job("j").state == "succeeded"


def test_stopping_jobs_reach_the_core_as_releasing_and_nominations_carry_over(env):
    """The loop marks a job whose tasks are being stopped ``releasing`` in the snapshot, and
    hands a committed Decision's nominations to the next cycle's core (and only then)."""
    store, loop = env
    submit(store, "old", roles={"w": {"replicas": 2, "command": "x", "resources": {"cpu": 4}}})
    loop.cycle()
    report_all(store, "old", TaskState.RUNNING)
    loop.cycle()
    assert store.get_job("old").state == "running"
    store.request_stop("old")
    submit(store, "new", roles={"w": {"command": "x", "resources": {"cpu": 4}}})

    seen = []
    real_schedule = loop.schedule
    nominated = (TaskPlacement("w", 0, "n1", Resources(cpu_m=4000)),)

    def spy(snapshot, policy, now):
        seen.append(snapshot)
        decision = real_schedule(snapshot, policy, now)
        return dataclasses.replace(decision, nominations={"new": nominated})

    loop.schedule = spy
    loop.cycle()  # "old" is told to stop; "new" waits for its capacity
    assert [(rj.job.name, rj.releasing) for rj in seen[0].running] == [("old", True)]
    assert dict(seen[0].nominations) == {}
    loop.cycle()
    assert dict(seen[1].nominations) == {"new": nominated}
    assert store.get_job("new").state == "queued"
    report_all(store, "old", TaskState.STOPPED, 143)
    loop.cycle()
    assert store.get_job("old").state == "stopped"
    assert seen[-1].running == ()  # nothing left to release


def test_the_loop_learns_from_succeeded_jobs_and_hands_the_history_to_the_core(env):
    """The adaptive policy's input: every job that succeeds adds its run time and attained
    service to the loop's history, which the next cycles' snapshots carry to the core."""
    store, loop = env
    seen = []
    real_schedule = loop.schedule

    def spy(snapshot, policy, now):
        seen.append(snapshot.history)
        return real_schedule(snapshot, policy, now)

    loop.schedule = spy
    submit(store, "a")
    loop.cycle()
    assert seen[-1].runtimes_s == ()  # nothing finished yet
    report_all(store, "a", TaskState.RUNNING)
    loop.cycle()
    report_all(store, "a", TaskState.SUCCEEDED, 0)
    loop.cycle()
    submit(store, "failing")
    loop.cycle()
    report_all(store, "failing", TaskState.FAILED, 1)
    loop.cycle()
    submit(store, "b")
    loop.cycle()
    history = seen[-1]
    assert len(history.runtimes_s) == 1  # the failed job taught nothing
    assert history.runtimes_s[0] >= 0 and len(history.services_gpu_s) == 1


def test_a_shrink_is_recorded_and_the_core_regrows_only_after_the_cool_down(env):
    """Real store: the loop's shrink sets the job's ``resized_at`` (one transaction with
    the tasks' removal), the snapshot hands it to the core, and with the ``pasture`` policy
    (``regrow_cooldown_s``) the job is not grown back before the cool-down ends even though
    the room is free again at once."""
    store, loop = env
    cool = loop.policy.regrow_cooldown_s
    assert loop.policy.elastic and cool > 0
    one = {"cpu": 4}
    el = {"w": {"replicas": {"min": 1, "max": 2}, "command": "x", "resources": one}}
    submit(store, "el", roles=el)
    loop.cycle()
    report_all(store, "el", TaskState.RUNNING)
    loop.cycle()
    assert sorted(t.key for t in store.tasks("el")) == ["w-0", "w-1"]
    submit(store, "hi", roles={"w": {"command": "x", "resources": one}}, priority="high")
    t0 = time.time()
    loop.cycle()  # shrink el for hi
    rec = store.get_job("el")
    assert rec.resized_at is not None and t0 - 1 <= rec.resized_at <= time.time() + 1
    assert [t.key for t in store.tasks("el")] == ["w-0"]
    snap, _ = take_snapshot(store)
    (rj,) = [r for r in snap.running if r.name == "el"]
    assert rj.resized_at == rec.resized_at
    loop.cycle()  # hi binds into the room
    report_all(store, "hi", TaskState.RUNNING, only=None)
    loop.cycle()
    report_all(store, "hi", TaskState.SUCCEEDED, 0)
    loop.cycle()  # hi is done: the room is free, but el is inside its cool-down
    loop.cycle()
    assert store.get_job("hi").state == "succeeded"
    assert [t.key for t in store.tasks("el")] == ["w-0"]
    # the same cycle once the cool-down is over (the core's clock is an argument)
    real = loop.schedule
    loop.schedule = lambda snapshot, policy, now: real(snapshot, policy, now + cool)
    loop.cycle()
    assert sorted(t.key for t in store.tasks("el")) == ["w-0", "w-1"]
