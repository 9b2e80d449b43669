"""job validate (offline), submit --name/--vc/--env, job resubmit."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from live import job_yaml

from scheduler.cli.output import NOT_FOUND, REJECTED
from scheduler.spec import load_job_spec
from scheduler.store import NodeRecord

REPO = Path(__file__).resolve().parents[3]
OPENPAI = Path(__file__).parent / "data" / "openpai-hello-world-job.yaml"  # microsoft/pai


def test_validate_needs_no_cluster(cli):
    # isolated_config: no endpoint, no token, no dev cluster; any API call would exit 3
    r = cli("job", "validate", str(REPO / "examples" / "jobs" / "digits-ps-worker.yaml"))
    assert r.exit_code == 0, r.output
    assert "valid" in r.output and "digits-ps-worker" in r.output
    assert "1 cpu, 512Mi" in r.output


def test_validate_names_the_bad_field(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml("ok").replace("memory: 1Gi", "memory: 1Gb"))
    r = cli("job", "validate", str(bad))
    assert r.exit_code == REJECTED
    assert "roles.ps.resources.memory" in r.output and "1Gb" in r.output
    bad.write_text("name: x\nroles: [\n")
    r = cli("job", "validate", str(bad))
    assert r.exit_code == REJECTED and "malformed YAML" in r.output


def test_validate_translates_a_real_openpai_spec(cli):
    r = cli("job", "validate", str(OPENPAI), "-o", "json")
    assert r.exit_code == 0, r.output
    spec = json.loads(r.output)
    assert spec["roles"]["taskrole"]["resources"]["gpu"] == 1
    assert spec["roles"]["taskrole"]["resources"]["memory"] == 6500 * 2**20
    # what it prints is a pasture spec that parses to the same thing
    assert load_job_spec(json.dumps(spec)) == load_job_spec(OPENPAI.read_text())
    r = cli("job", "validate", str(OPENPAI), "-o", "yaml")
    assert yaml.safe_load(r.output) == spec


def test_submit_overrides_name_vc_and_env(logged_in, cli, tmp_path):
    _, env = logged_in
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("from-file"))
    r = cli(
        "job", "submit", str(path), "--name", "rerun-1", "--vc", "research", "-e", "LR=0.1",
        "--env", "SEED=7",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    job = env.store.get_job("rerun-1.research")
    assert job.vc == "research"
    assert job.spec["env"] == {"LR": "0.1", "SEED": "7"}
    assert env.store.get_job("from-file") is None
    r = cli("job", "submit", str(path), "--env", "NOEQUALS")
    assert r.exit_code == 2 and "KEY=VALUE" in r.output
    env.store.register_node(
        NodeRecord(name="gpu-1", address="10.0.0.5", cpu_m=8000, memory=32 << 30, gpu=1)
    )
    r = cli("job", "submit", str(OPENPAI), "--name", "pai-copy", "--vc", "default")
    assert r.exit_code == 0, r.output  # an OpenPAI spec, translated, then renamed
    copy = env.store.get_job("pai-copy")
    assert copy.spec["roles"]["taskrole"]["resources"]["gpu"] == 1


def test_resubmit_copies_the_spec_under_a_new_name(logged_in, cli, tmp_path):
    _, env = logged_in
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("train"))
    assert cli("job", "submit", str(path)).exit_code == 0
    r = cli("job", "resubmit", "train")
    assert r.exit_code == 0, r.output
    assert "train-r2" in r.output
    assert env.store.get_job("train-r2").spec["roles"] == env.store.get_job("train").spec["roles"]
    r = cli("job", "resubmit", "train", "--vc", "research", "-e", "A=1")
    assert r.exit_code == 0 and "train-r3" in r.output
    assert env.store.get_job("train-r3.research").vc == "research"
    assert env.store.get_job("train-r3.research").spec["env"] == {"A": "1"}
    r = cli("job", "resubmit", "train", "--name", "train-again")
    assert r.exit_code == 0 and env.store.get_job("train-again") is not None
    r = cli("job", "resubmit", "train", "--replace")  # it has not finished: refused
    assert r.exit_code == REJECTED
    assert env.store.get_job("train") is not None
    r = cli("job", "resubmit", "trian")
    assert r.exit_code == NOT_FOUND and "did you mean: train" in r.output


def test_submit_and_resubmit_set_paths(logged_in, cli, tmp_path):
    _, env = logged_in
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("base"))
    r = cli(
        "job", "submit", str(path), "--name", "scaled", "--set", "roles.worker.replicas=3",
        "--set", "roles.ps.env.MODE=eval", "--set", "priority=60",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    spec = env.store.get_job("scaled").spec
    assert spec["roles"]["worker"]["replicas"] == 3  # YAML value: an int
    assert spec["roles"]["ps"]["env"] == {"MODE": "eval"}
    assert env.store.get_job("scaled").priority == 60
    r = cli("job", "resubmit", "scaled", "--set", "roles.worker.replicas=1")
    assert r.exit_code == 0, r.output
    assert env.store.get_job("scaled-r2").spec["roles"]["worker"]["replicas"] == 1
    r = cli("job", "submit", str(path), "--set", "roles.ps.replicas.x=1")
    assert r.exit_code == 2 and "roles.ps.replicas.x" in r.output
    r = cli("job", "submit", str(path), "--set", "roles.ps.replicas=-1")  # the API says why
    assert r.exit_code == REJECTED and "roles.ps.replicas" in r.output
    r = cli("job", "submit", str(path), "--set", "noequals")
    assert r.exit_code == 2 and "PATH=VALUE" in r.output
