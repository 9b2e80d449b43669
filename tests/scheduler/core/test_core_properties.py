"""Property tests over random clusters, job mixes and policies (hypothesis).

Asserted for every generated case:
- no node is over-committed in any resource by the binds (on top of what it holds);
- every gang is whole (>= min_available of every role, <= replicas, indexes 0..k-1,
  feasible nodes) or absent; every pending job is bound or has exactly one reason;
- a VC with pending work within its guarantee and reclaimable borrowed capacity gets it
  in the same cycle (bound, or victims chosen for it);
- a higher-priority job never waits behind lower-priority work of its VC.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import assume, event, given
from hypothesis import strategies as st

from scheduler.core import (
    Backfill,
    NodeState,
    Policy,
    PreemptionMode,
    ReasonKind,
    Resources,
    RunningJob,
    Snapshot,
    TaskPlacement,
    schedule,
)
from scheduler.core.queue import QUEUE_ORDERS
from tests.factories import job, node, role, snapshot, vc
from tests.factories import running as running_on

GPUS = st.sampled_from([0, 1, 2, 4, 8])


@st.composite
def nodes_st(draw, min_size=1, max_size=8):
    n = draw(st.integers(min_size, max_size))
    out = []
    for i in range(n):
        out.append(
            node(
                f"n{i}",
                gpu=draw(st.sampled_from([0, 4, 8])),
                cpu=draw(st.sampled_from([8, 32])),
                mem_gib=draw(st.sampled_from([32, 256])),
                labels={"pool": draw(st.sampled_from(["a", "b"]))},
                state=draw(
                    st.sampled_from([NodeState.READY] * 5 + [NodeState.CORDONED, NodeState.LOST])
                ),
            )
        )
    return out


@st.composite
def job_st(draw, name, vcs=("x", "y", "z"), max_roles=2):
    roles = []
    for r in range(draw(st.integers(1, max_roles))):
        replicas = draw(st.integers(1, 4))
        roles.append(
            role(
                f"r{r}",
                replicas=replicas,
                gpu=draw(GPUS),
                cpu=draw(st.sampled_from([1, 2, 8])),
                mem_gib=draw(st.sampled_from([1, 8, 32])),
                min_available=draw(st.one_of(st.none(), st.integers(1, replicas))),
                selector=draw(st.sampled_from([None, None, {"pool": "a"}])),
            )
        )
    return job(
        name,
        roles=roles,
        vc=draw(st.sampled_from(vcs)),
        priority=draw(st.sampled_from([25, 50, 75])),
        submit=float(draw(st.integers(0, 1000))),
        estimate=draw(st.one_of(st.none(), st.floats(10, 5000))),
        preemptible=draw(st.booleans()),
    )


def place_running(nodes, jobs, start_times):
    """Bind ``jobs`` greedily first-fit on ready nodes (a valid ledger); skip misfits."""
    free = {n.name: [n.capacity.cpu_m, n.capacity.memory, n.capacity.gpu] for n in nodes}
    out = []
    for j, start in zip(jobs, start_times, strict=False):
        trial = {k: list(v) for k, v in free.items()}
        placements = []
        ok = True
        for r in j.roles:
            rr = r.resources
            for idx in range(r.replicas):
                spot = next(
                    (
                        n.name
                        for n in nodes
                        if trial[n.name][0] >= rr.cpu_m
                        and trial[n.name][1] >= rr.memory
                        and trial[n.name][2] >= rr.gpu
                    ),
                    None,
                )
                if spot is None:
                    ok = False
                    break
                t = trial[spot]
                t[0] -= rr.cpu_m
                t[1] -= rr.memory
                t[2] -= rr.gpu
                placements.append(TaskPlacement(r.name, idx, spot, rr))
            if not ok:
                break
        if ok:
            free = trial
            out.append(RunningJob(job=j, start_time=start, placements=tuple(placements)))
    return out


@st.composite
def policy_st(draw):
    modes = draw(st.lists(st.sampled_from(list(PreemptionMode)), unique=True, max_size=3))
    return Policy(
        queue_order=draw(st.sampled_from(sorted(QUEUE_ORDERS))),
        scorers=draw(
            st.sampled_from(
                [
                    (("best-fit", 1.0), ("gang-locality", 1.0)),
                    (("spread", 1.0),),
                    (("best-fit", 1.0),),
                ]
            )
        ),
        backfill=draw(st.sampled_from(list(Backfill))),
        strict_order=draw(st.booleans()),
        vc_quota=draw(st.booleans()),
        preemption=tuple(modes),
        aging_per_hour=draw(st.sampled_from([0.0, 1.0])),
        max_jobs_per_cycle=draw(st.sampled_from([None, None, 3])),
        preemption_min_runtime_s=draw(st.sampled_from([0.0, 100.0])),
    )


@st.composite
def case_st(draw):
    nodes = draw(nodes_st())
    n_run = draw(st.integers(0, 12))
    run_jobs = [draw(job_st(f"run{i}", max_roles=1)) for i in range(n_run)]
    starts = [float(draw(st.integers(0, 2000))) for _ in run_jobs]
    running = place_running([n for n in nodes if n.state is NodeState.READY], run_jobs, starts)
    pending = [draw(job_st(f"job{i}")) for i in range(draw(st.integers(1, 8)))]
    vcs = [
        vc(
            name,
            gpu=draw(st.sampled_from([0, 4, 8, 16])),
            max_gpu=draw(st.sampled_from([None, 8, 24])),
            can_borrow=draw(st.booleans()),
        )
        for name in ("x", "y", "z")
    ]
    return snapshot(nodes, pending, running, vcs), draw(policy_st())


def check_invariants(s: Snapshot, d) -> None:
    nodes = {n.name: n for n in s.nodes}
    pending = {j.name: j for j in s.pending}
    running = {rj.job.name for rj in s.running}
    used = {n.name: [n.allocated.cpu_m, n.allocated.memory, n.allocated.gpu] for n in s.nodes}
    bound = set()
    for b in d.binds:
        assert b.job in pending and b.job not in bound
        bound.add(b.job)
        j = pending[b.job]
        by_role = defaultdict(list)
        for p in b.placements:
            by_role[p.role].append(p)
            n = nodes[p.node]
            assert n.state is NodeState.READY
            u = used[p.node]
            u[0] += p.resources.cpu_m
            u[1] += p.resources.memory
            u[2] += p.resources.gpu
        for r in j.roles:
            got = by_role.pop(r.name, [])
            assert r.gang_min <= len(got) <= r.replicas, (b.job, r.name, len(got))
            assert sorted(p.index for p in got) == list(range(len(got)))
            for p in got:
                assert p.resources == r.resources
                assert all(nodes[p.node].labels.get(k) == v for k, v in r.node_selector.items())
        assert not by_role  # no placements of unknown roles
    for name, u in used.items():
        cap = nodes[name].capacity
        before = nodes[name].allocated
        # binds only go where they fit on top of what the node holds
        extra = Resources(u[0] - before.cpu_m, u[1] - before.memory, u[2] - before.gpu)
        if not extra.is_zero():
            assert Resources(*u).fits_in(cap), (name, u, cap)
    assert set(d.pending) == set(pending) - bound
    victims = [p.job for p in d.preemptions]
    assert len(victims) == len(set(victims)) and set(victims) <= running
    for p in d.preemptions:
        assert d.pending[p.for_job].kind is ReasonKind.PREEMPTING


@given(case_st())
def test_invariants_hold_for_random_clusters_jobs_and_policies(case):
    s, policy = case
    d = schedule(s, policy, 3000.0)
    event(f"binds: {min(len(d.binds), 3)}, preemptions: {min(len(d.preemptions), 1)}")
    check_invariants(s, d)
    assert schedule(s, policy, 3000.0) == d  # deterministic
    # the same case with every preemption mode on, to exercise victim selection more often
    every = replace(policy, preemption=tuple(PreemptionMode), preemption_min_runtime_s=0.0)
    d = schedule(s, every, 3000.0)
    event(f"all modes: preemptions: {min(len(d.preemptions), 1)}")
    check_invariants(s, d)


@given(case_st(), st.randoms(use_true_random=False))
def test_decision_does_not_depend_on_pending_or_running_order(case, rnd):
    s, policy = case
    pending = list(s.pending)
    running = list(s.running)
    rnd.shuffle(pending)
    rnd.shuffle(running)
    shuffled = Snapshot(s.nodes, s.vcs, tuple(pending), tuple(running), s.version)
    assert schedule(shuffled, policy, 3000.0) == schedule(s, policy, 3000.0)


@st.composite
def reclaim_case_st(draw):
    """VC y (no guarantee) borrows the whole cluster with single-node jobs; VC x, with a
    guarantee, submits work within it that fits the empty cluster."""
    nodes = draw(nodes_st(min_size=2, max_size=6))
    nodes = [n for n in nodes if n.state is NodeState.READY]
    assume(len(nodes) >= 2)
    fillers = []
    for k, n in enumerate(nodes):
        g = n.capacity.gpu
        pieces = draw(st.sampled_from([1, 2])) if g >= 2 else 1
        for p in range(pieces):
            fillers.append(
                job(
                    f"y{k}-{p}",
                    gpu=g // pieces,
                    cpu=n.capacity.cpu_m / 1000 / pieces,
                    mem_gib=8,
                    vc="y",
                    priority=draw(st.sampled_from([25, 50, 75])),
                    preemptible=draw(st.booleans()),
                )
            )
    starts = [float(draw(st.integers(0, 1000))) for _ in fillers]
    running = place_running(nodes, fillers, starts)
    want = draw(job_st("x-job", vcs=("x",), max_roles=1))
    others = [draw(job_st(f"y-more{i}", vcs=("y",))) for i in range(draw(st.integers(0, 3)))]
    g = want.gang_request()
    vcs = [vc("x", gpu=g.gpu, cpu=g.cpu_m / 1000, mem_gib=g.memory / 1024**3 + 1), vc("y")]
    return nodes, running, [want, *others], vcs


@given(reclaim_case_st())
def test_a_vc_below_guarantee_gets_its_borrowed_capacity_back_in_the_same_cycle(case):
    nodes, running, pending, vcs = case
    want = pending[0]
    # reclaimable: the job fits the cluster once every borrower's job is gone
    empty = schedule(snapshot(nodes, [want], vcs=vcs), Policy(), 0.0)
    assume(empty.binds)
    s = snapshot(nodes, pending, running, vcs)
    policy = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)
    d = schedule(s, policy, 5000.0)
    check_invariants(s, d)
    if want.name in {b.job for b in d.binds}:
        event("reclaim: bound directly")
        return
    event("reclaim: victims chosen")
    assert d.pending[want.name].kind is ReasonKind.PREEMPTING, d.pending[want.name]
    assert any(p.for_job == want.name for p in d.preemptions)


@st.composite
def priority_case_st(draw):
    nodes = [n for n in draw(nodes_st(min_size=1, max_size=5)) if n.state is NodeState.READY]
    assume(nodes)
    run_jobs = [draw(job_st(f"run{i}", vcs=("x", "y"), max_roles=1)) for i in range(12)]
    starts = [float(draw(st.integers(0, 1000))) for _ in run_jobs]
    running = place_running(nodes, run_jobs, starts)
    high = draw(job_st("high", vcs=("x",), max_roles=1))
    high = replace(high, priority=draw(st.sampled_from([50, 75, 100])))
    return nodes, running, high


def without(nodes, running, drop):
    """The snapshot's nodes and running jobs with the jobs in ``drop`` removed."""
    keep = [rj for rj in running if rj.job.name not in drop]
    return snapshot(nodes, (), keep)


