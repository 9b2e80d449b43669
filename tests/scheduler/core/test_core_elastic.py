"""The elastic stage (issue 29): shrink running elastic jobs for blocked ones, grow them
with idle capacity by marginal gain (AFS), never touch non-elastic jobs."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, schedule
from scheduler.core.elastic import speedup
from scheduler.core.history import History, median_residual_service
from scheduler.core.model import Job, ReasonKind, RunningJob, TaskPlacement
from scheduler.core.presets import PRESETS
from tests.factories import job, node, snapshot

ELASTIC = PRESETS["elastic"]


def elastic(name: str, lo: int, hi: int, scaling: tuple[float, ...] = (), **kw: object) -> Job:
    j = job(name, gpu=1, replicas=hi, min_available=lo, **kw)  # type: ignore[arg-type]
    r = replace(j.roles[0], elastic=True)
    return replace(j, roles=(r,), scaling=scaling)


def on(j: Job, placed: dict[int, str], start: float = 0.0) -> RunningJob:
    r = j.roles[0]
    return RunningJob(
        j, start, tuple(TaskPlacement(r.name, i, n, r.resources) for i, n in placed.items())
    )


def test_speedup_table_linear_and_extrapolated():
    j = elastic("e", 1, 8, scaling=(1.0, 1.8, 2.4))
    assert speedup(j, 0) == 0.0
    assert speedup(j, 2) == 1.8
    assert abs(speedup(j, 5) - 3.6) < 1e-9  # last step (0.6) repeats
    assert speedup(elastic("l", 1, 4), 3) == 3.0


def test_blocked_job_shrinks_elastic_job_highest_index_first_not_preempts():
    e = elastic("e", 1, 4)
    rj = on(e, {0: "n0", 1: "n0", 2: "n0", 3: "n0"})
    s = snapshot([node("n0", gpu=4)], pending=[job("p", gpu=2, submit=10.0)], running=[rj])
    d = schedule(s, ELASTIC, 20.0)
    assert d.preemptions == () and d.binds == ()
    (sh,) = d.shrinks
    assert sh.job == "e" and sh.for_job == "p"
    assert sorted(p.index for p in sh.placements) == [2, 3]
    assert d.pending["p"].kind is ReasonKind.RESIZING
    assert "p" in d.nominations


def test_never_below_minimum_then_preemption_as_before():
    e = elastic("e", 3, 4)
    rj = on(e, {0: "n0", 1: "n0", 2: "n0", 3: "n0"})
    s = snapshot([node("n0", gpu=4)], pending=[job("p", gpu=2, submit=1990.0)], running=[rj])
    d = schedule(s, ELASTIC, 2000.0)  # e attained 8,000 GPU-s: a lower LAS queue than p
    assert d.shrinks == ()  # one spare replica is not enough for 2 GPUs: nothing is taken
    assert [p.job for p in d.preemptions] == ["e"]  # LAS preemption, as Tiresias


def test_idle_gpus_go_to_best_marginal_gain():
    good = elastic("good", 1, 4, scaling=(1.0, 2.0, 3.0, 4.0))
    poor = elastic("poor", 1, 4, scaling=(1.0, 1.1, 1.15, 1.2))
    s = snapshot(
        [node("n0", gpu=4)],
        running=[on(good, {0: "n0"}), on(poor, {0: "n0"})],
    )
    d = schedule(s, ELASTIC, 0.0)
    got = {b.job: sorted(p.index for p in b.placements) for b in d.grows}
    assert got == {"good": [1, 2]}  # poor's gain (0.1) never beats good's (1.0)


def test_non_elastic_jobs_unchanged_under_elastic_policy():
    j = job("j", gpu=1, replicas=4, min_available=1)
    rj = on(j, {0: "n0", 1: "n0", 2: "n0", 3: "n0"})
    s = snapshot([node("n0", gpu=4)], pending=[job("p", gpu=2, submit=10.0)], running=[rj])
    base = schedule(s, PRESETS["tiresias-las"], 20.0)
    d = schedule(s, ELASTIC, 20.0)
    assert d.shrinks == () and d.grows == base.grows
    assert d.preemptions == base.preemptions and d.binds == base.binds


def test_elastic_roles_without_the_policy_are_never_shrunk():
    e = elastic("e", 1, 4)
    rj = on(e, {0: "n0", 1: "n0", 2: "n0", 3: "n0"})
    s = snapshot([node("n0", gpu=4)], pending=[job("p", gpu=2, submit=10.0)], running=[rj])
    assert schedule(s, Policy(), 20.0).shrinks == ()


def test_spec_replicas_range_is_an_elastic_role_in_the_core():
    import pytest
    from pydantic import ValidationError

    from scheduler.spec.model import JobSpec

    spec = JobSpec.model_validate(
        {"name": "e", "roles": {"w": {"replicas": {"min": 1, "max": 3}, "command": "x"}}}
    )
    (r,) = spec.to_core().roles
    assert (r.replicas, r.gang_min, r.elastic) == (3, 1, True)
    assert JobSpec.model_validate(spec.model_dump()).roles["w"].elastic  # round-trips
    for bad, word in (({"min": 4, "max": 3}, "1 <= min <= max"), ({"min": 1}, "{min: M")):
        with pytest.raises(ValidationError, match=word):
            JobSpec.model_validate({"name": "e", "roles": {"w": {"replicas": bad, "command": "x"}}})


def test_a_resize_across_vcs_names_neither_tenants_job_to_the_other():
    """The shrunk job's event and the waiting job's RESIZING reason are read by different
    tenants: each names the other's job as "a job of VC ..." (as preemption reasons do)."""
    e = elastic("secret-elastic", 1, 4, vc="a")
    rj = on(e, {0: "n0", 1: "n0", 2: "n0", 3: "n0"})
    p = job("hidden-waiter", gpu=2, submit=10.0, vc="b")
    s = snapshot([node("n0", gpu=4)], pending=[p], running=[rj])
    d = schedule(s, ELASTIC, 20.0)
    (sh,) = d.shrinks
    assert "hidden-waiter" not in sh.reason and "a job of VC b" in sh.reason
    assert sh.reason.startswith("resized: replica(s) worker-3, worker-2 stopped to start ")
    message = d.pending["hidden-waiter"].message
    assert "secret-elastic" not in message and "a job of VC a" in message
    own = schedule(
        snapshot([node("n0", gpu=4)], pending=[replace(p, vc="a")], running=[rj]), ELASTIC, 20.0
    )
    assert "job hidden-waiter" in own.shrinks[0].reason  # same VC: named
    assert "job secret-elastic" in own.pending["hidden-waiter"].message


