"""Elastic shrinks go through the one atomic commit (issue 33): a shrink and the placements
of the same Decision are written by the commit script together, or not at all. Real
redis-server and the real loop; the shrink is added to the core's Decision by the test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import schedule
from scheduler.core.model import Shrink, TaskPlacement
from scheduler.core.resources import Resources
from scheduler.loop import Loop
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from scheduler.store.snapshot import commit_payload, take_snapshot
from tests.factories import loop_on_two_nodes

ONE = {"cpu": 1, "memory": "1Gi"}


@pytest.fixture()
def env(redis_url):
    store, loop = loop_on_two_nodes(redis_url)
    store.create_job(
        parse_job_spec(
            {
                "name": "e",
                "roles": {
                    "w": {"replicas": {"min": 1, "max": 4}, "command": "x", "resources": ONE}
                },
            }
        ),
        user="ann",
    )
    for _ in range(3):  # queued, bound at its minimum, grown to its maximum
        loop.cycle()
    assert sorted(t.key for t in store.tasks("e")) == ["w-0", "w-1", "w-2", "w-3"]
    store.create_job(
        parse_job_spec({"name": "k", "roles": {"w": {"command": "x", "resources": ONE}}}),
        user="ann",
    )
    loop.cycle()  # k queued (and bound: n2 is free); the test binds a second one below
    return store, loop.settings


def shrink_of(store: Store, keys: list[str]) -> Shrink:
    by_key = {t.key: t for t in store.tasks("e")}
    placements = tuple(
        TaskPlacement(
            "w",
            by_key[k].index,
            by_key[k].node,
            Resources(by_key[k].cpu_m, by_key[k].memory, by_key[k].gpu),
        )
        for k in keys
    )
    return Shrink("e", placements, "m", "resized: replica(s) for the test")


def submit_m(store: Store) -> None:
    store.create_job(
        parse_job_spec({"name": "m", "roles": {"w": {"command": "x", "resources": ONE}}}),
        user="ann",
    )


def test_one_commit_writes_a_shrink_and_a_bind_together(env):
    store, settings = env
    submit_m(store)
    store.transition("m", "queued", "queued")
    snapshot, ctx = take_snapshot(store)
    decision = schedule(snapshot, Loop(store, settings).policy, store.now())
    assert [b.job for b in decision.binds] == ["m"]
    decision = replace(decision, shrinks=(shrink_of(store, ["w-3", "w-2"]),))
    before = ctx.version
    ok, version = store.commit(before, commit_payload(decision, ctx))
    assert ok and int(version) == before + 1  # one write, one version
    assert sorted(t.key for t in store.tasks("e")) == ["w-0", "w-1"]
    assert sorted(a.index for a in store.ledger().values() if a.job == "e") == [0, 1]
    assert store.get_job("m").state == "scheduled"
    assert any("resized: replica(s) for the test" in str(e) for e in store.events("e"))
    assert store.get_job("e").attempt == 1  # a resize, not a preemption


def test_a_refused_commit_writes_neither_the_shrink_nor_the_bind(env):
    store, settings = env
    submit_m(store)

    def racing_core(snapshot, policy, now):  # another writer commits meanwhile
        decision = schedule(snapshot, policy, now)
        store.r.incr(store.k("version"))
        return replace(decision, shrinks=(shrink_of(store, ["w-3"]),))

    loop = Loop(store, settings, schedule=racing_core)
    result = loop.cycle()
    assert not result.committed and "stale" in result.detail
    assert sorted(t.key for t in store.tasks("e")) == ["w-0", "w-1", "w-2", "w-3"]
    assert store.get_job("m").state == "queued"
    assert not any("resized" in str(e) for e in store.events("e"))


def test_the_loop_commits_its_shrink_with_its_binds_in_one_version(env):
    store, settings = env
    submit_m(store)

    shrinks = [shrink_of(store, ["w-3"])]

    def core_with_shrink(snapshot, policy, now):  # shrinks w-3 once
        return replace(schedule(snapshot, policy, now), shrinks=tuple(shrinks))

    loop = Loop(store, settings, schedule=core_with_shrink)
    version = int(store.r.get(store.k("version")) or 0)
    result = loop.cycle()
    assert result.committed and result.bound == 1
    assert int(store.r.get(store.k("version"))) == version + 1
    assert sorted(t.key for t in store.tasks("e")) == ["w-0", "w-1", "w-2"]
    assert store.get_job("m").state == "scheduled"
    shrinks.clear()
    loop.cycle()  # the loop's ledger view follows what the script removed (e may grow again)
    ledger = store.ledger().values()
    assert sorted(f"w-{a.index}" for a in ledger if a.job == "e") == sorted(
        t.key for t in store.tasks("e")
    )
    for n in ("n1", "n2"):
        assert sum(a.cpu_m for a in ledger if a.node == n) <= 4000