@given(priority_case_st(), st.booleans())
def test_higher_priority_never_waits_behind_lower_priority_in_its_vc(case, strict_fifo):
    nodes, running, high = case
    vcs = [vc("x"), vc("y")]
    if strict_fifo:
        # strict FIFO: a lower-priority job of the VC is never bound while a higher one
        # waits for resources
        low = job("low", gpu=0, cpu=1, vc="x", priority=high.priority - 1, submit=0)
        s = snapshot(nodes, [high, low], running, vcs)
        policy = Policy(backfill=Backfill.NONE, strict_order=True, preemption=())
        d = schedule(s, policy, 2000.0)
        check_invariants(s, d)
        if "high" in d.pending and d.pending["high"].kind in (
            ReasonKind.INSUFFICIENT_RESOURCES,
            ReasonKind.GANG_INCOMPLETE,
        ):
            assert "low" not in {b.job for b in d.binds}
        return
    # priority preemption: if high stays pending for resources, it would not fit even
    # with every lower-priority preemptible job of its VC gone
    s = snapshot(nodes, [high], running, vcs)
    policy = Policy(preemption=(PreemptionMode.PRIORITY,), aging_per_hour=0)
    d = schedule(s, policy, 2000.0)
    check_invariants(s, d)
    if "high" not in d.pending or d.pending["high"].kind is ReasonKind.PREEMPTING:
        event(f"priority: {'bound' if 'high' not in d.pending else 'preempting'}")
        return
    event("priority: left pending")
    lower = {
        rj.job.name
        for rj in running
        if rj.job.vc == "x" and rj.job.preemptible and rj.job.priority < high.priority
    }
    reduced = without(nodes, running, lower)
    alone = Snapshot(reduced.nodes, tuple(vcs), (high,), reduced.running)
    assert not schedule(alone, Policy(preemption=()), 2000.0).binds


