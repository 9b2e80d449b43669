"""``pasture job submit --dry-run FILE`` against the real API (uvicorn, redis-server): in
a pseudo-terminal and piped, a job that fits (task -> node), one that cannot fit now (the
reason), one that can never fit (refused, exit 6), and nothing stored."""

from __future__ import annotations

import json

from live import job_yaml
from test_cli_output import _pasture, _pasture_in_pty

from scheduler.api.schemas import DryRunOut
from scheduler.cli.output import REJECTED
from scheduler.loop import Loop

BIG = """\
name: {name}
roles:
  main:
    replicas: {replicas}
    resources: {{cpu: 6, memory: 1Gi{gpu}}}
    command: sleep 60
"""


def _big(tmp_path, name: str, replicas: int = 1, gpu: str = ""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(BIG.format(name=name, replicas=replicas, gpu=gpu))
    return path


def test_dry_run_piped_shows_each_task_and_its_node(logged_in, tmp_path):
    _, env = logged_in
    path = tmp_path / "fits.yaml"
    path.write_text(job_yaml("fits"))
    r = _pasture("job", "submit", "--dry-run", str(path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "job fits (vc default, priority 50) is valid; it would be placed now:" in lines
    placed = {}
    for line in lines:
        words = line.replace("│", " ").split()
        if len(words) == 2 and words[1] in ("node-1", "node-2"):
            placed[words[0]] = words[1]
    assert set(placed) == {"ps-0", "worker-0", "worker-1"}
    assert lines[-1] == "dry run: nothing was submitted"
    assert env.store.get_job("fits") is None
    # --json is the API's DryRunOut, parsed by the same model
    r = _pasture("job", "submit", "--dry-run", "--json", str(path))
    answer = DryRunOut.model_validate(json.loads(r.stdout))
    assert [(p.role, p.index) for p in answer.jobs[0].placements] == [
        ("ps", 0),
        ("worker", 0),
        ("worker", 1),
    ]
    assert env.store.get_job("fits") is None


def test_dry_run_in_a_terminal_says_why_it_would_wait(logged_in, cli, tmp_path):
    _, env = logged_in
    assert cli("job", "submit", str(_big(tmp_path, "hog", replicas=2))).exit_code == 0
    Loop(env.store, env.settings).cycle()  # hog holds 6 of the 8 cores of both nodes
    out = _pasture_in_pty("job", "submit", "--dry-run", str(_big(tmp_path, "later")))
    assert "job later (vc default, priority 50) is valid; it would wait:" in out
    assert "(insufficient-resources)" in out
    assert "nodes rejected (of 2): main: 2 by" in out
    assert "dry run: nothing was submitted" in out
    assert env.store.get_job("later") is None
    # with the submit's overrides: the name and the CPU changed, so it fits now
    r = cli(
        "job", "submit", "--dry-run", "--name", "small", "--set", "roles.main.resources.cpu=1",
        str(_big(tmp_path, "later")),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "job small (vc default, priority 50) is valid; it would be placed now:" in r.output
    assert env.store.get_job("small") is None


def test_dry_run_of_a_job_that_can_never_fit_is_refused(logged_in, cli, tmp_path):
    _, env = logged_in
    r = _pasture("job", "submit", "--dry-run", str(_big(tmp_path, "never", gpu=", gpu: 2")))
    assert r.returncode == REJECTED
    assert "can never be placed" in r.stderr
    assert env.store.get_job("never") is None
    assert env.store.list_jobs()[1] == 0
