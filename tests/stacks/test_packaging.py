"""How Pulumi runs the program: the uv toolchain on the repository's venv, where the
project is installed editable, so the program and the local commands it registers import
`stacks` and `scheduler` with no PYTHONPATH; pulumi-command declared and locked."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.stacks

REPO = Path(__file__).resolve().parents[2]


def test_pulumi_runs_python_with_uv_on_the_repository_venv():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["runtime"] == {
        "name": "python",
        "options": {"toolchain": "uv", "virtualenv": ".venv"},
    }
    assert project["main"] == "stacks/"
    # uv's project is the directory Pulumi.yaml is in: `pulumi install` = `uv sync` there
    assert (REPO / "pyproject.toml").is_file() and (REPO / "uv.lock").is_file()


def test_venv_python_imports_the_program_from_anywhere_without_pythonpath(tmp_path):
    """What Pulumi's Python host and the drain/converge commands do: this venv's Python,
    another working directory, no PYTHONPATH, the script's directory not on sys.path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import stacks.program, stacks.drain, stacks.converge, scheduler.inventory\n"
        "print(stacks.program.__file__); print(scheduler.inventory.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    program, inventory = proc.stdout.split()
    assert Path(program) == REPO / "stacks" / "program.py"
    assert Path(inventory) == REPO / "scheduler" / "inventory.py"
    main = (REPO / "stacks" / "__main__.py").read_text()
    assert "sys.path" not in main  # no path hack: the editable install is the one way


def test_drain_command_runs_from_another_directory_and_names_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "PASTURE_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "stacks.drain"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "PASTURE_DRAIN_NODE" in proc.stderr and "PASTURE_API_ENDPOINT" in proc.stderr


def test_pulumi_command_is_declared_and_locked():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert any(d.startswith("pulumi-command") for d in pyproject["dependency-groups"]["stacks"])
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    assert any(p["name"] == "pulumi-command" for p in lock["package"])


def test_no_document_asks_for_pythonpath():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    offenders = [str(d.relative_to(REPO)) for d in docs if "export PYTHONPATH" in d.read_text()]
    assert offenders == []
