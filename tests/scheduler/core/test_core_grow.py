"""Running gangs placed at min_available get their other replicas as room comes free."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, schedule
from scheduler.core.grow import missing_replicas
from scheduler.core.model import RunningJob, TaskPlacement
from tests.factories import job, node, res, role, snapshot, vc


def partial(j, placed: dict[int, str]) -> RunningJob:
    """``j`` (one role "worker") running with replica index -> node."""
    r = j.roles[0]
    return RunningJob(
        job=j,
        start_time=0.0,
        placements=tuple(TaskPlacement(r.name, i, n, r.resources) for i, n in placed.items()),
    )


def test_missing_replicas_are_the_unplaced_indexes():
    rj = partial(job("j", gpu=1, replicas=5, min_available=2), {0: "a", 3: "a"})
    assert missing_replicas(rj) == {"worker": [1, 2, 4]}


def test_missing_replicas_are_placed_with_their_own_indexes_near_the_gang():
    j = job("j", gpu=2, replicas=6, min_available=3)
    rj = partial(j, {0: "n0", 1: "n0", 2: "n1", 3: "n1"})
    s = snapshot([node("n0", gpu=4), node("n1", gpu=4), node("n2", gpu=4)], running=[rj])
    d = schedule(s, Policy(), 0.0)
    assert d.binds == ()
    (g,) = d.grows
    assert g.job == "j"
    assert sorted(p.index for p in g.placements) == [4, 5]
    assert {p.node for p in g.placements} == {"n2"}


def test_nothing_grows_without_room_or_when_the_job_is_releasing():
    j = job("j", gpu=4, replicas=3, min_available=2)
    rj = partial(j, {0: "n0", 1: "n1"})
    full = snapshot([node("n0", gpu=4), node("n1", gpu=4)], running=[rj])
    assert schedule(full, Policy(), 0.0).grows == ()
    roomy = [node("n0", gpu=4), node("n1", gpu=4), node("n2", gpu=4)]
    leaving = snapshot(roomy, running=[replace(rj, releasing=True)])
    assert schedule(leaving, Policy(), 0.0).grows == ()
    assert len(schedule(snapshot(roomy, running=[rj]), Policy(), 0.0).grows) == 1


def test_pending_jobs_go_first_and_the_vc_max_holds():
    j = job("j", gpu=4, replicas=3, min_available=1, vc="a")
    rj = partial(j, {0: "n0"})
    nodes = [node("n0", gpu=4), node("n1", gpu=4)]
    s = snapshot(nodes, pending=[job("p", gpu=4, vc="b")], running=[rj])
    d = schedule(s, Policy(), 0.0)
    assert [b.job for b in d.binds] == ["p"] and d.grows == ()
    capped = snapshot(nodes + [node("n2", gpu=4)], running=[rj], vcs=[vc("a", max_gpu=8)])
    (g,) = schedule(capped, Policy(), 0.0).grows
    assert len(g.placements) == 1  # 4 held + 4 more = the max of 8
    assert g.placements[0].resources == res(1, 1, 4)


def test_a_job_wide_minimum_leaves_a_role_out_of_the_gang_and_it_grows_later():
    """Volcano spec.minAvailable 1 over a master and two workers: the spec layer gives the
    master 1 and the workers 0; the gang is the master alone, the workers are placed with
    it when they fit, else later as room frees up (not an invalid job, issue 26)."""
    master = role("master", 1, 0, 1, 1, min_available=1)
    workers = role("worker", 2, 4, 1, 1, min_available=0)
    j = job("mpi", roles=[master, workers])
    roomy = schedule(snapshot([node("n0", gpu=8), node("n1", gpu=8)], [j]), Policy(), 0.0)
    (b,) = roomy.binds
    assert sorted((p.role, p.index) for p in b.placements) == [
        ("master", 0),
        ("worker", 0),
        ("worker", 1),
    ]
    tight = schedule(snapshot([node("n0", cpu=4, gpu=4)], [j]), Policy(), 0.0)
    (b,) = tight.binds  # the gang (the master) starts; one worker fits beside it
    assert sorted((p.role, p.index) for p in b.placements) == [("master", 0), ("worker", 0)]
    rj = RunningJob(job=j, start_time=0.0, placements=b.placements)
    later = snapshot([node("n0", cpu=4, gpu=4), node("n1", cpu=4, gpu=4)], running=[rj])
    (g,) = schedule(later, Policy(), 0.0).grows
    assert [(p.role, p.index) for p in g.placements] == [("worker", 1)]


def test_a_gang_of_nothing_is_an_invalid_job():
    j = job("none", roles=[role("a", 1, 0, 1, 1, min_available=0)])
    d = schedule(snapshot([node("n0")], [j]), Policy(), 0.0)
    assert d.binds == () and "gang is empty" in d.pending["none"].message