# -- whole-job reclaim with guarantees on the lending side ---------------------------------


def _alloc(rj):
    a = rj.allocated()
    return (a.cpu_m, a.memory, a.gpu)


def _over(cum, g):
    """Above guarantee ``g`` in a governed component (non-zero ones; all if g is zero)."""
    dims = [d for d in range(3) if g[d] > 0] or [0, 1, 2]
    return any(cum[d] > g[d] for d in dims)


def _borrowing(running, vcs, gone=frozenset()):
    """Names of the running jobs that are borrowing once the jobs in ``gone`` are removed:
    per VC in (start, name) order, from the first whose cumulative allocation exceeds the
    guarantee onward (written independently of quota.borrowing_jobs)."""
    g_of = {v.name: (v.guarantee.cpu_m, v.guarantee.memory, v.guarantee.gpu) for v in vcs}
    out = set()
    by_vc = defaultdict(list)
    for rj in running:
        if rj.job.name not in gone:
            by_vc[rj.job.vc].append(rj)
    for name, jobs in by_vc.items():
        cum = [0, 0, 0]
        for rj in sorted(jobs, key=lambda r: (r.start_time, r.job.name)):
            cum = [c + a for c, a in zip(cum, _alloc(rj), strict=True)]
            if _over(cum, g_of.get(name, (0, 0, 0))):
                out.add(rj.job.name)
    return out


