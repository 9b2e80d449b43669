"""Virtual clusters: guarantee, max, borrowing, lending protection, reclaim by preemption."""

from __future__ import annotations

from scheduler.core import Policy, PreemptionMode, ReasonKind, VirtualCluster, schedule
from tests.factories import job, node, res, running, snapshot, vc

RECLAIM = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)


def test_vc_max_blocks_with_a_readable_reason():
    nodes = [node(f"n{i}") for i in range(6)]
    held = [running(job(f"r{i}", gpu=8, vc="research"), [f"n{i}"]) for i in range(4)]
    s = snapshot(nodes, [job("more", gpu=8, vc="research")], held, [vc("research", max_gpu=32)])
    why = schedule(s, Policy(), 0.0).pending["more"]
    assert why.kind is ReasonKind.VC_MAX
    assert why.message.startswith("vc research is at its max of 32 GPUs")


def test_zero_components_of_max_do_not_cap():
    s = snapshot([node("a")], [job("j", gpu=1, cpu=4)], vcs=[vc("default", max_gpu=8)])
    assert [b.job for b in schedule(s, Policy(), 0.0).binds] == ["j"]


def test_borrowing_uses_idle_capacity_beyond_the_guarantee():
    s = snapshot(
        [node("a"), node("b")],
        [job("j1", gpu=8, vc="x", submit=0), job("j2", gpu=8, vc="x", submit=1)],
        vcs=[vc("x", gpu=8), vc("y", gpu=8)],
    )
    assert len(schedule(s, Policy(), 0.0).binds) == 2  # y is idle: x borrows its share


def test_no_borrowing_when_the_vc_may_not():
    s = snapshot(
        [node("a"), node("b")],
        [job("j1", gpu=8, vc="x", submit=0), job("j2", gpu=8, vc="x", submit=1)],
        vcs=[vc("x", gpu=8, can_borrow=False), vc("y", gpu=8)],
    )
    d = schedule(s, Policy(), 0.0)
    assert [b.job for b in d.binds] == ["j1"]
    assert d.pending["j2"].kind is ReasonKind.VC_QUOTA
    assert "guarantee of 8 GPUs and may not borrow" in d.pending["j2"].message


def test_idle_capacity_is_not_lent_when_its_owner_has_pending_work():
    # y has pending work below its guarantee: x may not borrow what y is about to claim.
    s = snapshot(
        [node("a"), node("b")],
        [
            job("x1", gpu=8, vc="x", submit=0),
            job("x2", gpu=8, vc="x", submit=1),
            job("y1", gpu=8, vc="y", submit=2),
        ],
        vcs=[vc("x", gpu=8), vc("y", gpu=8)],
    )
    d = schedule(s, Policy(aging_per_hour=0), 0.0)
    assert sorted(b.job for b in d.binds) == ["x1", "y1"]
    assert d.pending["x2"].kind is ReasonKind.VC_QUOTA
    assert "held for the guarantee of vc y" in d.pending["x2"].message


def test_unknown_vc_is_reported_and_vcs_are_ignored_without_quota():
    s = snapshot([node("a")], [job("j", vc="ghost")], vcs=[vc("default")])
    assert schedule(s, Policy(), 0.0).pending["j"].kind is ReasonKind.UNKNOWN_VC
    assert [b.job for b in schedule(s, Policy(vc_quota=False), 0.0).binds] == ["j"]


def test_reclaim_preempts_borrowers_to_restore_a_guarantee():
    nodes = [node("a"), node("b")]
    # y borrows both nodes; x (guarantee 8) submits: one y job is preempted.
    held = [
        running(job("y-old", gpu=8, vc="y"), ["a"], start=0.0),
        running(job("y-new", gpu=8, vc="y"), ["b"], start=50.0),
    ]
    s = snapshot(nodes, [job("x1", gpu=8, vc="x")], held, [vc("x", gpu=8), vc("y", gpu=0)])
    d = schedule(s, RECLAIM, 100.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("y-new", "x1")]  # most recent
    assert "reclaiming vc x's guarantee" in d.preemptions[0].reason
    assert d.pending["x1"].kind is ReasonKind.PREEMPTING
    assert d.binds == ()


def test_reclaim_takes_lowest_priority_first():
    nodes = [node("a"), node("b")]
    held = [
        running(job("y-low", gpu=8, vc="y", priority=25), ["a"], start=0.0),
        running(job("y-high", gpu=8, vc="y", priority=75), ["b"], start=50.0),
    ]
    s = snapshot(nodes, [job("x1", gpu=8, vc="x")], held, [vc("x", gpu=8), vc("y")])
    assert [p.job for p in schedule(s, RECLAIM, 100.0).preemptions] == ["y-low"]


