"""Running gangs placed at min_available get their other replicas as room comes free."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, schedule
from scheduler.core.grow import missing_replicas
from scheduler.core.model import RunningJob, TaskPlacement
from tests.factories import job, node, res, snapshot, vc


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
