"""`python -m scheduler.bench cli` runs against a real dev cluster and prints its figures
(the figures are read, not asserted against the target: speed is no timed test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_cli_bench_prints_figures_as_json(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler.bench", "cli", "--repeat", "2", "--jobs", "3"]
        + ["--nodes", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)
    assert figures["jobs"] == 3 and figures["repeat"] == 2
    assert figures["pythondontwritebytecode"] == 1
    assert 0 <= figures["bytecode_compiled_share"] <= 1
    commands = ("python_startup", "import_cli", "help", "version", "job_list", "node_list")
    for command in (*commands, "complete_job_name"):
        median, worst = figures[f"{command}_wall_median_s"], figures[f"{command}_wall_max_s"]
        assert 0 < figures[f"{command}_wall_min_s"] <= median <= worst
        assert figures[f"{command}_cpu_median_s"] > 0
    # the bare interpreter is the floor under every command
    assert figures["python_startup_cpu_median_s"] <= figures["job_list_cpu_median_s"]