@st.composite
def guarded_reclaim_case_st(draw, same_priority=False):
    """Like reclaim_case_st, but the lending VC y has a random guarantee (cpu, memory and
    GPUs, possibly zero), so some of its jobs are guaranteed and some borrowing."""
    nodes = [n for n in draw(nodes_st(min_size=2, max_size=6)) if n.state is NodeState.READY]
    assume(len(nodes) >= 2)
    fillers = []
    for k, n in enumerate(nodes):
        g = n.capacity.gpu
        pieces = draw(st.sampled_from([1, 2])) if g >= 2 else 1
        for p in range(pieces):
            fillers.append(
                job(
                    f"y{k}-{p}",
                    gpu=g // pieces,
                    cpu=n.capacity.cpu_m / 1000 / pieces,
                    mem_gib=draw(st.sampled_from([0.5, 8])),
                    vc="y",
                    priority=50 if same_priority else draw(st.sampled_from([25, 50, 75])),
                    preemptible=draw(st.booleans()),
                )
            )
    starts = [float(draw(st.integers(0, 1000))) for _ in fillers]
    running = place_running(nodes, fillers, starts)
    want = draw(job_st("x-job", vcs=("x",), max_roles=1))
    g = want.gang_request()
    vcs = [
        vc("x", gpu=g.gpu, cpu=g.cpu_m / 1000, mem_gib=g.memory / 1024**3 + 1),
        vc(
            "y",
            gpu=draw(st.sampled_from([0, 4, 8, 16])),
            cpu=draw(st.sampled_from([0, 8, 32])),
            mem_gib=draw(st.sampled_from([0, 4, 64])),
        ),
    ]
    return nodes, running, [want], vcs


