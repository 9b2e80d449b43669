"""Scriptable output: no truncation when piped (and whole names in a terminal), -o
wide|json|yaml|name, the job list's columns, node show, --version, did-you-mean."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

import httpx
import yaml
from live import job_yaml

from scheduler.cli.output import NOT_FOUND
from scheduler.loop import Loop
from scheduler.store import NodeRecord

LONG_NODE = "dev-node-1-in-rack-b17-with-a-name-longer-than-any-terminal-column-0123456789"
LONG_JOB = "digits-ps-worker-with-a-long-name-a-table-would-cut-0123456"
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def _pasture(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The real command as a process, stdout piped."""
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )


def _pasture_in_pty(*args: str, columns: int = 100) -> str:
    """The real command with its stdout on a pseudo-terminal; its output without colours."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", *args],
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def _grep(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


def _submit_and_place(env, cli, tmp_path, name: str, spec: str | None = None) -> None:
    path = tmp_path / f"{name[:20]}.yaml"
    path.write_text(spec or job_yaml(name))
    r = cli("job", "submit", str(path))
    assert r.exit_code == 0, r.output
    Loop(env.store, env.settings).cycle()


def _api(url: str, token: str, path: str):
    r = httpx.get(f"{url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"})
    r.raise_for_status()
    return r.json()


def test_piped_tables_keep_long_names_whole(logged_in, cli, tmp_path):
    _, env = logged_in
    env.store.register_node(NodeRecord(name=LONG_NODE, address="10.0.0.9", cpu_m=4000, memory=1))
    _submit_and_place(env, cli, tmp_path, LONG_JOB)
    # COLUMNS=40 would make Rich cut every cell; piped output must ignore it
    r = _pasture("node", "list", COLUMNS="40")
    assert r.returncode == 0, r.stderr
    assert len(_grep(r.stdout, LONG_NODE)) == 1  # `pasture node list | grep NAME`
    r = _pasture("job", "list", COLUMNS="40")
    assert len(_grep(r.stdout, LONG_JOB)) == 1
    assert len(_grep(_pasture("vc", "list", COLUMNS="40").stdout, "default")) == 1


def test_a_terminal_gets_whole_names_too(logged_in, cli, tmp_path):
    _, env = logged_in
    env.store.register_node(NodeRecord(name=LONG_NODE, address="10.0.0.9", cpu_m=4000, memory=1))
    _submit_and_place(env, cli, tmp_path, LONG_JOB)
    out = _pasture_in_pty("node", "list", columns=120)
    assert "│" in out or "┃" in out  # a Rich table, drawn for a terminal
    assert len(_grep(out, LONG_NODE)) == 1
    out = _pasture_in_pty("job", "list", columns=120)
    assert len(_grep(out, LONG_JOB)) == 1


def test_json_and_yaml_round_trip_to_the_api(logged_in, cli, tmp_path):
    url, env = logged_in
    _submit_and_place(env, cli, tmp_path, "rt-one")
    _submit_and_place(env, cli, tmp_path, "rt-two")
    pairs = [
        (("job", "list"), "/jobs"),
        (("node", "list"), "/nodes"),
        (("vc", "list"), "/vcs"),
    ]
    for args, path in pairs:
        api = _api(url, env.admin, path)
        assert json.loads(_pasture(*args, "-o", "json").stdout) == api
        assert yaml.safe_load(_pasture(*args, "-o", "yaml").stdout) == api
    shown = json.loads(_pasture("job", "show", "rt-one", "-o", "json").stdout)
    assert shown["job"] == _api(url, env.admin, "/jobs/rt-one")
    assert shown["events"] == _api(url, env.admin, "/jobs/rt-one/events")["events"]
    node = json.loads(_pasture("node", "show", "node-1", "-o", "json").stdout)
    api_node = _api(url, env.admin, "/nodes/node-1")
    assert {k: node[k] for k in api_node} == api_node


def test_output_name_lists_one_name_per_line(logged_in, cli, tmp_path):
    _, env = logged_in
    _submit_and_place(env, cli, tmp_path, "named-a")
    _submit_and_place(env, cli, tmp_path, "named-b")
    assert cli("job", "list", "-o", "name").output.split() == ["named-b", "named-a"]
    assert sorted(cli("node", "list", "-o", "name").output.split()) == ["node-1", "node-2"]
    assert sorted(cli("vc", "list", "-o", "name").output.split()) == ["default", "research"]


GPU_JOB = """\
name: gpu-job
roles:
  trainer:
    replicas: 2
    resources: {cpu: 1, memory: 1Gi, gpu: 2}
    command: python3 train.py
