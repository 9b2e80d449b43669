"""`pasture job logs` against a process-mode cluster (scheduler.dev): every task of a
3-role job with its `role-index |` prefix, --role/--index, --tail, --attempt, --follow
across a retried attempt until the job ends, and a waiting job's pending reason."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from scheduler import dev

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASK = textwrap.dedent(
    """\
    import os, sys, time
    role, marker = sys.argv[1], sys.argv[2]
    for i in range(1, 4):
        print(f"{role} line {i}", flush=True)
        time.sleep(0.2)
    if role == "evaluator" and not os.path.exists(marker):
        open(marker, "w").close()
        print("evaluator fails once", flush=True)
        sys.exit(1)
    """
)

SPEC = """\
name: three-roles
roles:
  ps:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: {py} {script} ps {marker}
  worker:
    replicas: 2
    resources: {{cpu: 100m, memory: 64Mi}}
    command: {py} {script} worker {marker}
  evaluator:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: {py} {script} evaluator {marker}
retry: {{max_attempts: 2}}
"""
LINE = re.compile(r"^(\S+)\s+\| (.*)$")


@pytest.fixture()
def cluster(tmp_path, monkeypatch):
    directory = tmp_path / "dev"
    monkeypatch.setenv("PASTURE_DEV_DIR", str(directory))
    for var in ("PASTURE_ENDPOINT", "PASTURE_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    c = dev.up(nodes=2, cpu_per_node=2, memory_per_node="4Gi", directory=directory)
    try:
        yield c
    finally:
        dev.down(directory)


def pasture(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        check=False,
    )


def by_task(out: str) -> dict[str, list[str]]:
    """{role-index: [line, ...]} of prefixed output; every line must carry a prefix."""
    tasks: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = LINE.match(line)
        assert m, f"line without a task prefix: {line!r}"
        tasks.setdefault(m.group(1), []).append(m.group(2))
    return tasks


def test_logs_of_every_task_with_prefixes_filters_tail_attempt_and_follow(cluster, tmp_path):
    script = tmp_path / "task.py"
    script.write_text(TASK)
    spec = tmp_path / "three.yaml"
    spec.write_text(SPEC.format(py=sys.executable, script=script, marker=tmp_path / "failed-once"))

    r = pasture("job", "submit", str(spec))
    assert r.returncode == 0, r.stderr
    follow = subprocess.Popen(  # started before any task runs: follows both attempts
        [sys.executable, "-m", "scheduler.cli", "job", "logs", "three-roles", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, _ = follow.communicate(timeout=180)
    finally:
        follow.kill()
    assert follow.returncode == 0
    shown = json.loads(pasture("job", "show", "three-roles", "-o", "json").stdout)["job"]
    assert shown["state"] == "succeeded" and shown["attempt"] == 2

    followed = by_task(out)
    assert set(followed) == {"ps-0", "worker-0", "worker-1", "evaluator-0"}
    assert "evaluator fails once" in followed["evaluator-0"]  # attempt 1
    for key, lines in followed.items():
        role = key.split("-")[0]
        attempts = [line for line in lines if line.startswith("=== attempt")]
        assert [a.split()[2] for a in attempts] == ["1", "2"], (key, lines)
        assert lines.count(f"{role} line 3") == 2  # both attempts, in full

    everything = by_task(pasture("job", "logs", "three-roles").stdout)
    assert everything == followed  # the same lines, once the job has ended

    workers = by_task(pasture("job", "logs", "three-roles", "--role", "worker").stdout)
    assert set(workers) == {"worker-0", "worker-1"}
    one = pasture("job", "logs", "three-roles", "--role", "worker", "--index", "1").stdout
    assert not any(LINE.match(line) for line in one.splitlines())  # one task: no prefix
    assert one.splitlines() == followed["worker-1"]

    tail = by_task(pasture("job", "logs", "three-roles", "--tail", "1").stdout)
    assert tail == {k: ["ps line 3" if k == "ps-0" else f"{k.split('-')[0]} line 3"] for k in tail}
    assert set(tail) == set(followed)

    first = by_task(pasture("job", "logs", "three-roles", "--attempt", "1").stdout)
    assert first["evaluator-0"][-1] == "evaluator fails once"
    assert all(line.split()[2] == "1" for v in first.values() for line in v if "===" in line)
    second = by_task(pasture("job", "logs", "three-roles", "--attempt", "2").stdout)
    assert "evaluator fails once" not in second["evaluator-0"]
    assert second["ps-0"][0].startswith("=== attempt 2 on")


def test_a_waiting_job_says_why_instead_of_404(cluster, tmp_path):
    for node in cluster.nodes:
        assert pasture("node", "cordon", node).returncode == 0
    spec = tmp_path / "wait.yaml"
    spec.write_text(
        "name: waits\nroles:\n  main:\n    resources: {cpu: 100m, memory: 64Mi}\n"
        "    command: echo hi\n"
    )
    assert pasture("job", "submit", str(spec)).returncode == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = json.loads(pasture("job", "show", "waits", "-o", "json").stdout)["job"]
        if job.get("pending_reason"):
            break
        time.sleep(0.5)
    r = pasture("job", "logs", "waits")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "waiting to start" in r.stderr
    assert job["pending_reason"]["message"] in r.stderr
    r = pasture("job", "logs", "waist")
    assert r.returncode == 5 and "did you mean: waits?" in r.stderr
