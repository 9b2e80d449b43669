"""Run an example program's gang as local processes with a hand-built discovery env."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduler.dev import free_port
from scheduler.examples.gang import local_gang_env

REPO = Path(__file__).resolve().parents[2]


@dataclass
class TaskRun:
    """One finished task: exit code and combined output."""

    returncode: int
    output: str


class Gang:
    """Starts every task of a gang as ``python -m MODULE`` and waits for all of them."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(
        self,
        module: str,
        roles: dict[str, int],
        args: list[str] | None = None,
        python: str = sys.executable,
        only: set[str] | None = None,
    ) -> dict[str, dict[str, str]]:
        """Start tasks (all, or the ``only`` ones, named ``role-index``); returns their envs."""
        envs = local_gang_env(
            {role: [free_port() for _ in range(n)] for role, n in roles.items()},
            job_name="test",
            job_dir=str(self.job_dir),
        )
        for name, env in envs.items():
            if only is not None and name not in only:
                continue
            self.procs[name] = subprocess.Popen(
                [python, "-m", module, *(args or [])],
                env={**os.environ, "PYTHONPATH": str(REPO), **env},
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        return envs

    def wait(self, timeout: float = 120) -> dict[str, TaskRun]:
        """Wait for every started task; a task still running after ``timeout`` s is killed."""
        runs = {}
        for name, proc in self.procs.items():
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            runs[name] = TaskRun(proc.returncode, out)
        return runs

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture(name="free_port")
def free_port_fixture():
    """The :func:`free_port` function."""
    return free_port


@pytest.fixture
def gang(tmp_path: Path):
    g = Gang(tmp_path / "job")
    yield g
    g.stop_all()
