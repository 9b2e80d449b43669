"""Gang placement: whole or absent, min_available, multi-role jobs, task indexes."""

from __future__ import annotations

from scheduler.core import Policy, ReasonKind, schedule
from tests.factories import job, node, res, role, snapshot


def test_gang_lands_whole_across_nodes():
    s = snapshot([node(f"n{i}") for i in range(4)], [job("j", gpu=8, replicas=4)])
    d = schedule(s, Policy(), 0.0)
    (b,) = d.binds
    assert sorted(p.node for p in b.placements) == ["n0", "n1", "n2", "n3"]
    assert [p.index for p in b.placements] == [0, 1, 2, 3]


def test_gang_that_does_not_fit_leaves_no_trace():
    # 3 of 4 tasks would fit; nothing is bound, and the capacity stays for the next job.
    s = snapshot(
        [node(f"n{i}") for i in range(3)],
        [job("big", gpu=8, replicas=4, submit=0), job("after", gpu=8, replicas=3, submit=1)],
    )
    d = schedule(s, Policy(backfill="none"), 0.0)
    assert [b.job for b in d.binds] == ["after"]
    why = d.pending["big"]
    assert why.kind is ReasonKind.GANG_INCOMPLETE
    assert why.details["fit"] == 3 and why.details["needed"] == 4


def test_min_available_places_the_minimum_and_extras_best_effort():
    s = snapshot([node("a"), node("b")], [job("elastic", gpu=8, replicas=4, min_available=2)])
    (b,) = schedule(s, Policy(), 0.0).binds
    assert len(b.placements) == 2
    s = snapshot([node("a")], [job("elastic", gpu=8, replicas=4, min_available=2)])
    d = schedule(s, Policy(), 0.0)
    assert d.binds == () and d.pending["elastic"].kind is ReasonKind.GANG_INCOMPLETE


def test_multi_role_job_is_atomic_over_roles():
    ps = role("ps", replicas=1, gpu=0, cpu=4)
    worker = role("worker", replicas=2, gpu=8)
    s = snapshot([node("a"), node("cpu", gpu=0)], [job("j", roles=[ps, worker])])
    d = schedule(s, Policy(), 0.0)
    assert d.binds == ()  # one worker fits, the other does not: the ps is not bound alone
    assert d.pending["j"].details["role"] == "worker"
    s = snapshot([node("a"), node("b"), node("cpu", gpu=0)], [job("j", roles=[ps, worker])])
    (b,) = schedule(s, Policy(), 0.0).binds
    roles = [(p.role, p.index) for p in b.placements]
    assert roles == [("ps", 0), ("worker", 0), ("worker", 1)]  # declaration order
    # gang locality: the ps joins a node that already holds a worker of its job
    workers = {p.node for p in b.placements if p.role == "worker"}
    assert next(p.node for p in b.placements if p.role == "ps") in workers


def test_wide_roles_are_placed_first_so_small_ones_do_not_fragment():
    # small role first in declaration; placing it first with best-fit would use the 8-GPU
    # node partially and leave no room for the 8-GPU worker.
    small = role("small", replicas=1, gpu=2)
    wide = role("wide", replicas=1, gpu=8)
    s = snapshot([node("a"), node("b", used=res(0, 0, 4))], [job("j", roles=[small, wide])])
    (b,) = schedule(s, Policy(), 0.0).binds
    assert {p.role: p.node for p in b.placements} == {"wide": "a", "small": "b"}


def test_node_over_commit_never_happens_within_one_cycle():
    s = snapshot([node("a", gpu=8)], [job(f"j{i}", gpu=3, submit=i) for i in range(4)])
    d = schedule(s, Policy(), 0.0)
    assert sum(p.resources.gpu for b in d.binds for p in b.placements) <= 8
    assert len(d.binds) == 2


def test_identical_gangs_after_a_failure_fail_alike_and_get_their_own_role_names():
    # the cycle remembers that a gang shape did not fit; a different shape still binds
    # in between, and a same-shaped job with another role name is explained with its name
    pending = [
        job("a", gpu=8, replicas=2, submit=0),
        job("small", gpu=1, submit=1),
        job("b", gpu=8, replicas=2, submit=2),
        job("c", roles=[role("learner", replicas=2, gpu=8)], submit=3),
    ]
    d = schedule(snapshot([node("n1")], pending), Policy(backfill="none"), 0.0)
    assert [b.job for b in d.binds] == ["small"]
    # a was looked at before "small" took a GPU: one 8-GPU task still fit then
    assert d.pending["a"].kind is ReasonKind.GANG_INCOMPLETE
    assert d.pending["a"].details["fit"] == 1
    # b and c come after: the reason reflects the node as it is now, not a stale count
    for name in ("b", "c"):
        assert d.pending[name].message == "needs 8 GPUs on one node; largest free block is 7 (n1)"
    assert d.pending["c"].details["role"] == "learner"
