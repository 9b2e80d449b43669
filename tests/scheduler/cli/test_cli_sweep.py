"""``pasture job submit --sweep``: a sweep file's expansion (pure), its errors by field,
and a 2x2 sweep through the real API in one batch request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from live import job_yaml

from scheduler.cli.sweep import MAX_JOBS, SweepError, combinations, expand, load_sweep

DATA = Path(__file__).parent / "data"
BASE = yaml.safe_load(job_yaml("train"))


def _field(base: dict, sweep: dict) -> str:
    with pytest.raises(SweepError) as info:
        expand(base, sweep)
    return f"{info.value.field} | {info.value}"


def test_grid_is_the_cartesian_product_then_the_list():
    sweep = {
        "name": "lr-{LR}-w{replicas}",
        "grid": {"roles.worker.env.LR": ["0.1", "0.01"], "roles.worker.replicas": [1, 2]},
        "list": [{"roles.worker.env.LR": "0.5", "roles.worker.replicas": 3}],
    }
    jobs = expand(BASE, sweep)
    assert [j.name for j in jobs] == [
        "lr-0-1-w1",
        "lr-0-1-w2",
        "lr-0-01-w1",
        "lr-0-01-w2",
        "lr-0-5-w3",
    ]
    assert [j.source for j in jobs] == ["grid"] * 4 + ["list[0]"]
    for job in jobs:
        worker = job.spec["roles"]["worker"]
        assert job.spec["name"] == job.name
        assert worker["env"]["LR"] == job.values["roles.worker.env.LR"]
        assert worker["replicas"] == job.values["roles.worker.replicas"]
        assert job.spec["roles"]["ps"] == BASE["roles"]["ps"]  # untouched
    assert BASE["roles"]["worker"]["replicas"] == 2  # the base spec is not changed
    assert jobs[1].label() == "roles.worker.env.LR=0.1 roles.worker.replicas=2"


def test_default_names_numbers_and_env_numbers_as_text():
    jobs = expand(BASE, {"grid": {"env.SEED": [1, 2, 3]}})
    assert [j.name for j in jobs] == ["train-0", "train-1", "train-2"]
    assert [j.spec["env"]["SEED"] for j in jobs] == ["1", "2", "3"]
    full = expand(BASE, {"name": "s{env.SEED}-{n}", "grid": {"env.SEED": [7, 8]}})
    assert [j.name for j in full] == ["s7-0", "s8-1"]


def test_bounds_count_before_building():
    assert len(combinations({"grid": {"a.b": list(range(MAX_JOBS))}})) == MAX_JOBS
    # 10^10 combinations are refused by count, not built
    huge = {"grid": {f"env.K{i}": list(range(10)) for i in range(10)}}
    assert _field(BASE, huge).startswith("grid | grid: 10000000000 combinations, at most 500")
    too_many = {"list": [{"env.A": str(i)} for i in range(MAX_JOBS + 1)]}
    assert _field(BASE, too_many).startswith("list | ")


@pytest.mark.parametrize(
    ("sweep", "field", "words"),
    [
        ({}, "grid", "no combinations"),
        ({"grid": {}}, "grid", "no combinations"),
        ({"grid": {"roles.worker.replicas": []}}, "grid.roles.worker.replicas", "non-empty list"),
        ({"grid": ["roles.worker.replicas"]}, "grid", "expected a mapping"),
        ({"grid": {"roles..replicas": [1]}}, "grid.roles..replicas", "dotted spec path"),
        ({"grid": {"name": ["a", "b"]}}, "grid.name", "`name` template"),
        ({"list": [{}]}, "list[0]", "non-empty mapping"),
        ({"grid": {"roles.worker.command.x": [1]}}, "grid", "cannot set"),
        ({"grid": {"roles.worker.replicas": ["many"]}}, "grid", "roles.worker.replicas"),
        ({"grid": {"roles.wrker.replicas": [1]}}, "grid", "roles.wrker"),
        ({"name": "x-{lr}", "grid": {"env.LR": ["1"]}}, "name", "{lr} is not a key"),
        ({"name": "x-{v}", "grid": {"env.v": ["1"], "roles.ps.env.v": ["2"]}}, "name", "matches"),
        ({"name": "same", "grid": {"env.LR": ["1", "2"]}}, "name", "for combinations 0 and 1"),
        ({"name": "x-{LR}", "grid": {"env.LR": ["1.0", "1-0"]}}, "name", "'x-1-0'"),
        (
            {"name": "Big-{n}", "grid": {"env.LR": ["1"]}},
            "name",
            "'Big-0' for combination 0, not a job",
        ),
        ({"name": 5, "grid": {"env.LR": ["1"]}}, "name", "template string"),
        (
            {"name": "x-{LR}", "grid": {"env.LR": ["1"]}, "list": [{"env.SEED": "2"}]},
            "list[0]",
            "no value for env.LR",
        ),
    ],
)
def test_each_error_names_its_field(sweep, field, words):
    got = _field(BASE, sweep)
    assert got.split(" | ")[0] == field, got
    assert words in got, got


def test_load_sweep_resolves_the_spec_of_any_format(tmp_path):
    # the real OpenPAI v2 example: the grid's paths are into its pasture translation
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "spec": str(DATA / "openpai-hello-world-job.yaml"),
                "grid": {"roles.taskrole.env.STEPS": [100, 1000]},
            }
        )
    )
    base, _, doc = load_sweep(sweep)
    jobs = expand(base, doc)
    assert [j.name for j in jobs] == ["hello-world-job-0", "hello-world-job-1"]
    assert [j.spec["roles"]["taskrole"]["env"]["STEPS"] for j in jobs] == ["100", "1000"]
    inline = tmp_path / "inline.json"
    inline.write_text(json.dumps({"spec": BASE, "list": [{"vc": "default"}]}))
    assert [j.name for j in expand(*load_sweep(inline)[::2])] == ["train-0"]


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        ("- a\n- b\n", "(file)", "expected a mapping"),
        ("spec: x.yaml\ngrids: {}\n", "(file)", "unknown field(s) ['grids']"),
        ("grid: {env.A: ['1']}\n", "spec", "expected a job file's path"),
        ("spec: missing.yaml\n", "spec", "no file"),
        ("spec: {name: x, roles: {}}\n", "spec", "roles"),
        ("spec: [\n", "(file)", ""),
    ],
)
def test_load_sweep_errors_name_the_field(tmp_path, doc, field, words):
    path = tmp_path / "sweep.yaml"
    path.write_text(doc)
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    assert info.value.field == field and words in str(info.value), str(info.value)


def test_dry_run_prints_one_line_per_job_without_a_server(cli, tmp_path):
    (tmp_path / "train.yaml").write_text(job_yaml("train"))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("spec: train.yaml\ngrid: {env.LR: ['0.1', '0.2']}\n")
    r = cli("job", "submit", "--sweep", str(sweep), "--dry-run", "--set", "roles.ps.replicas=2")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == ["train-0\tenv.LR=0.1", "train-1\tenv.LR=0.2"]
    r = cli("job", "submit", "--sweep", str(sweep), "--dry-run", "--json", "--vc", "other")
    jobs = json.loads(r.output)
    assert [j["spec"]["env"] for j in jobs] == [{"LR": "0.1"}, {"LR": "0.2"}]
    assert {j["spec"]["vc"] for j in jobs} == {"other"}  # --vc applies to every job
    r = cli("job", "submit", "--sweep", str(sweep), "--dry-run", "--wait")
    assert r.exit_code == 2 and "no --follow, --wait or --name" in r.output
    sweep.write_text("spec: train.yaml\ngrid: {env.LR: []}\n")
    r = cli("job", "submit", "--sweep", str(sweep), "--dry-run")
    assert r.exit_code == 2 and "grid.env.LR" in r.output


def test_a_2x2_sweep_stores_4_jobs_in_one_batch(logged_in, cli, tmp_path):
    _, env = logged_in
    (tmp_path / "train.yaml").write_text(job_yaml("train"))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "spec: train.yaml\n"
        "name: 'lr-{LR}-w{replicas}'\n"
        "grid:\n"
        "  roles.worker.env.LR: [0.1, 0.01]\n"
        "  roles.worker.replicas: [1, 3]\n"
    )
    r = cli("job", "submit", "--sweep", str(sweep))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == 4, r.output
    assert lines[0] == "submitted job lr-0-1-w1 (roles.worker.env.LR=0.1 roles.worker.replicas=1)"
    for lr, replicas in [("0.1", 1), ("0.1", 3), ("0.01", 1), ("0.01", 3)]:
        name = f"lr-{lr.replace('.', '-')}-w{replicas}"
        job = env.store.get_job(name)
        assert job is not None and job.state == "submitted", name
        worker = job.spec["roles"]["worker"]
        assert (worker["env"]["LR"], worker["replicas"]) == (lr, replicas)
    # the same sweep again: every name is taken, each refused on its own line
    r = cli("job", "submit", "--sweep", str(sweep), "--json")
    assert r.exit_code == 1
    answer = json.loads(r.output)
    assert [i["status"] for i in answer["items"]] == [409] * 4 and answer["failed"] == 4
