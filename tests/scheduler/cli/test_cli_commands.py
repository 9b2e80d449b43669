"""pasture CLI commands (Typer CliRunner) against a real API and redis-server."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml
from live import job_yaml

from scheduler.cli.output import AUTH, NOT_CONFIGURED, NOT_FOUND, REJECTED

pytestmark = pytest.mark.integration


def test_no_endpoint_exits_3(cli):
    r = cli("job", "list")
    assert r.exit_code == NOT_CONFIGURED
    assert "pasture login" in r.output


def test_login_writes_0600_config_and_later_commands_use_it(api, cli, isolated_config):
    url, env = api
    r = cli("login", url, "--token", env.alice)
    assert r.exit_code == 0, r.output
    assert "role user" in r.output
    path = isolated_config / "pasture-config" / "config.yaml"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    saved = yaml.safe_load(path.read_text())
    assert isinstance(saved.pop("current_since"), float)  # when it was chosen
    assert saved == {
        "current": "default",
        "contexts": {"default": {"endpoint": url, "token": env.alice}},
    }
    r = cli("vc", "list")
    assert r.exit_code == 0
    assert "research" in r.output


def test_login_with_a_bad_token_exits_4_and_saves_nothing(api, cli, isolated_config):
    url, _ = api
    r = cli("login", url, "--token", "wrong")
    assert r.exit_code == AUTH
    assert not (isolated_config / "pasture-config" / "config.yaml").exists()


def test_xdg_config_home_is_honoured(api, cli, isolated_config, monkeypatch):
    url, env = api
    monkeypatch.delenv("PASTURE_CONFIG_HOME")
    assert cli("login", url, "--token", env.admin, "--no-check").exit_code == 0
    assert (isolated_config / "xdg_config_home" / "pasture" / "config.yaml").is_file()


def test_job_submit_list_show_logs_stop(logged_in, cli, tmp_path):
    _, env = logged_in
    spec = tmp_path / "job.yaml"
    spec.write_text(job_yaml("hello"))
    r = cli("job", "submit", str(spec))
    assert r.exit_code == 0, r.output
    assert "submitted job hello" in r.output
    r = cli("job", "list")
    assert r.exit_code == 0
    assert "hello" in r.output and "submitted" in r.output
    r = cli("job", "list", "--json")
    assert [j["name"] for j in json.loads(r.output)["items"]] == ["hello"]
    r = cli("job", "show", "hello")
    assert r.exit_code == 0
    assert "events" in r.output and "submitted by root" in r.output
    log = env.share / "jobs" / "hello" / "logs" / "worker-1.log"
    log.parent.mkdir(parents=True)
    log.write_text("hello from worker 1\n")
    r = cli("job", "logs", "hello", "--role", "worker", "--index", "1")
    assert r.exit_code == 0
    assert r.output == "hello from worker 1\n"
    r = cli("job", "stop", "hello")
    assert r.exit_code == 0
    assert env.store.get_job("hello").stop_requested == "stopped by root"


def test_job_errors_have_exit_codes(logged_in, cli, tmp_path, monkeypatch):
    _, env = logged_in
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml("bad").replace("memory: 512Mi", "memory: lots"))
    r = cli("job", "submit", str(bad))
    assert r.exit_code == REJECTED
    assert "roles.worker.resources.memory" in r.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [x\n")
    r = cli("job", "submit", str(broken))
    assert r.exit_code == REJECTED
    assert "malformed YAML" in r.output
    assert cli("job", "show", "ghost").exit_code == NOT_FOUND
    monkeypatch.setenv("PASTURE_TOKEN", env.alice)
    other = tmp_path / "other.yaml"
    other.write_text(job_yaml("other", vc="research"))
    r = cli("job", "submit", str(other))
    assert r.exit_code == AUTH
    assert "research" in r.output


def test_submit_json_file(logged_in, cli, tmp_path):
    _, env = logged_in
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(yaml.safe_load(job_yaml("fromjson"))))
    assert cli("job", "submit", str(spec)).exit_code == 0
    assert env.store.get_job("fromjson") is not None


def test_nodes_vcs_status(logged_in, cli):
    _, env = logged_in
    r = cli("node", "list")
    assert r.exit_code == 0
    assert "node-1" in r.output and "node-2" in r.output and "8 cpu" in r.output
    assert cli("node", "cordon", "node-2").exit_code == 0
    assert env.store.get_node("node-2").state == "cordoned"
    assert cli("node", "drain", "node-1").exit_code == 0
    assert env.store.get_node("node-1").state == "draining"
    assert cli("node", "uncordon", "node-1").exit_code == 0
    assert env.store.get_node("node-1").state == "ready"
    assert cli("node", "cordon", "ghost").exit_code == NOT_FOUND
    # issue 19: the GPU probe's cordon, its reason and event, in node list and node show
    env.store.heartbeat(
        "node-1",
        {
            "gpu_health": [
                {"index": 0, "healthy": False, "problems": ["Xid 79 (GPU has fallen off the bus)"]}
            ]
        },
    )
    assert env.store.request_cordon("node-1", "cordoned by the GPU health probe: GPU 0 unhealthy")
    r = cli("node", "show", "node-1")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    reason = next(line for line in lines if line.split()[:1] == ["reason"])
    assert "cordoned by the GPU" in reason and "GPU 0 unhealthy" in r.output
    assert "Xid 79 (GPU has fallen off the bus)" in r.output and "events" in r.output
    shown = json.loads(cli("node", "show", "node-1", "--json").output)
    assert [e["state"] for e in shown["events"]] == ["cordoned"]
    assert "cordoned by the GPU health probe" in cli("node", "list").output
    assert cli("node", "uncordon", "node-1").exit_code == 0
    assert cli("node", "show", "ghost").exit_code == NOT_FOUND
    r = cli("vc", "list", "--json")
    assert {v["name"] for v in json.loads(r.output)} == {"default", "research"}
    r = cli("status", "--json")
    assert json.loads(r.output)["nodes"] == {"ready": 1, "cordoned": 1}
    r = cli("status")
    assert "cluster test" in r.output


def test_template_job_is_a_valid_spec(cli, tmp_path):
    from scheduler.spec import load_job_spec

    r = cli("template", "job")
    assert r.exit_code == 0
    spec = load_job_spec(r.output)
    assert list(spec.roles) == ["ps", "worker"]
    out = tmp_path / "t.yaml"
    assert cli("template", "job", "-o", str(out)).exit_code == 0
    assert load_job_spec(out.read_text()).name == spec.name


def test_admin_token_create_if_missing_and_output(env, cli, tmp_path):
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(yaml.safe_dump({"redis": {"url": env.settings.redis.url}}))
    out = tmp_path / "tokens" / "ci.token"
    r = cli(
        "admin",
        "token",
        "create",
        "--config",
        str(cfg),
        "--name",
        "ci",
        "--role",
        "user",
        "--vc",
        "default",
        "--output",
        str(out),
    )
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    token = out.read_text().strip()
    assert env.tokens.verify(token).vcs == ("default",)
    r = cli(
        "admin",
        "token",
        "create",
        "--config",
        str(cfg),
        "--name",
        "ci",
        "--role",
        "user",
        "--vc",
        "default",
        "--if-missing",
    )
    assert r.exit_code == 0
    assert r.output == ""
    assert env.tokens.verify(token) is not None  # unchanged
    r = cli("admin", "token", "create", "--config", str(cfg), "--name", "ci", "--role", "admin")
    assert r.exit_code == REJECTED
    r = cli("admin", "token", "create", "--config", str(cfg), "--name", "x", "--role", "root")
    assert r.exit_code == REJECTED and "admin, user, agent" in r.output
    r = cli(
        "admin", "token", "create", "--config", str(cfg), "--name", "printed", "--role", "admin"
    )
    assert env.tokens.verify(r.output.strip()).name == "printed"
    r = cli("admin", "token", "list", "--config", str(cfg))
    assert "printed" in r.output and r.output.count("\n") > 3
    assert cli("admin", "token", "revoke", "ci", "--config", str(cfg)).exit_code == 0
    assert env.tokens.verify(token) is None


def test_admin_vc_apply(env, cli, tmp_path):
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "redis": {"url": env.settings.redis.url},
                "virtual_clusters": [{"name": "prod", "guarantee": {"cpu": 2, "memory": "1Gi"}}],
            }
        )
    )
    r = cli("admin", "vc", "apply", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert set(env.store.vcs()) == {"prod"}


def test_bad_settings_file_is_reported(cli, tmp_path):
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text("api: {port: -1}\n")
    r = cli("admin", "vc", "apply", "--config", str(cfg))
    assert r.exit_code == NOT_CONFIGURED
    assert "api.port" in r.output


def test_image_push_checks_the_inventory_exists(cli):
    r = cli("image", "push", "img", "--inventory", "/nonexistent")
    assert r.exit_code == 2  # Typer's usage error, before anything is saved
    assert "/nonexistent" in r.output


def test_mounted_groups_are_reachable(cli):
    r = cli("inventory", "--help")
    assert r.exit_code == 0
    assert "--from-stack-output" in r.output
    r = cli("sim", "--help")
    assert r.exit_code == 0
    assert "--trace" in r.output


def test_a_missing_mounted_module_fails_clearly(monkeypatch):
    import importlib

    import typer
    from typer.testing import CliRunner

    import scheduler.cli as cli_module

    real_import_module = importlib.import_module

    def import_module(name, *args):
        if name == "scheduler.inventory":
            raise ImportError("simulated: not installed")
        return real_import_module(name, *args)

    monkeypatch.setattr(cli_module, "app", typer.Typer())
    monkeypatch.setattr(cli_module.importlib, "import_module", import_module)
    cli_module._mount("inventory", "scheduler.inventory", "app", "inventory")
    cli_module.app.command("noop")(lambda: None)
    r = CliRunner().invoke(cli_module.app, ["inventory", "--from-stack-output", "x.json"])
    assert r.exit_code == 1
    assert "scheduler.inventory" in r.output and "simulated: not installed" in r.output


def test_job_list_says_when_there_are_more(logged_in, cli, tmp_path):
    for name in ("p1", "p2", "p3"):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(job_yaml(name))
        assert cli("job", "submit", str(spec)).exit_code == 0
    r = cli("job", "list", "--limit", "2")
    assert "p3" in r.output and "p2" in r.output and "p1" not in r.output
    assert "2 of 3 jobs" in r.output
    r = cli("job", "list", "--limit", "2", "--offset", "2")
    assert "p1" in r.output and "p3" not in r.output


def test_job_show_says_which_attempts_the_infrastructure_ended(logged_in, cli, tmp_path):
    _, env = logged_in
    spec = tmp_path / "job.yaml"
    spec.write_text(job_yaml("twice"))
    assert cli("job", "submit", str(spec)).exit_code == 0
    # what the loop's _finish writes when a node was lost under attempt 1
    lost = {
        "attempt": 1,
        "state": "queued",
        "reason": "task worker-0 lost (node_lost): node node-1 lost; requeued",
        "cause": "node_lost",
        "charged": False,
        "nodes": ["node-1"],
        "started": 1.0,
        "ended": 2.0,
    }
    env.store.transition("twice", "queued", lost["reason"], attempt=2, attempts=[lost])
    r = cli("job", "show", "twice")
    assert r.exit_code == 0, r.output
    assert "attempts" in r.output and "node_lost" in r.output
    row = next(line for line in r.output.splitlines() if "node_lost" in line)
    assert " no " in row and "node-1" in row
    r = cli("job", "show", "twice", "--json")
    assert json.loads(r.output)["job"]["attempts"] == [lost]
