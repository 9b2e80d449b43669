"""`pasture dev up` then real jobs through the CLI: --wait exit codes, --follow, logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli.output import JOB_NOT_SUCCEEDED

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]

FAILING = """\
name: always-fails
roles:
  main:
    replicas: 1
    resources: {cpu: 100m, memory: 64Mi}
    command: python3 -c "import sys; print('giving up'); sys.exit(3)"
retry: {max_attempts: 1}
"""


@pytest.fixture()
def dev_cluster(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PASTURE_DEV_DIR", str(tmp_path / "dev"))
    r = cli("dev", "up", "--nodes", "2", "--json")
    assert r.exit_code == 0, r.output
    try:
        yield json.loads(r.output)
    finally:
        r = cli("dev", "down")
        assert r.exit_code == 0
        assert "stopped" in r.output


def test_dev_up_then_jobs_without_login(dev_cluster, cli, tmp_path):
    assert dev_cluster["endpoint"].startswith("http://127.0.0.1:")
    assert len(dev_cluster["nodes"]) == 2
    r = cli("node", "list", "--json")  # endpoint and token come from the dev state file
    assert r.exit_code == 0, r.output
    assert sorted(n["name"] for n in json.loads(r.output)) == sorted(dev_cluster["nodes"])

    hello = REPO / "examples" / "jobs" / "hello-gang.yaml"
    r = cli("job", "submit", str(hello), "--wait", "--timeout", "180")
    assert r.exit_code == 0, r.output
    assert "succeeded" in r.output
    r = cli("job", "logs", "hello-gang", "--role", "worker", "--index", "1")
    assert r.exit_code == 0
    assert "=== attempt 1 on" in r.output

    failing = tmp_path / "fail.yaml"
    failing.write_text(FAILING)
    r = cli("job", "submit", str(failing), "--follow")
    assert r.exit_code == JOB_NOT_SUCCEEDED, r.output
    assert "giving up" in r.output  # the streamed log
    assert "failed" in r.output
    r = cli("job", "show", "always-fails")
    assert "exited with code 3" in r.output