@given(guarded_reclaim_case_st())
def test_reclaim_victims_are_borrowing_jobs_never_guaranteed_ones(case):
    nodes, running, pending, vcs = case
    s = snapshot(nodes, pending, running, vcs)
    policy = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)
    d = schedule(s, policy, 5000.0)
    check_invariants(s, d)
    order = [p.job for p in d.preemptions]  # the order the victims were taken in
    event(f"reclaim with y guarantee: {len(order)} victims")
    assert set(order) <= _borrowing(running, vcs)
    # each victim was still borrowing when taken: with the victims taken before it gone
    for i, v in enumerate(order):
        assert v in _borrowing(running, vcs, gone=frozenset(order[:i])), v


@given(guarded_reclaim_case_st(same_priority=True))
def test_guarantee_comes_back_in_the_same_cycle_when_borrowing_jobs_free_enough(case):
    nodes, running, pending, vcs = case
    want = pending[0]
    borrowing = _borrowing(running, vcs)
    # reclaimable: the job fits beside y's guaranteed jobs once its borrowing jobs are gone
    kept = [rj for rj in running if rj.job.name not in borrowing]
    alone = schedule(snapshot(nodes, [want], kept, vcs), Policy(preemption=()), 0.0)
    assume(alone.binds)
    s = snapshot(nodes, pending, running, vcs)
    policy = Policy(preemption=(PreemptionMode.VC_RECLAIM,), aging_per_hour=0)
    d = schedule(s, policy, 5000.0)
    check_invariants(s, d)
    if want.name in {b.job for b in d.binds}:
        event("guarded reclaim: bound directly")
        return
    event("guarded reclaim: victims chosen")
    assert d.pending[want.name].kind is ReasonKind.PREEMPTING, d.pending[want.name]
    assert {p.job for p in d.preemptions} <= borrowing


@st.composite
def borrowing_head_case_st(draw):
    # Node a (4 or 8 GPUs) partly held by y's job r; node c beside it, partly held by z.
    # x's head needs all of a and borrows part of it (x's guarantee is smaller); y's g
    # fits in what r leaves on a and stays within y's guarantee.
    ga, gc = draw(st.sampled_from([4, 8])), draw(st.sampled_from([1, 2, 4, 8]))
    k = draw(st.integers(1, ga - 1))
    nodes = [node("a", gpu=ga), node("c", gpu=gc)]
    running = [running_on(job("r", gpu=k, vc="y"), ["a"])]
    zc = draw(st.integers(0, gc))
    if zc:
        running.append(running_on(job("z1", gpu=zc, vc="z"), ["c"]))
    head = job("head", gpu=ga, vc="x", submit=0)
    g = job("g", gpu=draw(st.integers(1, ga - k)), vc="y", submit=500)
    others = [
        job(
            f"more{i}",
            gpu=draw(st.integers(1, 4)),
            vc=draw(st.sampled_from(["x", "z"])),
            submit=100 + i,
        )
        for i in range(draw(st.integers(0, 2)))
    ]
    x_gpu = draw(st.integers(1, ga - 1))  # x governs GPUs (a zero guarantee governs none)
    y_gpu = k + g.gang_request().gpu + draw(st.integers(0, 4))
    vcs = [vc("x", gpu=x_gpu, cpu=2, mem_gib=2), vc("y", gpu=y_gpu, cpu=8, mem_gib=8), vc("z")]
    return nodes, running, [head, g, *others], vcs


