"""Contexts: several clusters in the login file, `context use`, `--context`, and the
older single-cluster login file."""

from __future__ import annotations

import redis
import yaml
from live import Env, make_env, serve

from scheduler.cli.output import NOT_CONFIGURED
from scheduler.store import NodeRecord


def test_two_clusters_by_context(api, cli, isolated_config, redis_url, tmp_path):
    url_a, env_a = api
    url_db5 = redis_url.rsplit("/", 1)[0] + "/5"  # a second cluster: its own Redis db
    redis.Redis.from_url(url_db5).flushdb()
    (tmp_path / "b").mkdir()
    env_b: Env = make_env(url_db5, tmp_path / "b")
    env_b.store.register_node(NodeRecord(name="b-only", address="10.9.0.1", cpu_m=1000, memory=1))
    with serve(env_b) as url_b:
        assert cli("login", url_a, "--token", env_a.admin, "--context", "a").exit_code == 0
        r = cli("login", url_b, "--token", env_b.admin, "--context", "b")
        assert r.exit_code == 0 and "current" in r.output
        r = cli("context", "list")
        assert "* b" in r.output and "  a" in r.output and url_a in r.output
        assert (
            cli("node", "list", "-o", "json").output
            == cli("--context", "b", "node", "list", "-o", "json").output
        )
        assert cli("context", "use", "a").exit_code == 0
        assert sorted(cli("node", "list", "-o", "name").output.split()) == ["node-1", "node-2"]
        r = cli("--context", "b", "node", "list", "-o", "name")
        assert "b-only" in r.output.split()
        r = cli("context", "use", "c")
        assert r.exit_code == NOT_CONFIGURED and "known: a, b" in r.output
        r = cli("--context", "c", "job", "list")
        assert r.exit_code == NOT_CONFIGURED and "no context 'c'" in r.output


def test_the_single_cluster_login_file_still_works(api, cli, isolated_config):
    url, env = api
    path = isolated_config / "pasture-config" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"endpoint": url, "token": env.admin}))
    assert cli("vc", "list", "-o", "name").output.split() == ["default", "research"]
    assert "* default" in cli("context", "list").output