def test_replicas_move_to_the_job_that_gains_more():
    """AFS reallocates at each event: a full cluster where "old" (served 4 GPU-hours)
    holds 3 replicas and "new" (just started) 1 of its 3; each of new's next replicas
    gains 1 x 1/(1 + ~0), more than old loses per replica, 1 x 1/(1 + 14,400): old gives
    its two spare replicas (highest first), new grows into them next cycle."""
    old = replace(elastic("old", 1, 3), attained_service=4 * 3600.0)
    new = elastic("new", 1, 3)
    s = snapshot(
        [node("n0", gpu=4)],
        running=[on(old, {0: "n0", 1: "n0", 2: "n0"}, 100.0), on(new, {0: "n0"}, 100.0)],
    )
    d = schedule(s, ELASTIC, 100.0)
    assert d.grows == () and d.preemptions == () and d.binds == ()
    moved = [(x.job, x.for_job, [p.index for p in x.placements]) for x in d.shrinks]
    assert moved == [("old", "new", [2]), ("old", "new", [1])]
    # the next cycle, with old's replicas gone, new grows into the room; nothing moves
    after = snapshot(
        [node("n0", gpu=4)],
        running=[on(old, {0: "n0"}, 100.0), on(new, {0: "n0"}, 100.0)],
    )
    d2 = schedule(after, ELASTIC, 100.0)
    assert [(b.job, [p.index for p in b.placements]) for b in d2.grows] == [("new", [1, 2])]
    assert d2.shrinks == ()
    # equally served jobs: no move (a move must strictly gain)
    twin = replace(elastic("twin", 1, 3), attained_service=4 * 3600.0)
    same = snapshot(
        [node("n0", gpu=4)],
        running=[on(old, {0: "n0", 1: "n0", 2: "n0"}, 100.0), on(twin, {0: "n0"}, 100.0)],
    )
    assert schedule(same, ELASTIC, 100.0).shrinks == ()


