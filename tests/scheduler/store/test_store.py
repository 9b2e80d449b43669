import threading

import pytest

from scheduler.core.model import Bind, Decision, PendingReason, Preemption, ReasonKind, Resources
from scheduler.core.model import TaskPlacement as TP
from scheduler.store import JobExistsError, JobNotFoundError, NodeNotFoundError, TaskState
from scheduler.store.snapshot import commit_payload, take_snapshot


def queue(store, name):
    store.transition(name, "queued", "queued")


def bind_all(snapshot, job, node):
    j = next(p for p in snapshot.pending if p.name == job)
    return Bind(
        job, tuple(TP(r.name, i, node, r.resources) for r in j.roles for i in range(r.replicas))
    )


def test_create_get_list_and_duplicates(store, add_node, job_spec):
    store.create_job(job_spec("a"), user="ann")
    store.create_job(job_spec("b", vc="other"), user="bob")
    with pytest.raises(JobExistsError):
        store.create_job(job_spec("a"), user="eve")
    a = store.get_job("a")
    assert (a.state, a.user, a.attempt) == ("submitted", "ann", 1)
    assert a.spec["roles"]["w"]["replicas"] == 2
    page, total = store.list_jobs()
    # a job's name in the store is its key: b of VC other is "b.other" (scheduler/jobref.py)
    assert [j.name for j in page] == ["b.other", "a"] and total == 2  # newest first
    page, total = store.list_jobs(vcs=["other"])
    assert [j.name for j in page] == ["b.other"] and total == 1
    page, total = store.list_jobs(user="ann", state="submitted")
    assert [j.name for j in page] == ["a"]
    page, total = store.list_jobs(offset=1, limit=1)
    assert [j.name for j in page] == ["a"] and total == 2
    assert store.get_job("nope") is None
    assert store.events("a")[0]["state"] == "submitted"


def test_stop_request_is_recorded_and_unknown_job_raises(store, add_node, job_spec):
    store.create_job(job_spec("a"))
    store.request_stop("a", "no longer needed")
    assert store.get_job("a").stop_requested == "no longer needed"
    assert "stop requested" in store.events("a")[-1]["reason"]
    with pytest.raises(JobNotFoundError):
        store.request_stop("zzz")


def test_commit_writes_ledger_ports_tasks_and_events(store, add_node, job_spec):
    add_node(store, "n1", ports=(30000, 30001))
    store.create_job(job_spec("a", replicas=2))
    queue(store, "a")
    snap, ctx = take_snapshot(store)
    d = Decision(binds=(bind_all(snap, "a", "n1"),), version=snap.version)
    ok, _ = store.commit(ctx.version, commit_payload(d, ctx))
    assert ok
    job = store.get_job("a")
    assert job.state == "scheduled"
    tasks = store.tasks("a")
    assert sorted(t.ports["main"] for t in tasks) == [30000, 30001]
    assert all(t.node == "n1" and t.state == "scheduled" and t.desired == "run" for t in tasks)
    assert set(store.ledger()) == {"a/w-0", "a/w-1"}
    assert store.node_bindings("n1") == [("a", "w-0"), ("a", "w-1")]
    assert store.events("a")[-1]["state"] == "scheduled"
    # snapshot sees the allocation
    snap2, _ = take_snapshot(store)
    assert snap2.nodes[0].allocated == Resources(2000, 2 * 2**30, 0)
    assert [r.name for r in snap2.running] == ["a"]
    # release frees everything and bumps the version
    v = store.version()
    assert store.release("a") == 2
    assert store.ledger() == {} and store.node_bindings("n1") == []
    assert store.version() == v + 1


def test_port_range_exhaustion_leaves_job_pending(store, add_node, job_spec):
    add_node(store, "n1", ports=(30000, 30000))
    store.create_job(job_spec("a", replicas=2))
    queue(store, "a")
    snap, ctx = take_snapshot(store)
    payload = commit_payload(Decision(binds=(bind_all(snap, "a", "n1"),)), ctx)
    assert payload["binds"] == []
    assert "no free port" in payload["pending"]["a"]


def test_stale_version_and_non_queued_jobs_are_refused(store, add_node, job_spec):
    add_node(store, "n1")
    store.create_job(job_spec("a"))
    queue(store, "a")
    snap, ctx = take_snapshot(store)
    payload = commit_payload(Decision(binds=(bind_all(snap, "a", "n1"),)), ctx)
    store.set_node_state("n1", "cordoned")  # bumps the version
    ok, why = store.commit(ctx.version, payload)
    assert not ok and "stale" in why
    store.set_node_state("n1", "ready")
    ok, why = store.commit(store.version(), payload)
    assert ok
    ok, why = store.commit(store.version(), payload)  # the same bind again
    assert not ok and "not queued" in why
    assert len(store.ledger()) == 2


