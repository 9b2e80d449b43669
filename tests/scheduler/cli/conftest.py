"""Fixtures for CLI tests: the real API (uvicorn + redis-server) and an isolated config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from live import Env, make_env, serve  # noqa: E402

from scheduler.cli import app  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    """Config, home and XDG dirs in tmp; no endpoint/token from the environment."""
    home = tmp_path / "home"
    home.mkdir()
    for var in ("PASTURE_ENDPOINT", "PASTURE_TOKEN", "PASTURE_CA_CERT", "PASTURE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PASTURE_CONFIG_HOME", str(home / "pasture-config"))
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("COLUMNS", "200")
    return home


@pytest.fixture()
def env(redis_url: str, tmp_path) -> Env:
    return make_env(redis_url, tmp_path)


@pytest.fixture()
def api(env: Env):
    with serve(env) as url:
        yield url, env


@pytest.fixture()
def cli():
    """``cli(*args, input=None) -> Result`` running the pasture app in-process."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return run


@pytest.fixture()
def logged_in(api, monkeypatch):
    """The API with PASTURE_ENDPOINT/PASTURE_TOKEN set to an admin token."""
    url, env = api
    monkeypatch.setenv("PASTURE_ENDPOINT", url)
    monkeypatch.setenv("PASTURE_TOKEN", env.admin)
    return url, env