"""


def test_job_list_has_gpus_age_run_time_reason_and_wide_nodes(logged_in, cli, tmp_path):
    _, env = logged_in
    env.store.register_node(
        NodeRecord(name="gpu-node", address="10.0.0.7", cpu_m=16000, memory=64 << 30, gpu=4)
    )
    _submit_and_place(env, cli, tmp_path, "gpu-job", GPU_JOB)
    big = job_yaml("too-big").replace("cpu: 1,", "cpu: 64,")
    path = tmp_path / "big.yaml"
    path.write_text(big)
    cli("job", "submit", str(path))  # may be refused as never fitting: then it is not listed
    Loop(env.store, env.settings).cycle()
    r = _pasture("job", "list")
    header = r.stdout.splitlines()[1]
    for column in ("gpus", "age", "run time", "reason"):
        assert column in header
    (row,) = _grep(r.stdout, "gpu-job")
    assert re.search(r"│\s*4\s*│", row)  # 2 replicas x 2 GPUs
    assert re.search(r"│\s*\d+s\s*│", row)  # its age
    r = _pasture("job", "list", "-o", "wide")
    (row,) = _grep(r.stdout, "gpu-job")
    assert "gpu-node" in row  # the nodes of its tasks
    job = env.store.get_job("too-big")
    if job is not None:
        (row,) = _grep(_pasture("job", "list").stdout, "too-big")
        assert job.pending_reason and job.pending_reason["message"][:30] in row


def test_node_show_capacity_allocated_free_tasks(logged_in, cli, tmp_path):
    _, env = logged_in
    env.store.register_node(
        NodeRecord(
            name="gpu-node",
            address="10.0.0.7",
            cpu_m=16000,
            memory=64 << 30,
            gpu=4,
            labels={"rack": "b17"},
        )
    )
    _submit_and_place(env, cli, tmp_path, "gpu-job", GPU_JOB)
    data = json.loads(cli("node", "show", "gpu-node", "-o", "json").output)
    assert data["allocated"] == {"cpu_m": 2000, "memory": 2 << 30, "gpu": 4}
    assert data["free"] == {"cpu_m": 14000, "memory": 62 << 30, "gpu": 0}
    assert sorted((t["job"], t["role"], t["index"]) for t in data["tasks"]) == [
        ("gpu-job", "trainer", 0),
        ("gpu-job", "trainer", 1),
    ]
    out = _pasture("node", "show", "gpu-node").stdout
    assert _grep(out, "capacity")[0].rstrip().endswith("16 cpu, 64Gi, 4 gpu")
    assert _grep(out, "allocated")[0].rstrip().endswith("2 cpu, 2Gi, 4 gpu")
    assert _grep(out, "free")[0].rstrip().endswith("14 cpu, 62Gi, 0 gpu")
    assert "rack=b17" in out and "heartbeat" in out
    assert len(_grep(out, "gpu-job")) == 2
    r = cli("node", "show", "ghost")
    assert r.exit_code == NOT_FOUND


def test_version_and_status_without_a_store_counter(logged_in, cli):
    from importlib.metadata import version

    r = cli("--version")
    assert r.exit_code == 0 and r.output.strip() == f"pasture {version('pasture')}"
    r = cli("status")
    assert r.exit_code == 0
    assert "version" not in r.output


def test_unknown_job_names_get_a_did_you_mean(logged_in, cli, tmp_path):
    _, env = logged_in
    _submit_and_place(env, cli, tmp_path, "digits-ps-worker")
    for args in (("show", "digits-ps-wroker"), ("stop", "digits-ps-wroker")):
        r = cli("job", *args)
        assert r.exit_code == NOT_FOUND
        assert "did you mean: digits-ps-worker?" in r.output
    r = cli("job", "show", "zzz")
    assert r.exit_code == NOT_FOUND and "did you mean" not in r.output


def test_wait_timeout_message_gets_its_own_line_in_a_terminal(logged_in, tmp_path):
    path = tmp_path / "stuck.yaml"
    path.write_text(job_yaml("stuck"))  # no loop runs in this test: it stays submitted
    out = _pasture_in_pty("job", "submit", str(path), "--wait", "--timeout", "1.5")
    lines = [line.split("\r")[-1] for line in out.replace("\r\n", "\n").split("\n")]
    assert any(line.startswith("timeout: job stuck still submitted") for line in lines), out
