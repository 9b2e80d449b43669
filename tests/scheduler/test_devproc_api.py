"""``devproc.api_server``: the API as its own process on a settings file, up when the block
starts and gone when it ends; an API that cannot start is an error with its log."""

from __future__ import annotations

import urllib.request

import pytest

from scheduler.devproc import DevError, api_server, free_port
from tests.devcluster import scheduler_yaml


def _config(tmp_path, redis_url: str, port: int):
    share = tmp_path / "share"
    share.mkdir(exist_ok=True)
    return scheduler_yaml(tmp_path / "scheduler.yaml", "t", redis_url, share, port)


def test_the_api_answers_inside_the_block_and_is_stopped_after(tmp_path, redis_url):
    port = free_port()
    with api_server(_config(tmp_path, redis_url, port), port, tmp_path) as proc:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        assert proc.alive()
    assert not proc.alive()


def test_an_api_that_exits_while_starting_is_an_error_with_its_log(tmp_path, redis_url):
    port = free_port()
    cfg = _config(tmp_path, redis_url, port)
    cfg.write_text(cfg.read_text() + "api_typo: 1\n")  # unknown field: settings refuse it
    with (
        pytest.raises(DevError, match="exited while starting") as err,
        api_server(cfg, port, tmp_path, timeout=30),
    ):
        pass
    assert "api_typo" in str(err.value)
