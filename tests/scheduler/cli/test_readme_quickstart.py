"""The README's local quick start, run exactly as written (issue 34, item 2): the
``bash quickstart`` block of README.md in a fresh directory, with the project's
``pasture`` first on PATH and the dev cluster's state in a temporary directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def quickstart() -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash quickstart\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "README.md has one ```bash quickstart block"
    return str(blocks[0])


def test_readme_quick_start_runs_as_written(tmp_path, isolated_config):
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PASTURE_DEV_DIR": str(tmp_path / "dev"),
    }
    script = "set -euo pipefail\n" + quickstart()
    try:
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "scheduler.cli", "dev", "down"],
            env=env,
            capture_output=True,
            timeout=120,
        )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # dev up says where the settings are and how to add a user and a VC
    settings = re.search(r"settings: (\S+) \(the admin commands' --config\)", out)
    assert settings and Path(settings.group(1)).name == "scheduler.yaml", out
    assert f"pasture admin token create --config {settings.group(1)}" in out
    assert f"pasture admin vc apply --config {settings.group(1)}" in out
    assert "copied 1 file(s)" in out
    assert "job my-first-job: succeeded" in out
    assert "main-0 | hello from main 0" in out
