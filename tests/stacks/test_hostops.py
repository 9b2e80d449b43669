"""On-prem host operations against real parts: a real sshd on loopback (its own config,
host key and authorized keys in a temp dir) and a real HTTP server (uvicorn + FastAPI)
standing in for the pasture API's drain route."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest
import uvicorn
from fastapi import FastAPI, Header, HTTPException

from scheduler.dev import free_port
from stacks import hostops
from stacks.hostops import HostOpError, SshTarget
from stacks.onprem_host import HostProvider, delete_host, diff_host
from tests.sshd import keygen, running_sshd

GPU_NAMES = ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1:<free port>; yields (port, dir). Key ``user`` logs in
    plainly; key ``gpuuser`` logs in with PATH starting at a dir holding an ``nvidia-smi``
    that prints what the real one prints on a two-A100 host (no GPU exists here)."""
    d = tmp_path_factory.mktemp("sshd")
    keygen(d / "user")
    keygen(d / "gpuuser")
    keygen(d / "stranger")
    fake_bin = d / "gpu-bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        '[ "$*" = "--query-gpu=name --format=csv,noheader" ] '
        '|| { echo "bad args: $*" >&2; exit 2; }\n' + "".join(f"echo '{n}'\n" for n in GPU_NAMES)
    )
    smi.chmod(0o755)
    gpu_env = f'environment="PATH={fake_bin}:/usr/local/bin:/usr/bin:/bin"'
    authorized = (d / "user.pub").read_text() + f"{gpu_env} " + (d / "gpuuser.pub").read_text()
    with running_sshd(d, authorized, "PermitUserEnvironment yes\n") as port:
        host_key = paramiko.Ed25519Key.from_private_key_file(str(d / "host_key"))
        (d / "known_hosts").write_text(hostops.known_hosts_line("127.0.0.1", port, host_key) + "\n")
        yield port, d


def target(sshd, key: str = "user", **kw) -> SshTarget:
    port, d = sshd
    fields = {
        "name": "node-1",
        "host": "127.0.0.1",
        "port": port,
        "user": "root",
        "private_key": (d / key).read_text(),
        "known_hosts": str(d / "known_hosts"),
        "timeout_s": 10.0,
    }
    fields.update(kw)
    return SshTarget(**fields)


def test_facts_of_a_host_without_gpus(sshd):
    facts = hostops.gather_facts(target(sshd))
    assert facts.cpu == int(subprocess.check_output(["nproc"], text=True))
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    assert facts.memory_mib == mem_kib // 1024
    assert facts.gpu_count == 0 and facts.gpu_model is None and facts.gpu_names == ()
    pretty = next(
        line.split("=", 1)[1].strip('"')
        for line in Path("/etc/os-release").read_text().splitlines()
        if line.startswith("PRETTY_NAME=")
    )
    assert facts.os == pretty


def test_facts_of_a_host_with_nvidia_smi(sshd):
    facts = hostops.gather_facts(target(sshd, key="gpuuser"))
    assert facts.gpu_count == 2
    assert facts.gpu_model == "A100"
    assert facts.gpu_names == tuple(GPU_NAMES)
    assert facts.to_dict()["gpu_names"] == GPU_NAMES


def test_unknown_host_key_is_refused(sshd, tmp_path):
    port, d = sshd
    other = paramiko.Ed25519Key.from_private_key_file(str(d / "stranger"))
    wrong = tmp_path / "known_hosts"
    wrong.write_text(hostops.known_hosts_line("127.0.0.1", port, other) + "\n")
    with pytest.raises(HostOpError, match="node-1: SSH to root@127.0.0.1"):
        hostops.gather_facts(target(sshd, known_hosts=str(wrong)))
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(HostOpError, match="node-1"):
        hostops.gather_facts(target(sshd, known_hosts=str(empty)))


def test_key_not_authorized_is_refused(sshd):
    with pytest.raises(HostOpError, match="Authentication"):
        hostops.gather_facts(target(sshd, key="stranger"))


def test_not_a_key_is_a_clear_error():
    with pytest.raises(HostOpError, match="sshPrivateKey"):
        hostops.load_private_key("hunter2")


def test_failed_command_names_host_and_command(sshd):
    client = hostops.connect(target(sshd))
    try:
        with pytest.raises(HostOpError, match=r"node-1: `false` exited 1"):
            hostops.run(client, "false", name="node-1", timeout_s=10)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla V100-PCIE-16GB", "V100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA L4", "L4"),
    ],
)
def test_gpu_model_names(name, model):
    assert hostops.gpu_model(name) == model


def test_parse_facts_names_the_bad_fact():
    raw = {"cpu": "4\n", "memory_kib": "lots", "os": "Debian", "gpus": ""}
    with pytest.raises(HostOpError, match="fact memory"):
        hostops.parse_facts(raw)
    mixed = hostops.parse_facts({**raw, "memory_kib": "2048", "gpus": "NVIDIA A100\nNVIDIA L4\n"})
    assert mixed.gpu_model == "mixed" and mixed.gpu_count == 2


