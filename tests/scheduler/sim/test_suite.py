"""The robustness suite: synthetic cases reach their load, ratios, the CLI command."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from scheduler.sim.cli import app
from scheduler.sim.scenario import run_policy
from scheduler.sim.suite import cases, held_out_cases, ratios, run_suite, vs_tiresias


def test_ratios_are_the_issue_criteria():
    pol = {
        "fifo": {"mean": 2.0, "p99": 10.0},
        "fifo-backfill": {"mean": 1.5, "p99": 9.0},
        "tiresias-las": {"mean": 1.2, "p99": 8.0},
        "srtf-oracle": {"mean": 1.0, "p99": 12.0},
        "pasture": {"mean": 1.1, "p99": 12.0},
    }
    r = ratios(pol)
    assert r["pasture_vs_tiresias"] == pytest.approx(1.1 / 1.2)
    assert r["pasture_p99_vs_best"] == pytest.approx(12.0 / 8.0)
    assert r["backfill_vs_fifo"] == pytest.approx(0.75)
    assert r["pasture_vs_srtf"] == pytest.approx(1.1)
    assert ratios({"pasture": pol["pasture"]})["pasture_vs_tiresias"] is None


def test_rigid_and_elastic_tails_are_judged_against_their_own_baselines():
    """pasture replays rigidly: its p99 is compared with the other rigid policies' (an
    elastic replay's tail is not a bound a rigid schedule can reach); the elastic policy's
    with every baseline's, afs-like included."""
    pol = {
        "tiresias-las": {"mean": 1.2, "p99": 8.0},
        "srtf-oracle": {"mean": 1.0, "p99": 6.0},
        "pasture": {"mean": 1.1, "p99": 9.0},
        "elastic": {"mean": 0.7, "p99": 4.0},
        "afs-like": {"mean": 0.8, "p99": 2.0},
        "afs-las": {"mean": 0.75, "p99": 3.0},  # an elastic replay: not in pasture's pool
    }
    r = ratios(pol)
    assert r["pasture_p99_vs_best"] == pytest.approx(9.0 / 6.0)
    assert r["elastic_p99_vs_best"] == pytest.approx(4.0 / 2.0)
    assert r["elastic_vs_afs_like"] == pytest.approx(0.7 / 0.8)
    assert r["elastic_vs_afs_las"] == pytest.approx(0.7 / 0.75)
    vt = vs_tiresias(pol)
    assert vt is not None and vt["elastic"] == pytest.approx({"mean": 0.7 / 1.2, "p99": 0.5})
    assert vs_tiresias({"pasture": pol["pasture"]}) is None


@pytest.mark.parametrize("name", ["syn-heavy-tail", "syn-big-gangs", "syn-16gpu", "syn-1gpu-flood"])
def test_synthetic_cases_have_their_shape(name):
    case = next(c for c in cases() if c.name == name)
    sc = case.build(400, 0.8)
    assert len(sc.jobs) == 400
    assert [j.submit_s for j in sc.jobs] == sorted(j.submit_s for j in sc.jobs)
    assert sc.gpus == (16 if name == "syn-16gpu" else 64)
    assert 0.2 < sc.load < 2.0  # Poisson arrivals at the target rate, cut at the window
    if name == "syn-1gpu-flood":
        assert {j.gpus for j in sc.jobs} == {1, 8}
        assert sum(j.gpus == 1 for j in sc.jobs) > 0.9 * len(sc.jobs)
    if name == "syn-big-gangs":
        wide = [j for j in sc.jobs if j.gpus >= 0.5 * sc.gpus]
        assert wide and all(j.gpus <= 0.9 * sc.gpus for j in wide)
    assert case.build(400, 0.8).jobs == sc.jobs  # seeded: reproducible


def test_run_suite_rows_hold_every_policy_relative_to_the_lower_bound():
    rows = run_suite(["fifo", "pasture"], jobs=40, loads=[0.8], only=["syn-16gpu"])
    assert len(rows) == 1
    row = rows[0]
    assert row["case"] == "syn-16gpu" and row["gpus"] == 16
    for v in row["policies"].values():
        assert v["mean"] >= 1.0 - 1e-9  # a lower bound is a lower bound
        assert v["p99"] > 0


def test_run_suite_rows_count_each_policys_preemptions_as_its_replay_does():
    # the churn an order costs is read from the suite, not from a harness (issue 36)
    names = ["fifo", "tiresias-las"]
    row = run_suite(names, jobs=60, loads=[0.8], only=["syn-16gpu"])[0]
    sc = next(c for c in cases() if c.name == "syn-16gpu").build(60, 0.8)
    for n in names:
        assert row["policies"][n]["preemptions"] == run_policy(sc, n).preemptions
    assert row["policies"]["fifo"]["preemptions"] == 0  # no preemption mode
    assert row["policies"]["tiresias-las"]["preemptions"] > 0  # 1-16 GPU jobs on 16 GPUs


