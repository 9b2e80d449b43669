"""The e2e benchmark runs end to end on a tiny cluster and reports consistent figures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_e2e_bench_prints_figures_as_json():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.bench",
            "e2e",
            "--nodes",
            "3",
            "--jobs",
            "12",
            "--rate",
            "20",
            "--run-s",
            "0.3",
            "--max-replicas",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)
    assert figures["nodes"] == 3 and figures["jobs"] == 12
    assert figures["jobs_running_reached"] == 12
    assert 0 < figures["submit_to_running_p50_s"] <= figures["submit_to_running_p99_s"]
    assert figures["submit_to_running_p99_s"] <= figures["submit_to_running_max_s"]
    assert figures["jobs_placed_per_s"] > 0
    for a, b in (("submitted", "queued"), ("queued", "scheduled"), ("scheduled", "running")):
        assert 0 <= figures[f"{a}_to_{b}_p50_s"] <= figures[f"{a}_to_{b}_p99_s"]
    cpu = figures["cpu_ms_per_job"]  # every process measured, each used some CPU
    assert set(cpu) == {"api", "loop", "agents", "redis", "submitter"}
    assert all(v > 0 for v in cpu.values())
    assert figures["loop_failed_cycles"] == 0
