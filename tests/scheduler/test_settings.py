import pytest

from scheduler.settings import SettingsError, load_agent_settings, load_scheduler_settings, main

SCHEDULER = """
cluster_name: local
redis:
  url: redis://127.0.0.1:6379/0
  username: null
  password_file: {pw}
share_dir: /srv/pasture/share
api: {{host: 127.0.0.1, port: 8443, tls_cert: null, tls_key: null, max_body_bytes: 1048576}}
loop: {{interval_s: 1.0, heartbeat_timeout_s: 30, policy: pasture}}
virtual_clusters:
  - name: default
    guarantee: {{cpu: 8, memory: 16Gi, gpu: 0}}
    max: null
    can_borrow: true
"""

AGENT = """
node_name: node-1
address: 10.77.1.11
redis: {url: "redis://10.77.1.10:6379/0", username: pasture-agent, password: pw}
share_dir: /mnt/pasture
executor: container
container_cli: podman
task_network: host
heartbeat_interval_s: 5
work_dir: /var/lib/pasture
port_range: [20000, 29999]
resources: {cpu: null, memory: null, gpu: null, gpu_model: null}
labels: {}
"""


def test_the_documented_files_load(tmp_path, monkeypatch):
    monkeypatch.delenv("PASTURE_REDIS_PASSWORD", raising=False)
    (tmp_path / "pw").write_text("s3cret\n")
    (tmp_path / "s.yaml").write_text(SCHEDULER.format(pw=tmp_path / "pw"))
    s = load_scheduler_settings(tmp_path / "s.yaml")
    assert s.redis.resolved_password() == "s3cret"
    assert s.virtual_clusters[0].guarantee.cpu == 8000
    assert s.virtual_clusters[0].guarantee.memory == 16 * 2**30
    (tmp_path / "a.yaml").write_text(AGENT)
    a = load_agent_settings(tmp_path / "a.yaml")
    assert a.port_range == (20000, 29999) and a.redis.resolved_password() == "pw"


def test_env_overrides(tmp_path, monkeypatch):
    (tmp_path / "a.yaml").write_text(AGENT)
    monkeypatch.setenv("PASTURE_CONFIG", str(tmp_path / "a.yaml"))
    monkeypatch.setenv("PASTURE_REDIS_URL", "redis://other:1/2")
    monkeypatch.setenv("PASTURE_REDIS_PASSWORD", "fromenv")
    a = load_agent_settings()
    assert a.redis.url == "redis://other:1/2" and a.redis.resolved_password() == "fromenv"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("node_name: n\nexecuter: process\n", "executer"),
        ("node_name: n\nport_range: [30000, 20000]\n", "port_range"),
        ("node_name: n\nresources: {memory: 4Qi}\n", "resources.memory"),
        ("node_name: n\nexecutor: vm\n", "executor"),
        ("node_name: [\n", "not valid YAML"),
    ],
)
def test_bad_agent_settings_name_the_field(tmp_path, text, where):
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(SettingsError, match=where.replace("[", r"\[")):
        load_agent_settings(tmp_path / "a.yaml")


def test_an_unknown_loop_policy_is_refused_when_the_file_is_read(tmp_path):
    # before, any string loaded and the loop died at start with a KeyError
    (tmp_path / "s.yaml").write_text("loop: {policy: pastur}\n")
    with pytest.raises(SettingsError, match=r"loop\.policy: .*expected one of .*pasture.*'pastur'"):
        load_scheduler_settings(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text("loop: {policy: tiresias-las}\n")
    assert load_scheduler_settings(tmp_path / "s.yaml").loop.policy == "tiresias-las"


def test_the_check_the_roles_validate_with_exits_1_naming_the_field(tmp_path, capsys):
    # roles/pasture_master and pasture_node run it on the rendered file (`validate:`)
    (tmp_path / "s.yaml").write_text("loop: {policy: pastur}\n")
    assert main(["scheduler", str(tmp_path / "s.yaml")]) == 1
    assert "loop.policy" in capsys.readouterr().err
    (tmp_path / "s.yaml").write_text("loop: {policy: pasture}\n")
    assert main(["scheduler", str(tmp_path / "s.yaml")]) == 0
    assert main(["agent", str(tmp_path / "s.yaml")]) == 1  # not an agent file
    assert "node_name" in capsys.readouterr().err
    (tmp_path / "a.yaml").write_text(AGENT)
    assert main(["agent", str(tmp_path / "a.yaml")]) == 0


def test_missing_file_and_tls_pair(tmp_path):
    with pytest.raises(SettingsError, match="cannot read"):
        load_scheduler_settings(tmp_path / "none.yaml")
    (tmp_path / "s.yaml").write_text("api: {tls_cert: /x.crt}\n")
    with pytest.raises(SettingsError, match="together"):
        load_scheduler_settings(tmp_path / "s.yaml")