def test_run_suite_replays_with_the_restart_cost_and_checkpoints_it_is_given():
    # the same window under the engine's default (a preemption costs 60 s of the job's
    # GPUs, no work lost) and under jobs that never checkpoint (an interval longer than
    # any run: a preempted job redoes its whole attempt); fifo never preempts
    names = ["fifo", "tiresias-las"]
    free = run_suite(names, jobs=60, loads=[0.8], only=["syn-16gpu"])[0]
    lossy = run_suite(names, jobs=60, loads=[0.8], only=["syn-16gpu"], checkpoint_s=1e9)[0]
    assert (free["restart_cost_s"], free["checkpoint_s"]) == (60.0, None)
    assert (lossy["restart_cost_s"], lossy["checkpoint_s"]) == (60.0, 1e9)
    assert lossy["policies"]["fifo"] == free["policies"]["fifo"]
    assert lossy["policies"]["tiresias-las"]["mean"] > free["policies"]["tiresias-las"]["mean"]
    sc = next(c for c in cases() if c.name == "syn-16gpu").build(60, 0.8)
    want = run_policy(sc, "tiresias-las", restart_cost_s=0.0, checkpoint_s=1e9)
    got = run_suite(
        names, jobs=60, loads=[0.8], only=["syn-16gpu"], restart_cost_s=0.0, checkpoint_s=1e9
    )[0]
    assert got["policies"]["tiresias-las"]["mean"] * got["lb_mean_s"] == pytest.approx(
        want.jct_mean_s
    )


def test_suite_command_prints_json_and_plots(tmp_path):
    png = tmp_path / "r.png"
    res = CliRunner().invoke(
        app,
        [
            "suite",
            "--jobs",
            "40",
            "--loads",
            "0.6,0.95",
            "--cases",
            "syn-16gpu",
            "--policies",
            "fifo,fifo-backfill",
            "--workers",
            "1",
            "--json",
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout[res.stdout.index("[") :])
    assert [r["target_load"] for r in rows] == [0.6, 0.95]
    assert rows[0]["ratios"]["backfill_vs_fifo"] is not None
    assert png.stat().st_size > 0


def test_suite_command_rejects_an_unknown_policy():
    res = CliRunner().invoke(app, ["suite", "--policies", "nope"])
    assert res.exit_code == 2
    assert "unknown" in res.output


@pytest.mark.parametrize(
    "flag,value,expected",
    [
        ("--checkpoint-interval", "0", "seconds > 0"),
        ("--checkpoint-interval", "nan", "seconds > 0"),
        ("--restart-cost", "-5", "seconds >= 0"),
        ("--restart-cost", "inf", "seconds >= 0"),
    ],
)
@pytest.mark.parametrize("command", [["suite"], []])
def test_engine_flags_out_of_range_are_refused_naming_the_flag(command, flag, value, expected):
    # before: the engine's ValueError reached the user as a traceback
    res = CliRunner().invoke(app, [*command, flag, value, "--policies", "fifo"])
    assert res.exit_code == 2, res.output
    assert flag in res.output and expected in res.output and value in res.output


def test_held_out_cases_share_no_job_with_the_judged_ones():
    """The held-out set is data no policy was tuned on: at the default window (2,000 jobs)
    no held-out window of a real trace overlaps a judged window of the same trace, and no
    synthetic held-out case draws the same jobs as a judged one."""
    judged = {c.name: c for c in cases()}
    held = {c.name: c for c in held_out_cases()}
    assert not set(judged) & set(held)
    keys = lambda sc: {(j.submit_s, j.duration_s, j.gpus) for j in sc.jobs}  # noqa: E731
    for name, case in held.items():
        sc = case.build(2000, 0.8)
        assert len(sc.jobs) == 2000, name
        same_source = [j for j in judged.values() if j.name.split("-")[0] == name.split("-")[0]]
        assert same_source, name  # every held-out case has a judged sibling to differ from
        for sibling in same_source:
            assert not keys(sc) & keys(sibling.build(2000, 0.8)), (name, sibling.name)


def test_syn_long_gangs_runs_its_gangs_longer_than_its_one_gpu_jobs():
    sc = next(c for c in held_out_cases() if c.name == "syn-long-gangs").build(2000, 0.8)
    one = sorted(j.duration_s for j in sc.jobs if j.gpus == 1)
    gangs = sorted(j.duration_s for j in sc.jobs if j.gpus > 1)
    assert {j.gpus for j in sc.jobs} == {1, 8, 16, 32} and sc.gpus == 64
    assert 0.25 < len(gangs) / len(sc.jobs) < 0.35
    assert gangs[len(gangs) // 2] > 10 * one[len(one) // 2]  # medians 6 h against 15 min
    assert 0.5 < sc.load < 1.2  # the arrival rate's mean work is this family's


def test_run_suite_replays_the_held_out_set_when_asked():
    rows = run_suite(["fifo"], jobs=30, loads=[0.8], only=["syn-16gpu-b"], held_out=True)
    assert [r["case"] for r in rows] == ["syn-16gpu-b"]
    with pytest.raises(ValueError, match="'syn-16gpu' is no held-out case"):
        run_suite(["fifo"], jobs=30, loads=[0.8], only=["syn-16gpu"], held_out=True)


@pytest.mark.parametrize("name", ["nope", "[/data]", "[bold]x", "a\\[b]"])
def test_suite_command_refuses_an_unknown_case_naming_it_as_given(name):
    # before: an unknown --cases name replayed nothing and printed an empty table
    res = CliRunner().invoke(app, ["suite", "--cases", f"syn-16gpu,{name}", "--policies", "fifo"])
    assert res.exit_code == 2, res.output
    assert f"--cases: {name!r} is no judged case" in res.output
    assert "syn-16gpu" in res.output  # the expected names are listed
