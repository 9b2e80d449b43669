"""Fixtures: the API (with the dashboard) under a real uvicorn on a real redis-server."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from live import Env, make_env, serve  # noqa: E402

from scheduler.cli import app  # noqa: E402

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture()
def env(redis_url: str, tmp_path) -> Env:
    return make_env(redis_url, tmp_path)


@pytest.fixture()
def base(env: Env):
    with serve(env) as url:
        yield url


class Browser:
    """An httpx client that keeps the dashboard's cookies by hand: httpx (like
    http.cookiejar) never sends Secure cookies over plain http, a browser on 127.0.0.1
    does (tests/browser checks that with Chromium)."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=30, follow_redirects=False)
        self.cookies: dict[str, str] = {}
        self.set_cookie_headers: list[str] = []

    def _keep(self, resp: httpx.Response) -> httpx.Response:
        for header in resp.headers.get_list("set-cookie"):
            self.set_cookie_headers.append(header)
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0].strip('"')
            if "max-age=0" in header.lower() or value == "":
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return resp

    def _headers(self) -> dict[str, str]:
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}

    def get(self, path: str, **kw) -> httpx.Response:
        return self._keep(self.http.get(path, headers=self._headers(), **kw))

    def post(self, path: str, data: dict, **kw) -> httpx.Response:
        return self._keep(self.http.post(path, data=data, headers=self._headers(), **kw))

    def login(self, token: str) -> httpx.Response:
        page = self.get("/dashboard/login")
        csrf = CSRF.search(page.text).group(1)
        return self.post("/dashboard/login", {"token": token, "csrf_token": csrf})

    def csrf(self, path: str = "/dashboard/") -> str:
        return CSRF.search(self.get(path).text).group(1)

    def close(self) -> None:
        self.http.close()


@pytest.fixture()
def browser(base):
    made = []

    def make() -> Browser:
        b = Browser(base)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


@pytest.fixture()
def pasture(base, env, tmp_path, monkeypatch):
    """``pasture(*args, token=alice)`` -> CliRunner result, against the live API."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PASTURE_CONFIG_HOME", str(home / "cfg"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PASTURE_ENDPOINT", base)
    runner = CliRunner()

    def run(*args: str, token: str | None = None):
        monkeypatch.setenv("PASTURE_TOKEN", token or env.alice)
        return runner.invoke(app, list(args), catch_exceptions=False)

    return run
