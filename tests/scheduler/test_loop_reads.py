"""What the loop reads between cycles (scheduler/store/view.py, store/batch.py) and what
its writes leave behind, against a real redis-server: the ledger view follows the loop's
own commits and releases without a re-read and re-reads after any foreign change; the one
event builder; the agents' wake-up list."""

from __future__ import annotations

import json

from scheduler.loop import Loop
from scheduler.spec import parse_job_spec
from scheduler.store import NodeRecord, TaskState
from scheduler.store.agent_store import NodeStore
from scheduler.store.codec import event
from tests.factories import loop_on_two_nodes


def _submit(store, name, replicas=2):
    spec = {"name": name, "roles": {"w": {"replicas": replicas, "command": "x"}}}
    store.create_job(parse_job_spec(spec), user="ann")


def test_view_follows_own_writes_and_rereads_after_a_foreign_change(redis_url):
    store, loop = loop_on_two_nodes(redis_url)
    _submit(store, "a")
    loop.cycle()  # first cycle reads everything, then binds "a"
    resyncs = loop.view.resyncs
    assert store.get_job("a").state == "scheduled"
    assert set(loop.view.ledger) == set(store.ledger()) == {"a/w-0", "a/w-1"}
    assert loop.view.version == store.version()
    _submit(store, "b")
    loop.cycle()  # binds "b" on the view it kept: no re-read
    assert loop.view.resyncs == resyncs
    assert set(loop.view.ledger) == set(store.ledger())
    for t in store.tasks("a"):
        store.report_task("a", t.key, t.attempt, t.node, TaskState.SUCCEEDED, 0)
    loop.cycle()  # "a" finished: released through the batch, the view follows
    assert store.get_job("a").state == "succeeded"
    assert loop.view.resyncs == resyncs
    assert set(loop.view.ledger) == set(store.ledger()) == {"b/w-0", "b/w-1"}
    used = sum(a.cpu_m for a in store.ledger().values())
    assert sum(r.cpu_m for r in loop.view.allocated.values()) == used
    store.set_node_state("n2", "cordoned")  # someone else bumps the version
    loop.cycle()
    assert loop.view.resyncs == resyncs + 1
    assert loop.view.nodes["n2"].state == "cordoned"
    assert loop.view.version == store.version()


def test_a_second_loops_commit_is_a_gap_for_the_first(redis_url):
    store, loop = loop_on_two_nodes(redis_url)
    other = Loop(store, loop.settings)
    _submit(store, "a")
    loop.cycle()
    resyncs = loop.view.resyncs
    _submit(store, "b")
    other.cycle()  # the other loop binds "b"
    assert store.get_job("b").state == "scheduled"
    loop.cycle()  # a version the first loop did not make: it reads everything again
    assert loop.view.resyncs == resyncs + 1
    assert set(loop.view.ledger) == set(store.ledger()) == {"a/w-0", "a/w-1", "b/w-0", "b/w-1"}
    assert len(store.events("b")) == 3  # submitted, queued, scheduled: bound once


def test_script_events_have_the_codec_shape(redis_url):
    store, loop = loop_on_two_nodes(redis_url)
    _submit(store, "a")
    loop.cycle()
    submitted, queued, scheduled = store.r.lrange(store.k("job", "a") + ":events", 0, -1)
    for raw in (submitted, scheduled):  # built by lua.EVENT (CREATE_JOB, COMMIT)
        e = json.loads(raw)
        assert set(e) == set(json.loads(event(1.0, "x", 1, "r")))
        assert isinstance(e["time"], float) and isinstance(e["attempt"], int)
    assert json.loads(scheduled)["reason"].startswith("placed on ")
    assert json.loads(submitted)["reason"] == "submitted by ann"


def test_agents_wake_up_list_is_durable_and_bounded(redis_url):
    store, loop = loop_on_two_nodes(redis_url)
    assert store.wait_bindings("n1", 0.05) is False  # nothing yet
    _submit(store, "a", replicas=8)  # both nodes get tasks
    loop.cycle()
    for n in ("n1", "n2"):  # pushed by the commit, kept until read, at most one entry
        assert store.r.llen(store.k("node", n, "wake")) == 1
        assert store.wait_bindings(n, 0.05) is True
        assert store.wait_bindings(n, 0.05) is False
    store.request_stop("a")
    loop.cycle()  # the loop's task updates (desired stop) wake the nodes again
    assert store.wait_bindings("n1", 0.05) is True


def test_batch_submit_is_one_round_trip_and_refuses_taken_names(redis_url):
    store, _ = loop_on_two_nodes(redis_url)
    specs = [parse_job_spec({"name": n, "roles": {"w": {"command": "x"}}}) for n in "xyz"]
    store.create_job(specs[1])
    out = store.create_jobs(specs, user="bo")
    assert [r is None for r in out] == [False, True, False]
    assert store.get_job("x").user == "bo" and store.get_job("x").created == out[0].created
    assert store.active_job_names() == {"x", "y", "z"}


def test_an_agent_registering_again_with_another_lease_is_seen_by_the_loop(redis_url):
    """The loop declares a node lost only after the node's own fence bound (fence_s), read
    from its cached node record: an agent that registers again with another lease and fence
    (through its node credential, NodeStore) must make the loop read the node again, as
    the admin path Store.register_node does; on main the register report said 'unchanged'
    and the loop kept the old bound."""
    store, loop = loop_on_two_nodes(redis_url)
    loop.cycle()
    assert loop.view.nodes["n1"].fence_s == 0.0
    agent_side = NodeStore(store.r, "n1")
    agent_side.register_node(
        NodeRecord(
            name="n1",
            address="addr-n1",
            cpu_m=4000,
            memory=16 << 30,
            port_range=(31000, 31099),
            lease_s=60.0,
            fence_s=70.0,
        )
    )
    loop.cycle()
    assert (loop.view.nodes["n1"].lease_s, loop.view.nodes["n1"].fence_s) == (60.0, 70.0)