def test_reclaim_never_takes_a_victim_vc_below_its_guarantee():
    nodes = [node("a"), node("b")]
    held = [
        running(job("y1", gpu=8, vc="y"), ["a"]),
        running(job("y2", gpu=8, vc="y"), ["b"]),
    ]
    # y holds 16 with a guarantee of 16: nothing is borrowed, nothing is reclaimed.
    s = snapshot(nodes, [job("x1", gpu=8, vc="x")], held, [vc("x", gpu=8), vc("y", gpu=16)])
    d = schedule(s, RECLAIM, 100.0)
    assert d.preemptions == ()
    assert d.pending["x1"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_reclaim_only_for_work_within_guarantee():
    nodes = [node("a"), node("b")]
    held = [running(job("y1", gpu=8, vc="y"), ["a"]), running(job("y2", gpu=8, vc="y"), ["b"])]
    # x asks for 16 but is guaranteed 8: beyond guarantee, no reclaim.
    s = snapshot(nodes, [job("x1", gpu=8, replicas=2, vc="x")], held, [vc("x", gpu=8), vc("y")])
    assert schedule(s, RECLAIM, 100.0).preemptions == ()


def test_reclaim_is_transactional_nothing_preempted_if_the_gang_still_would_not_fit():
    # x needs 8 GPUs on one node; y's borrowed jobs are 4-GPU jobs on two different
    # half-used nodes whose other halves belong to z (within guarantee): no victim set works.
    nodes = [node("a"), node("b")]
    held = [
        running(job("y1", gpu=4, vc="y"), ["a"]),
        running(job("y2", gpu=4, vc="y"), ["b"]),
        running(job("z1", gpu=4, vc="z"), ["a"]),
        running(job("z2", gpu=4, vc="z"), ["b"]),
    ]
    vcs = [vc("x", gpu=8), vc("y"), vc("z", gpu=8)]
    s = snapshot(nodes, [job("x1", gpu=8, vc="x")], held, vcs)
    d = schedule(s, RECLAIM, 100.0)
    assert d.preemptions == ()
    assert d.pending["x1"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_preempted_capacity_is_not_handed_to_later_jobs_in_the_same_cycle():
    nodes = [node("a"), node("b", gpu=4)]
    held = [running(job("y1", gpu=8, vc="y"), ["a"])]
    pending = [job("x1", gpu=8, vc="x", submit=0), job("y2", gpu=4, vc="y", submit=1)]
    s = snapshot(nodes, pending, held, [vc("x", gpu=8), vc("y")])
    d = schedule(s, RECLAIM, 100.0)
    assert [p.job for p in d.preemptions] == ["y1"]
    # b's 4 free GPUs may go to y2 (not needed by x1), nothing of a does
    assert [(b.job, b.placements[0].node) for b in d.binds] == [("y2", "b")]


def test_vc_guarantee_counts_cpu_only_when_set():
    v = VirtualCluster("x", guarantee=res(gpu=8), can_borrow=False)
    s = snapshot([node("a")], [job("j", gpu=8, cpu=16, vc="x")], vcs=[v])
    assert [b.job for b in schedule(s, Policy(), 0.0).binds] == ["j"]


# -- whole-job reclaim (OpenPAI HiveD guaranteed vs borrowing jobs) ------------------------


def test_reclaim_takes_a_borrower_that_borrows_cpu_but_not_memory():
    # The service's default VC config guarantees cpu + memory. y's one job uses 4 CPUs but
    # only 512 MiB: it borrows cpu (4 > 2) and no memory; it is a borrowing job as a whole.
    nodes = [node("a", gpu=0, cpu=4, mem_gib=8)]
    held = [running(job("y-big", gpu=0, cpu=4, mem_gib=0.5, vc="y"), ["a"], start=0.0)]
    vcs = [vc("x", cpu=2, mem_gib=4), vc("y", cpu=2, mem_gib=4)]
    s = snapshot(nodes, [job("x1", gpu=0, cpu=2, mem_gib=1, vc="x")], held, vcs)
    d = schedule(s, RECLAIM, 100.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("y-big", "x1")]
    assert d.pending["x1"].kind is ReasonKind.PREEMPTING


def test_reclaim_takes_a_gang_that_straddles_its_vcs_guarantee():
    # y's single 2x8-GPU gang holds 16 with a guarantee of 8: it is borrowing, taken whole.
    nodes = [node("a"), node("b")]
    held = [running(job("y-gang", gpu=8, replicas=2, vc="y"), ["a", "b"], start=0.0)]
    s = snapshot(nodes, [job("x1", gpu=8, vc="x")], held, [vc("x", gpu=8), vc("y", gpu=8)])
    d = schedule(s, RECLAIM, 100.0)
    assert [p.job for p in d.preemptions] == ["y-gang"]


def test_reclaim_never_takes_a_guaranteed_job_even_of_lower_priority():
    # y-old started first and fits y's guarantee: guaranteed, although of lower priority.
    nodes = [node("a"), node("b")]
    held = [
        running(job("y-old", gpu=8, vc="y", priority=25), ["a"], start=0.0),
        running(job("y-new", gpu=8, vc="y", priority=75), ["b"], start=50.0),
    ]
    vcs = [vc("x", gpu=16), vc("y", gpu=8)]
    s = snapshot(nodes, [job("x1", gpu=8, vc="x")], held, vcs)
    assert [p.job for p in schedule(s, RECLAIM, 100.0).preemptions] == ["y-new"]
    # x needs both nodes: only y-new is borrowing, so nothing is preempted at all
    s = snapshot(nodes, [job("x2", gpu=8, replicas=2, vc="x")], held, vcs)
    d = schedule(s, RECLAIM, 100.0)
    assert d.preemptions == ()
    assert d.pending["x2"].kind is ReasonKind.INSUFFICIENT_RESOURCES


def test_reclaim_spares_a_borrower_that_is_back_within_guarantee_after_earlier_victims():
    # y (guarantee 8 GPUs) runs y1 6 (guaranteed), y2 4 (cum 10), y3 2 (cum 12): y2 and y3
    # borrow. Once y2 is taken for x1, y3 is within guarantee again (6 + 2 = 8): x2 must
    # not take it.
    nodes = [node("a"), node("b")]
    held = [
        running(job("y1", gpu=6, vc="y"), ["a"], start=0.0),
        running(job("y2", gpu=4, vc="y", priority=25), ["b"], start=10.0),
        running(job("y3", gpu=2, vc="y"), ["a"], start=20.0),
        running(job("z1", gpu=4, vc="z"), ["b"], start=0.0),
    ]
    pending = [job("x1", gpu=4, vc="x", submit=0), job("x2", gpu=2, vc="x", submit=1)]
    vcs = [vc("x", gpu=8), vc("y", gpu=8), vc("z", gpu=8)]
    d = schedule(snapshot(nodes, pending, held, vcs), RECLAIM, 100.0)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("y2", "x1")]
    assert d.pending["x2"].kind is not ReasonKind.PREEMPTING


def test_a_vc_over_its_guarantee_cannot_reclaim():
    # x already borrows cpu (4 > 2): a further x job is borrowing too, so it may not reclaim
    nodes = [node("a", gpu=0, cpu=8, mem_gib=8)]
    held = [
        running(job("x0", gpu=0, cpu=4, mem_gib=1, vc="x"), ["a"], start=0.0),
        running(job("y-big", gpu=0, cpu=4, mem_gib=1, vc="y"), ["a"], start=0.0),
    ]
    vcs = [vc("x", cpu=2, mem_gib=4), vc("y", cpu=2, mem_gib=4)]
    s = snapshot(nodes, [job("x1", gpu=0, cpu=1, mem_gib=1, vc="x")], held, vcs)
    assert schedule(s, RECLAIM, 100.0).preemptions == ()


def test_reclaim_is_not_blocked_by_a_borrowing_heads_easy_reservation():
    # Two 4-GPU nodes and a CPU node, all CPUs held by y's borrowed jobs. The queue's head
    # is a CPU job of z (no guarantee: borrowing) that needs a node's whole memory: it gets
    # the EASY reservation, holding node a's free memory. Behind it, x (guaranteed 2 GPUs)
    # asks for 2 tasks that each need a GPU node's whole memory: only a and b will do. The
    # head's holds are opportunistic and x's guarantee comes first (the property test's
    # failing example, in a session where hypothesis drew it).
    nodes = [
        node("a", gpu=4, cpu=8, mem_gib=32),
        node("b", gpu=4, cpu=8, mem_gib=32),
        node("c", gpu=0, cpu=8, mem_gib=32),
    ]
    held = [
        running(job("y-a", gpu=4, cpu=8, mem_gib=8, vc="y"), ["a"]),
        running(job("y-b", gpu=4, cpu=8, mem_gib=8, vc="y"), ["b"]),
        running(job("y-c", gpu=0, cpu=8, mem_gib=8, vc="y"), ["c"]),
    ]
    head = job("z-head", gpu=0, cpu=1, mem_gib=32, vc="z", submit=0)
    want = job("x-job", gpu=1, replicas=2, cpu=1, mem_gib=32, vc="x", submit=1)
    vcs = [vc("x", gpu=2, cpu=2, mem_gib=65), vc("y"), vc("z")]
    s = snapshot(nodes, [head, want], held, vcs)

    d = schedule(s, RECLAIM, 100.0)
    assert d.pending["z-head"].kind is ReasonKind.INSUFFICIENT_RESOURCES
    assert d.pending["x-job"].kind is ReasonKind.PREEMPTING, d.pending["x-job"]
    assert sorted(p.job for p in d.preemptions) == ["y-a", "y-b"]
    assert {p.node for p in d.nominations["x-job"]} == {"a", "b"}
