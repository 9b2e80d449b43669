"""On-prem host operations against real parts: a real sshd on loopback (its own config,
host key and authorized keys in a temp dir) and a real HTTP server (uvicorn + FastAPI)
standing in for the pasture API's drain route."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from scheduler.dev import free_port
from stacks import hostops
from stacks.drain import drain_from_env
from stacks.hostops import HostOpError, SshTarget
from tests.sshd import keygen, running_sshd
from tests.stacks.conftest import TOKEN

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


# --- the facts script's output, the host key lookup, the drain command ---------------


def test_facts_script_output_parses_in_one_session(sshd):
    """The script the stack's remote.Command runs, run as one SSH command here."""
    client = hostops.connect(target(sshd, key="gpuuser"))
    try:
        out = hostops.run(client, hostops.FACTS_SCRIPT, name="node-1", timeout_s=10)
    finally:
        client.close()
    assert [line for line in out.splitlines() if line.startswith("::")] == [
        "::cpu",
        "::memory_kib",
        "::os",
        "::gpus",
    ]
    assert hostops.parse_facts_output(out).gpu_names == tuple(GPU_NAMES)


def test_facts_output_without_a_section_names_it():
    with pytest.raises(HostOpError, match=r"no section \['os', 'gpus'\]"):
        hostops.parse_facts_output("::cpu\n4\n::memory_kib\n2048\n")
    with pytest.raises(HostOpError, match="fact cpu"):
        hostops.parse_facts_output("::cpu\nfour\n::memory_kib\n2048\n::os\nDebian\n::gpus\n")


def test_known_host_key_is_the_key_sshd_presents(sshd):
    port, d = sshd
    presented = paramiko.Ed25519Key.from_private_key_file(str(d / "host_key"))
    key = hostops.known_host_key(str(d / "known_hosts"), "127.0.0.1", port, name="node-1")
    assert key == f"ssh-ed25519 {presented.get_base64()}"


def test_known_host_key_prefers_what_the_go_client_negotiates(tmp_path):
    ecdsa, rsa = paramiko.ECDSAKey.generate(), paramiko.RSAKey.generate(2048)
    keygen(tmp_path / "ed")
    ed_type, ed_b64 = (tmp_path / "ed.pub").read_text().split()[:2]
    path = tmp_path / "known_hosts"
    path.write_text(
        f"10.0.0.5 {ed_type} {ed_b64}\n"
        + hostops.known_hosts_line("10.0.0.5", 22, rsa)
        + "\n"
        + hostops.known_hosts_line("10.0.0.5", 22, ecdsa)
        + "\n"
    )
    assert hostops.known_host_key(str(path), "10.0.0.5", 22, name="n").startswith("ecdsa-")
    path.write_text(f"10.0.0.5 {ed_type} {ed_b64}\n")
    assert hostops.known_host_key(str(path), "10.0.0.5", 22, name="n") == f"{ed_type} {ed_b64}"


def test_unknown_host_or_missing_file_says_how_to_add_it(sshd, tmp_path):
    port, d = sshd
    with pytest.raises(
        HostOpError,
        match=rf"host node-2: no key for \[10.0.0.9\]:{port}.*"
        rf"ssh-keyscan -p {port} 10.0.0.9",
    ):
        hostops.known_host_key(str(d / "known_hosts"), "10.0.0.9", port, name="node-2")
    with pytest.raises(HostOpError, match="does not exist; host keys are always verified"):
        hostops.known_host_key(str(tmp_path / "none"), "127.0.0.1", port, name="node-1")


def drain_env(endpoint: str, **kw: str) -> dict[str, str]:
    env = {
        "PASTURE_DRAIN_NODE": "node-1",
        "PASTURE_DRAIN_ON_DELETE": "true",
        "PASTURE_API_ENDPOINT": endpoint,
        "PASTURE_API_TOKEN": TOKEN,
        "PASTURE_API_CA_FILE": "",
        "PASTURE_DRAIN_TIMEOUT_S": "10",
    }
    env.update(kw)
    return env


def test_drain_command_drains_the_node(api):
    endpoint, calls = api
    before = len(calls)
    result = drain_from_env(drain_env(endpoint))
    assert result == hostops.DrainResult(node="node-1", state="draining")
    assert calls[before:] == [("node-1", "drain")]


def test_drain_without_token_says_what_to_set_and_calls_nothing(api):
    endpoint, calls = api
    before = len(calls)
    with pytest.raises(HostOpError, match="cannot remove node-1: draining needs pasture:apiToken"):
        drain_from_env(drain_env(endpoint, PASTURE_API_TOKEN=""))
    assert drain_from_env(drain_env(endpoint, PASTURE_DRAIN_ON_DELETE="false")) is None
    with pytest.raises(HostOpError, match="PASTURE_DRAIN_NODE"):
        drain_from_env(drain_env(endpoint, PASTURE_DRAIN_NODE=""))
    assert len(calls) == before