@given(borrowing_head_case_st(), st.booleans())
def test_a_borrowing_heads_reservation_never_holds_back_a_job_within_its_guarantee(
    case, queue_order
):
    # Whatever the head's reservation (bounded, or a drain kept under LAS), a job within
    # its VC's guarantee is never told to wait behind another VC's borrowing head: lending
    # protection admitted the head on the promise that the guarantee stays free (issue 36,
    # fourth round).
    nodes, running, pending, vcs = case
    modes = (PreemptionMode.VC_RECLAIM,) + ((PreemptionMode.QUEUE_ORDER,) if queue_order else ())
    policy = Policy(
        queue_order="las", backfill=Backfill.EASY, vc_quota=True, preemption=modes,
        aging_per_hour=0, las_thresholds=(3600.0, 36000.0),
    )  # fmt: skip
    s = snapshot(nodes, pending, running, vcs)
    d = schedule(s, policy, 100.0)
    check_invariants(s, d)
    why = d.pending.get("g")
    head_why = d.pending.get("head")
    g_was, head_was = (w.kind.value if w else "bound" for w in (why, head_why))
    event(f"g {g_was}; head {head_was}")
    if why is not None:
        assert not (
            why.kind is ReasonKind.RESERVATION and why.details.get("blocked_by") == "head"
        ), why


# -- releasing jobs and nominations over two cycles (the service's view) -------------------


@given(case_st(), st.data())
def test_releasing_jobs_are_never_victims_and_nominations_are_whole_gangs(case, data):
    s, policy = case
    policy = replace(policy, preemption=tuple(PreemptionMode), preemption_min_runtime_s=0.0)
    going = data.draw(st.sets(st.sampled_from([rj.job.name for rj in s.running] or ["-"])))
    s = replace(s, running=tuple(replace(rj, releasing=rj.job.name in going) for rj in s.running))
    for _ in range(2):
        d = schedule(s, policy, 3000.0)
        check_invariants(s, d)
        assert not {p.job for p in d.preemptions} & going
        assert schedule(s, policy, 3000.0) == d  # deterministic
        pending = {j.name: j for j in s.pending}
        for name, placements in d.nominations.items():
            assert d.pending[name].kind is ReasonKind.PREEMPTING
            count = defaultdict(int)
            for p in placements:
                count[p.role] += 1
            for r in pending[name].roles:
                assert r.gang_min <= count[r.name] <= r.replicas
        event(f"nominations: {min(len(d.nominations), 2)}")
        # next cycle as the service sees it: victims still hold their allocation, releasing;
        # binds hold theirs; nominations come back
        victims = {p.job for p in d.preemptions}
        going = going | victims
        bound = {b.job: b for b in d.binds}
        running = [replace(rj, releasing=rj.job.name in going) for rj in s.running]
        running += [
            RunningJob(pending[b.job], 3000.0, b.placements, releasing=False) for b in d.binds
        ]
        nodes = []
        for n in s.nodes:
            extra = [p.resources for b in d.binds for p in b.placements if p.node == n.name]
            alloc = n.allocated
            for r in extra:
                alloc = alloc + r
            nodes.append(replace(n, allocated=alloc))
        s = replace(
            s,
            nodes=tuple(nodes),
            pending=tuple(j for j in s.pending if j.name not in bound),
            running=tuple(running),
            nominations=d.nominations,
        )
        if not s.pending:
            break
