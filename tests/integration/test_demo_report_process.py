"""scripts/demo_report.py (the verdict of `make demo` and of the e2e test) against a real
process-mode cluster: the typed API client's answers, a succeeded job with its accuracy,
and a red exit when the accuracy is too low. Seconds, so that `make test-python` already
fails when the report breaks (the e2e stage runs it again on the podman cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import dev
from scheduler.spec import parse_job_spec

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def _job(name: str, accuracy: str) -> dict[str, object]:
    """A two-role job whose ps prints the accuracy line the digits example prints."""
    return {
        "name": name,
        "roles": {
            "ps": {
                "command": f"python3 -c \"print('step 1/1'); print('test accuracy: {accuracy}')\"",
                "resources": {"cpu": "100m", "memory": "64Mi"},
            },
            "worker": {
                "replicas": 2,
                "command": "true",
                "resources": {"cpu": "100m", "memory": "64Mi"},
            },
        },
        "retry": {"max_attempts": 1},
    }


def _report(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PASTURE_DEV_DIR": str(tmp_path / "dev"),
        "PASTURE_CONFIG_HOME": str(tmp_path / "config"),
        "PYTHONPATH": str(REPO),
    }
    for var in ("PASTURE_ENDPOINT", "PASTURE_TOKEN", "PASTURE_CA_CERT", "PASTURE_CONTEXT"):
        env.pop(var, None)
    return subprocess.run(
        [sys.executable, "scripts/demo_report.py", name, "--wait", "60", *args],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=90,
    )


def test_demo_report_passes_a_good_job_and_fails_a_bad_one(tmp_path):
    cluster = dev.up(nodes=1, directory=tmp_path / "dev", heartbeat_interval_s=0.5)
    try:
        store = cluster.store()
        store.create_job(parse_job_spec(_job("good", "0.975")))
        store.create_job(parse_job_spec(_job("weak", "0.500")))

        good = _report(tmp_path, "good", "--json")
        assert good.returncode == 0, good.stdout + good.stderr
        report = json.loads(good.stdout)
        assert report["state"] == "succeeded" and report["test_accuracy"] == 0.975
        assert sorted(t["task"] for t in report["tasks"]) == ["ps-0", "worker-0", "worker-1"]
        assert report["nodes"] == ["dev-node-0"]
        assert report["run_time_s"] is not None and report["run_time_s"] >= 0
        assert report["jct_s"] >= report["run_time_s"]

        weak = _report(tmp_path, "weak", "--min-accuracy", "0.9")
        assert weak.returncode == 1, weak.stdout + weak.stderr
        assert "test accuracy:   0.500" in weak.stdout
        assert "test accuracy 0.5 is below 0.9" in weak.stderr
    finally:
        assert dev.down(tmp_path / "dev")