def test_no_regrow_within_the_cool_down_after_a_shrink():
    """A shrunk torchrun group needs time to re-form (docs/jobs.md): with
    ``regrow_cooldown_s`` the job is not grown until that long after ``resized_at``."""
    policy = replace(ELASTIC, regrow_cooldown_s=60.0)
    e = elastic("e", 1, 3)
    shrunk = replace(on(e, {0: "n0"}, 0.0), resized_at=1000.0)
    s = snapshot([node("n0", gpu=4)], running=[shrunk])
    assert schedule(s, policy, 1005.0).grows == ()  # 5 s after the shrink: not yet
    assert schedule(s, policy, 1059.9).grows == ()
    (b,) = schedule(s, policy, 1060.0).grows
    assert (b.job, sorted(p.index for p in b.placements)) == ("e", [1, 2])
    assert len(schedule(s, ELASTIC, 1005.0).grows) == 1  # no cool-down: at once
    # nor does a job in its cool-down give a replica away
    new = elastic("new", 1, 3)
    full = snapshot(
        [node("n0", gpu=3)],
        running=[
            replace(
                on(replace(e, attained_service=1e5), {0: "n0", 1: "n0"}, 0.0), resized_at=1000.0
            ),
            on(new, {0: "n0"}, 1000.0),
        ],
    )
    assert schedule(full, policy, 1005.0).shrinks == ()
    assert [s.job for s in schedule(full, policy, 1060.0).shrinks] == ["e"]


def test_regrow_cooldown_must_be_finite_and_non_negative():
    import pytest

    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="regrow_cooldown_s: expected finite seconds"):
            Policy(regrow_cooldown_s=bad)


def _young_and_old() -> tuple[RunningJob, RunningJob]:
    # young: just started, scales poorly; old: has run 1,000 s on one GPU, scales linearly
    young = elastic("young", 1, 4, scaling=(1.0, 1.5, 1.75, 1.9), submit=990.0)
    old = elastic("old", 1, 4, scaling=(1.0, 2.0, 3.0, 4.0))
    return on(young, {0: "n0"}, start=1000.0), on(old, {0: "n0"}, start=0.0)


def test_learned_remaining_service_lets_scaling_decide_the_grow():
    """Issue 36: with finished jobs' services known, the length weight is 1 / the median
    remaining service of jobs that attained as much (``median_residual_service``), not
    1 / (1 + attained): a job that has run 1,000 GPU-s among jobs that run ~50,000 is not
    1,000 times longer than one that just started, so the GPU goes to the job whose next
    replica adds the most throughput (old: +1.0) rather than to the youngest (+0.5)."""
    young, old = _young_and_old()
    services = tuple(float(s) for s in range(5000, 100001, 5000))  # 20 finished jobs
    hist = History(runtimes_s=services, services_gpu_s=services)
    s = replace(snapshot([node("n0", gpu=4)], running=[young, old]), history=hist)
    d = schedule(s, ELASTIC, 1000.0)
    got = {b.job: sorted(p.index for p in b.placements) for b in d.grows}
    assert got == {"old": [1, 2]}


def test_without_history_attained_service_stands_in_for_the_length():
    young, old = _young_and_old()
    s = snapshot([node("n0", gpu=4)], running=[young, old])
    d = schedule(s, ELASTIC, 1000.0)
    got = {b.job: sorted(p.index for p in b.placements) for b in d.grows}
    assert got == {"young": [1, 2]}  # weight 1 against 1/1001: Tiresias' stand-in


def test_median_residual_service():
    xs = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 110.0)
    h = History(services_gpu_s=xs)
    assert median_residual_service(h, 0.0) == 60.0  # median of all 11, minus 0
    assert median_residual_service(h, 15.0) == 45.0  # the 10 above 15: lower median 60
    assert median_residual_service(h, 25.0) is None  # 9 above: fewer than 2 x 5
    assert median_residual_service(None, 0.0) is None