# --- drain through a real HTTP server ---------------------------------------------------

TOKEN = "admin-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def api():
    """uvicorn + FastAPI with the drain route's contract; yields (endpoint, calls)."""
    app = FastAPI()
    calls: list[tuple[str, str]] = []
    nodes = {"node-1": "ready"}

    @app.post("/api/v1/nodes/{name}/{action}")
    def node_action(name: str, action: str, authorization: str = Header("")) -> dict:
        calls.append((name, action))
        if authorization != f"Bearer {TOKEN}":
            raise HTTPException(403, "admin or agent token required")
        if name not in nodes:
            raise HTTPException(404, f"node {name!r} not found")
        nodes[name] = "draining"
        return {"name": name, "state": nodes[name]}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", calls
    server.should_exit = True
    thread.join(timeout=10)


def test_drain_marks_the_node_draining(api):
    endpoint, calls = api
    result = hostops.drain_node(endpoint, TOKEN, "node-1")
    assert result == hostops.DrainResult(node="node-1", state="draining")
    assert calls[-1] == ("node-1", "drain")


def test_drain_of_a_node_that_never_joined_is_not_an_error(api):
    endpoint, _ = api
    assert hostops.drain_node(endpoint, TOKEN, "node-9").state == "not-registered"


def test_drain_with_a_refused_token_says_so(api):
    endpoint, _ = api
    with pytest.raises(HostOpError, match="refused the token.*apiToken"):
        hostops.drain_node(endpoint, "user-token", "node-1")


def test_drain_with_the_api_down_says_so():
    with pytest.raises(HostOpError, match="cannot reach"):
        hostops.drain_node(f"http://127.0.0.1:{free_port()}", TOKEN, "node-1", timeout_s=2)


# --- the onprem dynamic provider, called directly (Pulumi's mocks never call it) -------


def host_props(sshd, api_endpoint: str = "http://127.0.0.1:9", **kw) -> dict:
    port, d = sshd
    props = {
        "name": "node-1",
        "role": "node",
        "address": "10.0.0.11",
        "ssh_host": "127.0.0.1",
        "ssh_user": "root",
        "ssh_port": port,
        "private_key": (d / "gpuuser").read_text(),
        "known_hosts": str(d / "known_hosts"),
        "api_endpoint": api_endpoint,
        "api_token": TOKEN,
        "api_ca_file": "",
        "drain_on_delete": True,
        "drain_timeout_s": 10,
    }
    props.update(kw)
    return props


def test_provider_create_and_update_record_facts_over_ssh(sshd):
    provider = HostProvider()
    props = host_props(sshd)
    created = provider.create(props)
    assert created.id == "node-1"
    assert created.outs["facts"]["gpu_count"] == 2
    assert created.outs["facts"]["cpu"] == int(subprocess.check_output(["nproc"], text=True))
    assert created.outs["address"] == "10.0.0.11"  # the cluster address, not the SSH one
    updated = provider.update(
        "node-1", created.outs, host_props(sshd, private_key=(sshd[1] / "user").read_text())
    )
    assert updated.outs["facts"]["gpu_count"] == 0  # the plain key's session has no nvidia-smi


def test_provider_create_fails_for_an_unreachable_host(sshd):
    with pytest.raises(HostOpError, match="node-1: SSH"):
        HostProvider().create(host_props(sshd, ssh_port=free_port()))


def test_provider_diff_replaces_on_a_new_address_only(sshd):
    old = host_props(sshd)
    assert not diff_host(old, dict(old)).changes
    moved = diff_host(old, {**old, "address": "10.0.0.99"})
    assert moved.changes and moved.replaces == ["address"] and moved.delete_before_replace
    port = diff_host(old, {**old, "ssh_port": 2200})
    assert port.changes and not port.replaces
    facts_only = diff_host({**old, "facts": {"cpu": 1}}, old)
    assert not facts_only.changes


def test_provider_delete_drains_the_node_first(sshd, api):
    endpoint, calls = api
    before = len(calls)
    HostProvider().delete("node-1", host_props(sshd, api_endpoint=endpoint))
    assert calls[before:] == [("node-1", "drain")]


def test_delete_without_token_keeps_the_host_and_says_what_to_set(sshd, api):
    endpoint, calls = api
    before = len(calls)
    with pytest.raises(HostOpError, match="pasture:apiToken"):
        delete_host(host_props(sshd, api_endpoint=endpoint, api_token=None))
    assert len(calls) == before
    # the master is not a node, and draining can be switched off
    assert delete_host(host_props(sshd, api_endpoint=endpoint, role="master")) is None
    assert delete_host(host_props(sshd, api_endpoint=endpoint, drain_on_delete=False)) is None
    assert len(calls) == before