def test_two_concurrent_committers_never_double_allocate(store, add_node, job_spec):
    """Both loops snapshot the same state and race; exactly one commit lands, and across
    many rounds no node ever holds more than its capacity."""
    add_node(store, "n1", cpu=4)
    add_node(store, "n2", cpu=4)
    for i in range(12):
        store.create_job(job_spec(f"j{i}", replicas=2, cpu=1))
        queue(store, f"j{i}")
    wins = []

    def committer(who: str, barrier: threading.Barrier) -> None:
        snap, ctx = take_snapshot(store)
        free = {n.name: n.free for n in snap.nodes}
        binds = []
        for job in sorted(snap.pending, key=lambda j: j.name):
            pls = []
            for role in job.roles:
                for i in range(role.replicas):
                    node = next((n for n, f in free.items() if role.resources.fits_in(f)), None)
                    if node is None:
                        break
                    free[node] = free[node] - role.resources
                    pls.append(TP(role.name, i, node, role.resources))
            if len(pls) == 2:
                binds.append(Bind(job.name, tuple(pls)))
        payload = commit_payload(Decision(binds=tuple(binds)), ctx)
        barrier.wait()
        ok, _ = store.commit(ctx.version, payload)
        results.append(ok)
        if ok:
            wins.append((who, len(binds)))

    for _round in range(3):
        results: list[bool] = []
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=committer, args=(w, barrier)) for w in "AB"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False, True]  # same snapshot version: one wins
        # first round: 2 nodes x 4 cores hold 4 jobs of 2 x 1 core; then one freed job's room
        assert wins[-1][1] == (4 if _round == 0 else 1)
        ledger = store.ledger()
        for node in ("n1", "n2"):
            held = sum(a.cpu_m for a in ledger.values() if a.node == node)
            assert held <= 4000
        keys = [(a.job, a.role, a.index) for a in ledger.values()]
        assert len(keys) == len(set(keys))
        # free one job so the next round has work
        running = sorted({a.job for a in ledger.values()})
        if running:
            store.release(running[0])
            store.transition(running[0], "succeeded", "done")


def test_preemption_marks_victim_and_pending_reasons(store, add_node, job_spec):
    add_node(store, "n1")
    store.create_job(job_spec("victim"))
    queue(store, "victim")
    snap, ctx = take_snapshot(store)
    assert store.commit(
        ctx.version, commit_payload(Decision(binds=(bind_all(snap, "victim", "n1"),)), ctx)
    )[0]
    store.create_job(job_spec("owner"))
    queue(store, "owner")
    snap, ctx = take_snapshot(store)
    d = Decision(
        preemptions=(Preemption("victim", "owner", "reclaiming guarantee"),),
        pending={"owner": PendingReason(ReasonKind.PREEMPTING, "waiting for victim")},
    )
    assert store.commit(ctx.version, commit_payload(d, ctx))[0]
    v = store.get_job("victim")
    assert v.state == "preempted" and v.ending["state"] == "queued"
    assert all(t.desired == "stop" for t in store.tasks("victim"))
    assert store.get_job("owner").pending_reason == {
        "kind": "preempting",
        "message": "waiting for victim",
    }


def test_agent_reports_apply_only_to_current_attempt(store, add_node, job_spec):
    add_node(store, "n1")
    store.create_job(job_spec("a", replicas=1))
    queue(store, "a")
    snap, ctx = take_snapshot(store)
    store.commit(ctx.version, commit_payload(Decision(binds=(bind_all(snap, "a", "n1"),)), ctx))
    assert not store.report_task("a", "w-0", 2, "n1", TaskState.RUNNING)  # other attempt
    assert not store.report_task("a", "w-0", 1, "n2", TaskState.RUNNING)  # other node
    assert store.report_task("a", "w-0", 1, "n1", TaskState.RUNNING, handle="h")
    assert store.report_task("a", "w-0", 1, "n1", TaskState.FAILED, 3, "exited with code 3")
    assert not store.report_task("a", "w-0", 1, "n1", TaskState.SUCCEEDED, 0)  # finished
    t = store.task("a", "w-0")
    assert (t.state, t.exit_code, t.handle) == ("failed", 3, "h")


def test_nodes_heartbeat_states_and_lost_recovery(store, add_node, job_spec):
    add_node(store, "n1", gpu=2)
    assert store.heartbeat("n1", {"cpu_percent": 5}) == "ready"
    assert store.heartbeat("ghost", {}) == ""
    store.set_node_state("n1", "cordoned", "maintenance")
    assert store.get_node("n1").state == "cordoned"
    add_node(store, "n1", gpu=2)  # re-registration keeps cordoned
    assert store.get_node("n1").state == "cordoned"
    store.set_node_state("n1", "lost")
    assert store.heartbeat("n1", {}) == "ready"  # it came back
    with pytest.raises(NodeNotFoundError):
        store.set_node_state("ghost", "ready")
    with pytest.raises(ValueError, match="one of"):
        store.set_node_state("n1", "sleeping")


def test_vc_usage_and_cluster_status(store, add_node, job_spec):
    add_node(store, "n1", cpu=16, mem_gi=32)
    store.create_job(job_spec("a", replicas=2, cpu=6))  # 12 cores > guarantee 8
    queue(store, "a")
    snap, ctx = take_snapshot(store)
    store.commit(ctx.version, commit_payload(Decision(binds=(bind_all(snap, "a", "n1"),)), ctx))
    (vc,) = store.vc_usage()
    assert vc.name == "default"
    assert vc.used["cpu_m"] == 12000 and vc.borrowed["cpu_m"] == 4000
    assert vc.borrowed["memory"] == 0 and vc.jobs_running == 1
    status = store.cluster_status()
    assert status["nodes"] == {"ready": 1}
    assert status["jobs"] == {"scheduled": 1}
    assert status["allocated"]["cpu_m"] == 12000 and status["capacity"]["cpu_m"] == 16000


def test_loop_notifications_are_published(store, add_node, job_spec):
    ps = store.subscribe(store.loop_channel)
    try:
        store.create_job(job_spec("a"))
        msg = None
        for _ in range(20):
            msg = ps.get_message(timeout=0.1)
            if msg:
                break
        assert msg is not None and msg["data"] == "submit"
    finally:
        ps.close()
